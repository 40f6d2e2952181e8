"""The strategies under the parallel driver (search/parallel.py): what each proposes ahead and how it takes verdicts
that arrive out of order.

- K-Search refines the top N frontier nodes at once (N: the workers), one refinement cycle per node, each with at
  most one candidate being judged, so that K-Search's rules hold per node exactly as in the single-process loop:
  the first attempt builds on the parent's solution, a debug attempt follows the failure it debugs, an improve
  attempt follows a pass, and the stagnation window and the cannot-beat-the-parent rule end the cycle. When a
  cycle ends, the world model learns from it and the next best node not already being refined opens a cycle. A
  cycle's verdicts come from one device kind (the first that judged it).
- evolve: the islands propose in turn, several candidates in flight; each verdict goes to the island that
  proposed it.
- greedy: proposals from the best so far, several in flight.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ksearch.harness.result import EvalResult
from ksearch.policy.base import Attempt, Mode
from ksearch.search.bookkeeping import SearchSetup
from ksearch.search.loop import KSearch
from ksearch.search.parallel import ParallelStrategy, Proposal
from ksearch.search.state import Cycle, LoopState
from ksearch.search.strategies import Evolve, Greedy
from ksearch.worldmodel import WorldModel


class ParallelKSearch(KSearch, ParallelStrategy):
    def __init__(self, setup: SearchSetup, state: LoopState, world_model: WorldModel | None, workers: int) -> None:
        super().__init__(setup, state, world_model)
        self.workers = workers
        if state.cycle is not None:  # a single-process run continued with several workers
            state.cycles.insert(0, state.cycle)
            state.cycle = None

    @contextlib.contextmanager
    def _focus(self, cyc: Cycle) -> Iterator[None]:
        """Make `cyc` the current cycle for the single-process loop's steps (_request, _absorb, _end_cycle); it
        stays open unless they ended it. Its place in the stored state moves with it, so a checkpoint holds every
        open cycle once."""
        assert self.state.cycle is None
        i = self.state.cycles.index(cyc)
        self.state.cycles.pop(i)
        self.state.cycle = cyc
        try:
            yield
        finally:
            if self.state.cycle is not None:
                self.state.cycles.insert(i, self.state.cycle)
                self.state.cycle = None

    def _ready(self, idle_kinds: list[str]) -> Cycle | None:
        for cyc in self.state.cycles:
            if cyc.device_kind is not None and cyc.device_kind not in self.live_kinds:
                cyc.device_kind = None  # no worker of its kind is left: the next verdict's kind is its kind
            if cyc.in_flight is None and (cyc.device_kind is None or cyc.device_kind in idle_kinds):
                return cyc
        return None

    def next_proposal(self, idle_kinds: list[str]) -> Proposal | None:
        assert self.wm is not None
        while True:
            cyc = self._ready(idle_kinds)
            if cyc is None:
                if len(self.state.cycles) >= self.workers:
                    return None
                if not self._select(frozenset(c.node_id for c in self.state.cycles)):
                    if not self.state.cycles and not self.state.in_flight:
                        self.event("frontier_empty", {})
                        self.state.phase = "done"
                    return None
                assert self.state.cycle is not None
                self.state.cycles.append(self.state.cycle)
                self.state.cycle = None
                continue
            with self._focus(cyc):
                request, base_cid, out, title = self._propose()
                if out is None:
                    continue
                source, params = out
                return Proposal(source, params, cyc.node_id, request.mode, base_cid, title,
                                {"node_id": cyc.node_id, "mode": request.mode}, cyc.device_kind)

    def _cycle(self, tag: dict[str, Any]) -> Cycle | None:
        return next((c for c in self.state.cycles if c.node_id == tag.get("node_id")), None)

    def dispatched(self, tag: dict[str, Any], candidate: str) -> None:
        cyc = self._cycle(tag)
        if cyc is not None:
            cyc.in_flight = candidate

    def absorb(self, tag: dict[str, Any], attempt: Attempt, result: EvalResult | None,
               params: dict[str, Any], kind: str | None) -> None:
        cyc = self._cycle(tag)
        if cyc is None:  # its cycle is gone (a world-model edit removed its node): the verdict is recorded anyway
            return
        cyc.in_flight = None  # a duplicate was never sent: the cycle had nothing in flight either way
        if result is not None and cyc.device_kind is None:
            cyc.device_kind = kind
        mode: Mode = tag.get("mode") or attempt.mode
        with self._focus(cyc):
            self._absorb(mode, attempt, result, params)

    def finish(self) -> None:
        if self.finished():
            # Attach what the cycles cut off by the budget found, so the tree shows it.
            for cyc in [c for c in self.state.cycles if c.attempts]:
                with contextlib.suppress(Exception), self._focus(cyc):
                    self._end_cycle("budget")
        self.write_state(self.wm.to_json() if self.wm else None, "final")


class _ParallelActions(ParallelStrategy):
    """Greedy and evolve: the proposals of their single-process step, several in flight."""

    STALL_LIMIT = 50  # as their single-process loop

    def __init__(self, setup: SearchSetup, state: LoopState, workers: int) -> None:
        super().__init__(setup, state)
        self.workers = workers

    def _parent(self) -> tuple[str | None, Mode, dict[str, Any] | None, dict[str, Any]]:
        raise NotImplementedError

    def next_proposal(self, idle_kinds: list[str]) -> Proposal | None:
        for _ in range(self.STALL_LIMIT):
            parent, mode, feedback, tag = self._parent()
            p = self._proposal(parent, mode, feedback)  # type: ignore[attr-defined]
            if p is not None:
                return Proposal(p.source, p.params, p.node_id, mode, parent, p.title, {**tag, "mode": mode})
            self.state.strategy["skips"] = self.state.strategy.get("skips", 0) + 1
            self.write_state()
        self.event("stalled", {"skips": self.STALL_LIMIT})
        self.state.phase = "done"
        return None


class ParallelGreedy(_ParallelActions, Greedy):
    def _parent(self) -> tuple[str | None, Mode, dict[str, Any] | None, dict[str, Any]]:
        best = self.state.best_candidate or self.state.start_candidate
        mode: Mode = "improve" if self.state.best_candidate else "first"
        return best, mode, self.state.strategy.get("last_feedback"), {}

    def absorb(self, tag: dict[str, Any], attempt: Attempt, result: EvalResult | None,
               params: dict[str, Any], kind: str | None) -> None:
        self._after(attempt.candidate_id if result else None, result, params)


class ParallelEvolve(_ParallelActions, Evolve):
    def _parent(self) -> tuple[str | None, Mode, dict[str, Any] | None, dict[str, Any]]:
        islands = self._islands()
        i = self.state.strategy.get("turn", 0) % len(islands)
        self.state.strategy["turn"] = self.state.strategy.get("turn", 0) + 1
        elites = list(islands[i].values())
        if not elites:
            return self.state.start_candidate, "first", None, {"island": i}
        a, b = self.s.ctx.rng.choice(elites), self.s.ctx.rng.choice(elites)
        parent = a if a["score"] >= b["score"] else b
        return parent["cid"], "improve", parent.get("feedback"), {"island": i}

    def absorb(self, tag: dict[str, Any], attempt: Attempt, result: EvalResult | None,
               params: dict[str, Any], kind: str | None) -> None:
        self.place(int(tag.get("island", 0)), attempt.candidate_id if result else None, result, params)
