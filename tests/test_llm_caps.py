"""Caps that hold: each call's max_tokens is what the token and USD caps leave after its prompt; a reply claiming
more than its bound ends the run at the cap plus at most that bound, with the reason said; a call lost to a kill
counts at its bound when the run resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ksearch.search.loop")

from fake_llm_server import SOFTMAX_KERNELS, FakeLLMServer, KSearchScript, Reply, fenced, heading, softmax_ctx  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from ksearch.cli import app  # noqa: E402
from ksearch.config import LLMConfig  # noqa: E402
from ksearch.errors import BudgetExhausted  # noqa: E402
from ksearch.policy.base import CallBound, CallRecord  # noqa: E402
from ksearch.policy.llm import make_policy  # noqa: E402
from ksearch.policy.llm.fitting import messages_tokens  # noqa: E402
from ksearch.policy.llm.pricing import MIN_ANSWER_TOKENS, Budget  # noqa: E402
from ksearch.report.rundata import load_run  # noqa: E402
from ksearch.report.summary import headline  # noqa: E402
from ksearch.store import RunNotFound, RunReader, RunUnreadable, list_runs, read_run  # noqa: E402

pytest.importorskip("openai")


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def only_run(runs: Path) -> Path:
    found = [d for d in runs.iterdir() if (d / "run.db").is_file()]
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """fake-model at $10 per million tokens in, $12 out."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"fake-model": {"input": 10.0, "output": 12.0}}))
    monkeypatch.setenv("KSEARCH_LLM_PRICES", str(prices))
    monkeypatch.setenv("KSEARCH_LLM_BACKOFF_S", "0.01")
    return prices


# -- the bound of one call ---------------------------------------------------------------------------------------


def test_max_tokens_is_what_the_token_cap_leaves_after_the_prompt():
    b = Budget(max_tokens=10_000)
    b.add(4000, 1000, 0.0)
    assert b.answer_room("m", 3000, 8192) == 2000
    assert b.answer_room("m", 100, 1000) == 1000  # the cap is not what limits this one
    assert b.answer_room("m", 5000 - MIN_ANSWER_TOKENS, 8192) == MIN_ANSWER_TOKENS  # just room for an answer
    with pytest.raises(BudgetExhausted, match="token cap reached: 5000 tokens used, cap 10000") as exc:
        b.answer_room("m", 5000 - MIN_ANSWER_TOKENS + 1, 8192)
    assert exc.value.cap == "tokens"
    assert b.answer_room("m", 4990, 8) == 8  # an answer that wants less needs less


def test_max_tokens_is_what_the_usd_cap_pays_for_after_the_prompt():
    b = Budget(prices={"m": (1.0, 4.0)}, max_usd=0.01)
    b.add(0, 0, 0.004)  # $0.006 left
    assert b.answer_room("m", 2000, 8192) == 1000  # the prompt costs $0.002; $0.004 pays 1000 answer tokens
    assert b.answer_room("m", 1000, 1000) == 1000
    assert b.answer_room("unpriced", 2000, 8192) == 8192  # no price: the USD cap cannot bound it
    assert b.answer_room("m", 6000 - 4 * MIN_ANSWER_TOKENS, 8192) == MIN_ANSWER_TOKENS
    with pytest.raises(BudgetExhausted, match="spending cap reached") as exc:
        b.answer_room("m", 6000 - 4 * MIN_ANSWER_TOKENS + 1, 8192)
    assert exc.value.cap == "usd"


def test_a_claim_past_the_bound_that_breaks_a_cap_counts_at_the_bound_and_stops():
    b = Budget(prices={"m": (10.0, 12.0)}, max_usd=1.0)
    b.add(0, 0, 0.5)
    bound = (700, 8192, b.bound_cost("m", 700, 8192))
    counted, note = b.count((5_000_000, 200_000, 52.4), bound)
    assert counted == bound
    assert note and "claimed 5,200,000 tokens ($52.4000)" in note and "the USD cap of $1" in note
    b.add(*counted)
    assert b.cost_usd <= 1.0 + bound[2]
    with pytest.raises(BudgetExhausted, match="claimed 5,200,000 tokens"):
        b.check()
    # The counters and the stop survive a state round trip (what a resume restores).
    again = Budget(prices=b.prices, max_usd=1.0)
    again.load_state(b.state())
    assert (again.cost_usd, again.stop_note) == (b.cost_usd, b.stop_note)


def test_claims_that_break_no_cap_or_stay_within_their_bound_count_as_claimed():
    b = Budget(max_tokens=1_000_000)
    assert b.count((900, 20, 0.0), (700, 100, 0.0)) == ((900, 20, 0.0), None)  # past the bound, far from the cap
    b = Budget(max_tokens=1000)
    b.add(900, 0, 0.0)
    assert b.count((60, 60, 0.0), (100, 100, 0.0)) == ((60, 60, 0.0), None)  # within its bound, past the cap
    b.add(60, 60, 0.0)
    with pytest.raises(BudgetExhausted, match="token cap"):
        b.check()


def test_the_policy_sends_the_bounded_max_tokens_and_announces_the_bound_first(priced):
    with FakeLLMServer(KSearchScript()) as server:
        cfg = LLMConfig(preset="vllm", base_url=server.url, model="fake-model", max_tokens_total=1200,
                        max_retries=0, request_timeout_s=5.0)
        pol = make_policy(cfg, prices=priced, environ={}, backoff_base_s=0.001, seed=0, discover=False)
        calls: list[CallRecord] = []
        ctx = softmax_ctx(calls)
        order: list[str] = []
        bounds: list[CallBound] = []
        ctx.begin_call = lambda b: (bounds.append(b), order.append("begin"))  # type: ignore[func-returns-value]
        ctx.record_call = lambda c: (calls.append(c), order.append("record"))  # type: ignore[func-returns-value]
        pol.analyse(ctx)
        body = server.chat_requests()[0]["body"]
        assert order == ["begin", "record"]
        assert bounds[0].tokens_in == messages_tokens(body["messages"])
        assert body["max_tokens"] == bounds[0].tokens_out == 1200 - bounds[0].tokens_in
        assert bounds[0].cost_usd == pytest.approx((bounds[0].tokens_in * 10 + bounds[0].tokens_out * 12) / 1e6)
        # The next question does not fit in what is left: refused before anything is sent.
        with pytest.raises(BudgetExhausted, match="do not fit"):
            pol.analyse(ctx)
        assert len(server.chat_requests()) == 1 and len(bounds) == 1


# -- runs --------------------------------------------------------------------------------------------------------

CLAIMED_CODE = Reply("Here.\n\n" + fenced("python", SOFTMAX_KERNELS["compiled"]), tokens_in=5_000_000,
                     tokens_out=200_000)


@pytest.mark.slow
def test_a_reply_claiming_5m_tokens_ends_the_run_at_the_usd_cap_with_the_reason_said(tmp_path, priced):
    script = KSearchScript(faults=[("# Code: first", CLAIMED_CODE)])
    runs = tmp_path / "runs"
    with FakeLLMServer(script) as server:
        result = invoke("run", "softmax", "--backend", "mlx-cpu", "--policy", "llm", "--preset", "vllm",
                        "--base-url", server.url, "--model", "fake-model", "--max-usd", "1", "--budget", "6",
                        "--runs-dir", str(runs), "--quiet")
        asked = len(server.chat_requests())
    assert result.exit_code == 0, result.output
    run = only_run(runs)
    recs = read_run(run)
    calls = RunReader(run).calls(texts=True)
    claimed = [c for c in calls if c.tokens_in == 5_000_000]
    assert len(claimed) == 1 and claimed[0].cost_usd == pytest.approx(52.4)  # the claim, recorded as made
    assert calls[-1].id == claimed[0].id and asked == len(calls)  # nothing asked after it
    u = recs.meta.llm_usage
    others = sum(c.cost_usd or 0.0 for c in calls if c.id != claimed[0].id)
    # The claimed call's bound: its prompt (3 characters a token, and the messages' overhead) and at most
    # max_output_tokens, priced.
    call_bound = ((len(claimed[0].prompt or "") / 3 + 64) * 10 + 8192 * 12) / 1e6
    assert 0 < u["cost_usd"] - others <= call_bound
    assert u["cost_usd"] <= 1.0 + call_bound
    assert u["claimed_tokens"] == 5_200_000 and u["claimed_cost_usd"] == pytest.approx(52.4)
    assert recs.meta.status == "finished" and recs.meta.stop_kind == "usd_cap"
    text = " ".join(result.output.split())
    assert "finished: LLM cap reached: the endpoint claimed 5,200,000 tokens ($52.4000) for one call" in text
    facts = dict(headline(load_run(run)))
    assert facts["status"].startswith("finished: LLM cap reached: the endpoint claimed 5,200,000 tokens")
    assert "the endpoint claimed 5,200,000 tokens / $52.4000 past a call's bound" in facts["LLM spend"]
    assert list_runs(runs)[0]["stop_kind"] == "usd_cap"
    # The cap cannot be raised: a resume, even with more budget, is refused with the reason.
    again = invoke("run", "--resume", run.name, "--budget", "12", "--runs-dir", str(runs), "--quiet")
    assert again.exit_code == 2 and "claimed more than a call's bound" in " ".join(again.output.split())


@pytest.mark.slow
def test_an_honest_run_ends_at_its_token_cap_not_past_it(tmp_path, priced):
    config = tmp_path / "run.toml"
    config.write_text("[llm]\nmax_tokens_total = 9000\n")
    runs = tmp_path / "runs"
    with FakeLLMServer(KSearchScript()) as server:
        result = invoke("run", "softmax", "--backend", "mlx-cpu", "--policy", "llm", "--preset", "vllm",
                        "--base-url", server.url, "--model", "fake-model", "--budget", "20", "--config", str(config),
                        "--runs-dir", str(runs), "--quiet")
        sent = [r["body"]["max_tokens"] for r in server.chat_requests()]
    assert result.exit_code == 0, result.output
    recs = read_run(only_run(runs))
    u = recs.meta.llm_usage
    assert u["tokens_in"] + u["tokens_out"] <= 9000
    assert u["tokens_in"] == sum(c.tokens_in or 0 for c in recs.calls)
    assert recs.meta.stop_kind == "token_cap" and recs.meta.evaluations_done < 20
    assert "finished: LLM token cap reached" in " ".join(result.output.split())
    assert sent[-1] < 8192  # the last call's answer was bounded by what the cap left


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_call_lost_to_sigkill_counts_at_its_bound_when_the_run_resumes(tmp_path, priced):
    script = KSearchScript()
    stalled, release = threading.Event(), threading.Event()

    def stall_the_first_code_call(body: dict[str, Any]) -> Any:
        if heading(body).startswith("# Code") and not release.is_set():
            stalled.set()
            release.wait(300)  # the client is killed meanwhile
            return Reply("too late")
        return script(body)

    config = tmp_path / "run.toml"
    config.write_text("[llm]\nrequest_timeout_s = 300.0\nmax_retries = 0\nmax_tokens_total = 5000000\n")
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    # A budget of 2: the starting kernel before the kill, then the candidate whose code call the kill cut off.
    with FakeLLMServer(stall_the_first_code_call) as server:
        proc = subprocess.Popen([sys.executable, "-m", "ksearch.cli", "run", "softmax", "--backend", "mlx-cpu",
                                 "--policy", "llm", "--preset", "vllm", "--base-url", server.url, "--model",
                                 "fake-model", "--budget", "2", "--config", str(config), "--runs-dir", str(runs),
                                 "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        try:
            in_flight = None
            deadline = time.monotonic() + 600
            while in_flight is None and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.3)
                if stalled.is_set():
                    in_flight = _meta_key(runs, "llm_call_in_flight")
            assert in_flight is not None, proc.communicate(timeout=5)[0][-3000:]
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            release.set()
        run = only_run(runs)
        before = read_run(run)
        assert before.meta.status == "running"  # as the killed process left it
        [row] = list_runs(runs)
        assert row["status"] == "interrupted" and row["stop_kind"] == "interrupted"
        listed = subprocess.run([sys.executable, "-m", "ksearch.cli", "runs", "--runs-dir", str(runs)],
                                capture_output=True, text=True, env={**env, "COLUMNS": "250"}, timeout=120)
        assert "interrupted" in listed.stdout, listed.stdout + listed.stderr
        assert dict(headline(load_run(run)))["status"].startswith(f"interrupted: its search process (pid {proc.pid})")
        assert in_flight["role"] == "code" and in_flight["tokens_out"] > 0
        resumed = invoke("run", "--resume", run.name, "--runs-dir", str(runs), "--quiet")
    assert resumed.exit_code == 0, resumed.output
    recs = read_run(run)
    calls = recs.calls
    u = recs.meta.llm_usage
    assert u["lost_calls"] == 1 and u["calls"] == len(calls)
    assert u["tokens_in"] == sum(c.tokens_in or 0 for c in calls) + in_flight["tokens_in"]
    assert u["tokens_out"] == sum(c.tokens_out or 0 for c in calls) + in_flight["tokens_out"]
    assert u["cost_usd"] == pytest.approx(sum(c.cost_usd or 0.0 for c in calls) + in_flight["cost_usd"])
    assert "llm_call_in_flight" not in recs.meta.values
    lost = [e for e in recs.events if e.kind == "call_lost"]
    assert len(lost) == 1 and lost[0].data["tokens_out"] == in_flight["tokens_out"]
    # The resumed policy counted from the ledger: its own counters end equal to it.
    budget = recs.meta.get("loop_state")["policy"]["budget"]
    assert (budget["tokens_in"], budget["tokens_out"]) == (u["tokens_in"], u["tokens_out"])
    assert recs.meta.status == "finished" and recs.meta.evaluations_done == 2
    assert "1 lost to a kill, counted at their bound" in dict(headline(load_run(run)))["LLM spend"]


def _meta_key(runs: Path, key: str) -> Any:
    found = [d for d in runs.iterdir() if (d / "run.db").is_file()] if runs.is_dir() else []
    if not found:
        return None
    try:
        with RunReader(found[0]) as reader:
            return reader.meta().get(key)
    except (RunNotFound, RunUnreadable):
        return None
