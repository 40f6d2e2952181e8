"""The search with several evaluators: the driver keeps every worker of a pool busy while the strategy proposes ahead,
and records each verdict as it arrives. This process alone writes the run store.

    dispatch   the strategy proposes (search/parallel_strategies.py: top-N frontier nodes for K-Search, each with at
               most one candidate being judged); a duplicate is recorded and not sent; otherwise ONE commit holds the
               candidate and its in-flight mark (LoopState.in_flight), then it goes to an idle worker
    arrival    ONE commit holds the verdict (its eval_index: the order verdicts arrived in; where it was judged:
               result.environment.evaluator), the best so far and the in-flight mark's removal; then the strategy
               absorbs it (its cycle goes on, or ends and the world model learns)
    lost       a worker that dies loses its job: the candidate is queued again (first) and judged once; after
               MAX_REQUEUES deaths it is recorded as a runtime_error

The budget is exact: a candidate is dispatched only while the evaluations done and in flight are below it (and
below --stop-after); the wall time stops dispatching, and what is in flight is still judged and counted. The LLM
caps are the policy's, exact as in the single-process search (every proposer call is made here, one at a time).
A run killed mid-flight keeps its in-flight marks: `--resume` judges those candidates again before anything new.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ksearch.errors import RunError
from ksearch.harness.result import EvalResult
from ksearch.harness.static import normalise_source
from ksearch.policy.base import Attempt, Mode
from ksearch.policy.stable import stable_text
from ksearch.search.bookkeeping import StopSearch, StrategyBase, _redacted
from ksearch.search.pool import Arrival, EvaluatorPool, Job

#: A candidate whose evaluator died this many times is recorded as a runtime_error instead of being sent again.
MAX_REQUEUES = 3


@dataclass
class Proposal:
    """A candidate the strategy wants judged, and what it needs back with the verdict (`tag`)."""

    source: str
    params: dict[str, Any]
    node_id: str
    mode: Mode
    parent_id: str | None
    title: str | None
    tag: dict[str, Any] = field(default_factory=dict)
    kind: str | None = None  # the device kind its verdict must come from (None: any)


class ParallelStrategy(StrategyBase):
    """What a strategy adds to run under the driver (search/parallel_strategies.py implements it)."""

    #: Proposals in a row that send nothing (no code, duplicates) before the search counts as exhausted.
    STALL_LIMIT = 500
    workers = 1
    #: The device kinds the pool's workers have (the driver sets it).
    live_kinds: set[str] = set()

    def next_proposal(self, idle_kinds: list[str]) -> Proposal | None:
        """The next candidate to send to one of the idle workers' kinds (asks the policy); None: nothing now."""
        raise NotImplementedError

    def dispatched(self, tag: dict[str, Any], candidate: str) -> None:
        """The proposal with `tag` went out as `candidate`."""

    def absorb(self, tag: dict[str, Any], attempt: Attempt, result: EvalResult | None,
               params: dict[str, Any], kind: str | None) -> None:
        """A verdict (result None: a duplicate) for the proposal with `tag`."""
        raise NotImplementedError

    def finish(self) -> None:
        """After the last verdict: the last checkpoint."""
        self.write_state()

    # -- the run -------------------------------------------------------------------------------------------------
    def run_on(self, pool: EvaluatorPool) -> Any:
        return Driver(self, pool).run()


class Driver:
    def __init__(self, strategy: ParallelStrategy, pool: EvaluatorPool) -> None:
        self.s = strategy
        self.pool = pool
        self.state = strategy.state
        self.store = strategy.store
        self.requeued: deque[dict[str, Any]] = deque()
        self.stale = 0

    def run(self) -> Any:
        s = self.s
        try:
            s._init()  # type: ignore[attr-defined]  # the single-process form's start (analysis, world model)
            self._kinds()
            # Candidates dispatched before the run's last process ended and never judged: first in line.
            self.requeued.extend(t for t in self.state.in_flight)
            if self.state.in_flight:
                s.event("requeue", {"candidates": [t["candidate"] for t in self.state.in_flight],
                                    "message": f"{len(self.state.in_flight)} candidate(s) in flight when the run "
                                               "stopped are judged again"})
            self._start()
            self._loop()
        except StopSearch:
            pass
        self._drain()
        s.finish()
        return self.state

    def _kinds(self) -> None:
        """The device kinds this sitting's workers have. A run continued on other hardware than judged it before
        compares its best on the new kind (said in an event), and its cycles go to any worker."""
        live = [w.device_kind for w in self.pool.workers() if w.state != "dead"]
        self.s.live_kinds = set(live)
        old = self.state.device_kind
        if old is not None and old not in live and live:
            self.state.device_kind = live[0]
            self.s.event("device_kind", {"from": old, "to": live[0], "message": f"no worker here is a {old}: the "
                                         f"best is compared on {live[0]} from now on"})
            for t in self.state.in_flight:
                t["kind"] = None

    # -- dispatching ---------------------------------------------------------------------------------------------
    def _room(self) -> bool:
        """Whether another candidate may be dispatched: the budget counts what is in flight."""
        planned = self.state.evaluations_done + len(self.state.in_flight)
        s = self.s
        if planned >= s.s.budget or (s.s.stop_after is not None and planned >= s.s.stop_after):
            return False
        if s.llm_spent or s.failure is not None:
            return False
        return not (s.s.wall_time_s is not None and s.wall_used() >= s.s.wall_time_s)

    def _start(self) -> None:
        """The task's starting kernel is judged first, alone: every score is measured from it."""
        if self.state.start_candidate is not None:
            return
        if not any((t.get("tag") or {}).get("start") for t in self.requeued):
            ctx = self.s.s.ctx
            source = ctx.task.starting_source(ctx.backend.family)
            self._dispatch(Proposal(source, {"family": "start"}, "root", "first", None, "starting kernel",
                                    {"start": True}))
        while self.state.start_candidate is None and (self.pool.busy() or self.requeued):
            self._fill_requeued()
            self._arrive(self.pool.wait())

    def _fill_requeued(self) -> None:
        idle = self.pool.idle_kinds()
        live = {w.device_kind for w in self.pool.workers() if w.state != "dead"}
        if not live:
            raise RunError("every evaluator of the run died; --resume continues it once workers are back")
        for ticket in list(self.requeued):
            if ticket.get("kind") not in live:
                ticket["kind"] = None  # no evaluator of its kind is left: any may judge it
            if not idle:
                return
            kind = ticket.get("kind")
            if kind is None or kind in idle:
                source = self.store.candidate(ticket["candidate"]).source(self.store.path)
                worker = self.pool.submit(Job(ticket["candidate"], source, kind))
                if worker is None:
                    continue
                idle.remove(worker.device_kind)
                self.requeued.remove(ticket)
                self.s.event("dispatch", {"candidate": ticket["candidate"], "worker": worker.id,
                                          "device_kind": worker.device_kind, "again": ticket.get("lost", 0) + 1,
                                          "in_flight": self.pool.busy()})

    def _loop(self) -> None:
        while True:
            self._fill()
            if not self.pool.busy() and not self.requeued:
                return
            self._arrive(self.pool.wait())

    def _fill(self) -> None:
        self._fill_requeued()
        while not self.requeued and self.pool.idle_kinds() and self._room():
            if self.stale >= self.s.STALL_LIMIT:
                self.s.event("stalled", {"skips": self.stale})
                self.state.phase = "done"
                return
            p = self.s.next_proposal(self.pool.idle_kinds())
            if p is None:
                return
            self._dispatch(p)

    def _dispatch(self, p: Proposal) -> None:
        s = self.s
        normalized = normalise_source(p.source)
        dup = s.record_duplicate(p.source, normalized, p.params, p.node_id, p.mode, p.parent_id, p.title)
        if dup is not None:
            self.stale += 1
            s.absorb(p.tag, dup, None, p.params, None)
            return
        self.stale = 0
        with self.store.transaction():
            row = self.store.add_candidate(p.source, normalized, self.state.round, p.node_id, p.parent_id, p.title,
                                           p.mode, p.params)
            self.state.dispatched += 1
            self.state.in_flight.append({"candidate": row.id, "tag": p.tag, "kind": p.kind, "mode": p.mode,
                                         "node_id": p.node_id, "params": p.params,
                                         "dispatch": self.state.dispatched, "lost": 0})
            s.dispatched(p.tag, row.id)
            s._write_meta()
        worker = self.pool.submit(Job(row.id, p.source, p.kind))
        if worker is None:  # the strategy proposed for a kind with no idle worker: it waits its turn
            self.requeued.append(self.state.in_flight[-1])
            return
        s.event("dispatch", {"candidate": row.id, "worker": worker.id, "device_kind": worker.device_kind,
                             "node_id": p.node_id, "mode": p.mode, "in_flight": self.pool.busy()})

    # -- arrivals ------------------------------------------------------------------------------------------------
    def _ticket(self, candidate: str) -> dict[str, Any]:
        return next(t for t in self.state.in_flight if t["candidate"] == candidate)

    def _arrive(self, a: Arrival) -> None:
        s = self.s
        ticket = self._ticket(a.job.candidate)
        result = a.result
        if result is None:
            ticket["lost"] = int(ticket.get("lost", 0)) + 1
            s.event("worker_lost", {"worker": a.worker.id, "host": a.worker.host, "candidate": a.job.candidate,
                                    "times": ticket["lost"], "message": a.error})
            if ticket["lost"] < MAX_REQUEUES:
                with self.store.transaction():
                    s._write_meta()
                self.requeued.appendleft(ticket)
                return
            result = EvalResult(status="runtime_error", message=f"its evaluator died {ticket['lost']} times while "
                                f"judging it (last: {a.error})")
        result = _redacted(result)
        result.environment = {**result.environment, "evaluator": a.placement()}
        kind = a.worker.device_kind
        self.state.evaluations_done += 1
        self.state.in_flight.remove(ticket)
        if self.state.device_kind is None:
            self.state.device_kind = kind  # the starting kernel's: the run's best is compared on it
        best = self.state.bests.get(kind)
        if result.passed and (best is None or result.score > best["score"]):
            self.state.bests[kind] = {"candidate": a.job.candidate, "score": result.score}
        params = dict(ticket.get("params") or {})
        with self.store.transaction():
            s.record_result(a.job.candidate, a.job.source, params, result,
                            counts_for_best=kind == self.state.device_kind)
        mode: Mode = ticket.get("mode") or "first"
        attempt = Attempt(a.job.candidate, str(ticket.get("node_id")), mode, result.status, result.score,
                          stable_text(result.message)[-500:], params)
        s.event("evaluation", {"candidate": a.job.candidate, "status": result.status, "score": result.score,
                               "mode": mode, "node_id": ticket.get("node_id"), "best_score": self.state.best_score,
                               "evaluations_done": self.state.evaluations_done, "budget": s.s.budget,
                               "worker": a.worker.id, "device_kind": kind, "dispatch": ticket.get("dispatch"),
                               "started_at": a.started_at, "ended_at": a.ended_at, "in_flight": self.pool.busy()})
        tag = ticket.get("tag") or {}
        if tag.get("start"):
            self.state.start_candidate, self.state.start_score = a.job.candidate, attempt.score
            if result.passed and self.state.best_candidate is None:
                self.state.best_candidate, self.state.best_score = a.job.candidate, result.score
            s.write_state()
        else:
            s.absorb(tag, attempt, result, params, kind)

    def _drain(self) -> None:
        """What is in flight when the search stops proposing is still judged (it is counted). A Ctrl-C or a kill
        never gets here: it leaves the candidates marked in flight for --resume."""
        while self.pool.busy() or self.requeued:
            self._fill_requeued()
            try:
                self._arrive(self.pool.wait())
            except StopSearch:
                continue
