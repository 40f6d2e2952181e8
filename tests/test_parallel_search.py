"""The parallel driver without Ray (search/parallel.py over an in-process pool, scripted judges): K-Search refines
several frontier nodes at once with one candidate in flight per node, the budget is exact, verdicts are recorded
in arrival order with where they were judged, a dead worker's candidate is judged again and recorded once, a run
killed mid-flight resumes by judging its in-flight candidates; and the single-worker path proposes today's
candidates for a seed."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from test_search_loop import ScriptedPolicy, scripted_judge

from ksearch.config import RunConfig
from ksearch.harness.result import EvalResult, WorkloadResult
from ksearch.search.pool import Arrival, InlinePool, Job
from ksearch.search.start import create_run, execute
from ksearch.store import read_run


def hashed_judge(source: str) -> EvalResult:
    """Deterministic verdicts from the source: most pass with a score, every fifth fails."""
    h = int(hashlib.sha256(source.encode()).hexdigest()[:8], 16)
    status = "passed" if h % 5 else "wrong_answer"
    score = 0.5 + (h % 1000) / 500 if status == "passed" else 0.0
    r = EvalResult(status=status, task="softmax", backend="mlx-cpu", baseline="native", score=score)
    r.workloads = [WorkloadResult(name="w", speedup=score or None)]
    return r


#: The candidates (sha256 of each source, first 10 hex digits, in order) the single-worker search proposes for
#: seed 7 and budget 14 with the offline policy and hashed_judge, as the search did before it could run in parallel.
GOLDEN = {
    "ksearch": "3021330ba7 b1867efd21 78c5063a2a 375bf00bcd a92933f43b d8fa6aa1f8 7c1c72a65b 91263e30ba 3c0583b69f "
               "d8fa6aa1f8 b1867efd21 78c5063a2a 375bf00bcd 7c1c72a65b b1867efd21 a92933f43b a92933f43b d8fa6aa1f8 "
               "a92933f43b 78c5063a2a 7c1c72a65b 7c1c72a65b 78c5063a2a d8fa6aa1f8 7c1c72a65b d8fa6aa1f8",
    "greedy": "3021330ba7 b1867efd21 d8fa6aa1f8 78c5063a2a 91263e30ba a92933f43b 3c0583b69f 7c1c72a65b 375bf00bcd "
              "d8fa6aa1f8 d8fa6aa1f8 375bf00bcd a92933f43b a92933f43b b1867efd21 78c5063a2a 7c1c72a65b d8fa6aa1f8",
}


def _cfg(tmp_path: Any, **kw: Any) -> RunConfig:
    return RunConfig(**{"task": "softmax", "backend": "mlx-cpu", "budget": 14, "runs_dir": str(tmp_path), "seed": 7,
                        **kw})


@pytest.mark.parametrize("strategy", sorted(GOLDEN))
def test_the_single_worker_path_proposes_the_same_candidates_for_a_seed(tmp_path: Any, strategy: str) -> None:
    cfg = _cfg(tmp_path, strategy=strategy)
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=hashed_judge)
    got = [hashlib.sha256(c.source(store.path).encode()).hexdigest()[:10] for c in store.candidates()]
    assert " ".join(got).startswith(GOLDEN[strategy])
    assert not store.events("dispatch")  # the single-process loop, not the driver


def _dispatch_order(store: Any) -> list[tuple[str, str]]:
    """(kind, node) of every dispatch and verdict, in the order they happened."""
    out = []
    for e in store.events():
        if e["kind"] in ("dispatch", "evaluation") and e["data"].get("node_id") not in (None, "root"):
            out.append((e["kind"], e["data"]["node_id"]))
    return out


class NewEachTime(ScriptedPolicy):
    """Every attempt at an action is new code: the budget, not the proposer, ends the search."""

    def implement(self, ctx: Any, req: Any) -> tuple[str, dict[str, Any]] | None:
        source, params = super().implement(ctx, req)  # type: ignore[misc]
        return source + f"SERIAL = {self.serial}\n", params


@pytest.mark.parametrize("strategy", ["ksearch", "evolve", "greedy"])
def test_three_workers_keep_the_budget_exact_and_record_arrivals(tmp_path: Any, strategy: str) -> None:
    cfg = _cfg(tmp_path, strategy=strategy, budget=11, stagnation_window=3)
    store, _, _ = create_run(cfg)
    policy = NewEachTime({"A": [("passed", 1.2), ("passed", 1.5)], "B": [("wrong_answer", 0)], "C": [("passed", 2)],
                          "D": [("passed", 1.1)]})
    out = execute(store, cfg, policy=policy, pool=InlinePool(scripted_judge, 3, "mlx-cpu:test"))
    assert out.state.evaluations_done == 11 and not out.state.in_flight
    recs = read_run(store.path)
    evals = recs.evaluations_of("search")
    assert [e.eval_index for e in evals] == list(range(1, 12))  # the order verdicts arrived in
    assert all(e.result["environment"]["evaluator"]["device_kind"] == "mlx-cpu:test" for e in evals)
    judged = Counter(e.candidate_id for e in evals)
    assert max(judged.values()) == 1
    assert out.state.bests["mlx-cpu:test"]["score"] == out.state.best_score
    if strategy == "ksearch":
        # Several nodes are refined at once, each with at most one candidate being judged.
        busy: set[str] = set()
        most = 0
        for kind, node in _dispatch_order(store):
            if kind == "dispatch":
                assert node not in busy, "a cycle had two candidates in flight"
                busy.add(node)
                most = max(most, len(busy))
            else:
                busy.discard(node)
        assert most >= 2


class _Flaky(InlinePool):
    """Loses the job of its nth wait (as a killed evaluator would), or is interrupted there."""

    def __init__(self, *args: Any, lose_at: int = 0, interrupt_at: int = 0) -> None:
        super().__init__(*args)
        self.n, self.lose_at, self.interrupt_at = 0, lose_at, interrupt_at

    def wait(self) -> Arrival:
        self.n += 1
        if self.n == self.interrupt_at:
            raise KeyboardInterrupt
        if self.n == self.lose_at:
            job, w = self._queue.popleft()
            w.state, w.candidate = "idle", None
            w.lost += 1
            return Arrival(Job(job.candidate, job.source, job.kind), w, None, 0.0, 0.0, "the actor died")
        return super().wait()


def test_a_lost_candidate_is_judged_again_and_recorded_once(tmp_path: Any) -> None:
    cfg = _cfg(tmp_path, budget=8)
    store, _, _ = create_run(cfg)
    out = execute(store, cfg, pool=_Flaky(hashed_judge, 2, "k", lose_at=3))
    lost = store.events("worker_lost")
    assert len(lost) == 1
    cid = lost[0]["data"]["candidate"]
    evals = read_run(store.path).evaluations_of("search")
    assert [e.candidate_id for e in evals].count(cid) == 1
    assert out.state.evaluations_done == 8 and len(evals) == 8


def test_a_run_interrupted_mid_flight_resumes_by_judging_its_candidates_in_flight(tmp_path: Any) -> None:
    cfg = _cfg(tmp_path, budget=9)
    store, _, _ = create_run(cfg)
    with pytest.raises(KeyboardInterrupt):
        execute(store, cfg, pool=_Flaky(hashed_judge, 3, "k", interrupt_at=5))
    state = store.get_state("loop_state")
    in_flight = [t["candidate"] for t in state["in_flight"]]
    assert len(in_flight) >= 2 and state["evaluations_done"] == 4
    # Continued with one in-process evaluator: the candidates in flight are judged first, then the search goes on.
    out = execute(store, cfg, evaluate=hashed_judge)
    evals = read_run(store.path).evaluations_of("search")
    assert [e.candidate_id for e in evals][4:4 + len(in_flight)] == in_flight
    assert Counter(e.candidate_id for e in evals).most_common(1)[0][1] == 1
    assert out.state.evaluations_done == 9 == len(evals)
    assert [e.eval_index for e in evals] == list(range(1, 10))
    assert store.events("requeue")


def test_bad_placement_is_refused_in_one_line_before_anything_runs(tmp_path: Any, monkeypatch: Any) -> None:
    from ksearch.config import load_config
    from ksearch.errors import ConfigError, RunError
    from ksearch.search import ray_pool
    from ksearch.search.start import start_run

    with pytest.raises(ConfigError, match="^--workers 0: .*at least 1 evaluator"):
        load_config(overrides={"workers": 0})
    # The setting is named as the user gave it: a variable or a configuration file, not a flag they never typed.
    with pytest.raises(ConfigError, match="^KSEARCH_WORKERS=0: "):
        load_config(environ={"KSEARCH_WORKERS": "0"})
    toml = tmp_path.parent / f"{tmp_path.name}-workers.toml"  # tmp_path itself must stay empty (below)
    toml.write_text("workers = 0\n")
    with pytest.raises(ConfigError, match=r"^workers = 0 \(--config\): "):
        load_config(toml, environ={})
    for kw, says in (({"workers": 999}, "more than the"), ({"ray_address": "nowhere"}, "not auto or HOST:PORT"),
                     ({"ray_address": ""}, "not auto or HOST:PORT"), ({"ray_address": "10.0.0.5:99999"}, "not auto"),
                     ({"ray_address": "127.0.0.1:1"}, "cannot reach a Ray cluster")):
        with pytest.raises(RunError, match=says):
            start_run(_cfg(tmp_path, **kw))
    monkeypatch.setattr(ray_pool, "ray", None)
    with pytest.raises(RunError, match=r"^--workers 2 needs Ray, which is not installed: pip install "
                                       r"'kernelsearch\[ray\]'; without it one evaluator judges in this process"):
        start_run(_cfg(tmp_path, workers=2))
    with pytest.raises(RunError, match=r"^--ray-address auto needs Ray"):
        start_run(_cfg(tmp_path, ray_address="auto"))
    assert not any(tmp_path.iterdir())  # no run was created


@contextlib.contextmanager
def _listener(answer: bytes | None) -> Iterator[str]:
    """HOST:PORT of a local server that is no Ray cluster: it answers every connection with `answer` (None: says
    nothing)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                held.append(conn)
                if answer is not None:
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for conn in held:
            conn.close()


def test_an_address_where_no_ray_cluster_answers_is_refused_at_once(monkeypatch: Any) -> None:
    # A web server, or a port that accepts and says nothing: Ray's own client would retry either for minutes.
    from ksearch.errors import RunError
    from ksearch.search import ray_pool

    monkeypatch.setattr(ray_pool, "PROBE_TIMEOUT_S", 0.5)
    for answer in (b"HTTP/1.1 400 Bad Request\r\n\r\n", None):
        with _listener(answer) as address, pytest.raises(RunError, match="not a Ray cluster"):
            ray_pool.check_address(address)
    # `auto` where the cluster it finds (RAY_ADDRESS, or the address a `ray start` here left behind) has ended.
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(RunError, match=r"cannot reach a Ray cluster at --ray-address auto \(.*:1\)"):
        ray_pool.check_address("auto")


def test_replay_refuses_several_workers_in_one_line(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from ksearch.cli import app

    cfg = _cfg(tmp_path, budget=1, confirm_top=0)
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=hashed_judge)
    store.close()
    for flags in (["--workers", "2"], ["--ray-address", "auto"]):
        res = CliRunner().invoke(app, ["run", "--replay", str(store.path), "--runs-dir", str(tmp_path), *flags])
        assert res.exit_code == 2, res.output
        assert "do not go with --replay" in res.output and len(res.output.strip().splitlines()) == 1
    assert [d.name for d in tmp_path.iterdir()] == [store.path.name]  # no replay was created


def test_a_run_judged_on_a_cluster_that_is_gone_resumes_here(tmp_path: Any) -> None:
    from ksearch.errors import RunError
    from ksearch.search.start import start_run

    cfg = _cfg(tmp_path, budget=3, confirm_top=0, ray_address="127.0.0.1:1")  # nothing listens there
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=hashed_judge, stop_after=1)
    store.close()
    # Its own placement: refused, naming the flags that judge it elsewhere.
    with pytest.raises(RunError, match=r"cannot reach a Ray cluster.*--resume with --workers N \(this machine\)"):
        start_run(cfg, resume=str(store.path), stop_after=2)
    # --workers 1: one evaluator in this process, whatever cluster the run was judged on.
    out = start_run(cfg, resume=str(store.path), stop_after=2, placement={"workers": 1, "ray_address": None})
    assert out.status == "stopped" and out.state.evaluations_done == 2
