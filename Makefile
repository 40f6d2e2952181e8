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

.PHONY: demo test lint install clean

$(BIN)/ksearch: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(BIN)/ksearch

install: $(BIN)/ksearch

demo: $(BIN)/ksearch
	$(BIN)/ksearch demo --budget $(DEMO_BUDGET)

test: $(BIN)/ksearch
	$(BIN)/python -m pytest -q

lint: $(BIN)/ksearch
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy src

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
