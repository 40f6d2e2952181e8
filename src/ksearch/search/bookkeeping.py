"""The bookkeeping every search strategy shares (StrategyBase): submitting a candidate (dedup, evaluate, persist in
one commit), the budget, the best so far, events, checkpoints. A strategy decides what to try next; this module is
how each try is judged and recorded."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ksearch.errors import BudgetExhausted, CallFailed, PolicyError
from ksearch.harness.result import EvalResult
from ksearch.harness.static import normalise_source
from ksearch.policy.base import Attempt, CallBound, CallRecord, Mode, Policy, PolicyContext
from ksearch.policy.stable import stable_text
from ksearch.search import ledger
from ksearch.search.state import LoopState, rng_state
from ksearch.store import RunStore
from ksearch.store.redact import SECRETS, redact_json

#: A candidate must beat the cycle's best by this fraction to count as an improvement (timing noise is ~1-3%).
IMPROVEMENT = 0.01


@dataclass
class SearchSetup:
    store: RunStore
    policy: Policy
    ctx: PolicyContext
    evaluate: Callable[[str], EvalResult]
    budget: int
    stagnation_window: int = 5
    wall_time_s: float | None = None
    weights: Any = None
    #: Stop this process after this many evaluations in total (a search spread over several sittings);
    #: unlike `budget`, reaching it does not end the search: `--resume` continues it.
    stop_after: int | None = None
    on_event: Callable[[str, dict[str, Any]], None] = field(default=lambda _k, _d: None)
    #: This many proposer errors in a row end the run as failed (an endpoint that refuses every prompt).
    max_consecutive_errors: int = 5
    #: Profiling after the verdict (harness/profile.py): `profile(source, verdict)` gives a ProfileReport;
    #: `profile_mode` "best" (each refinement cycle's best), "all" (every passed candidate) or "off".
    profile: Callable[[str, EvalResult | None], Any] | None = None
    profile_mode: str = "off"


class StopSearch(Exception):
    """The budget (evaluations, wall time or LLM spend) is spent. A signal that ends the loop, not an error."""


class ProposerFailed(StopSearch):
    """max_consecutive_errors proposer errors in a row: the run ends as failed."""


class StrategyBase:
    """The base of K-Search (loop.py) and the comparison strategies (strategies.py); run() is theirs."""

    def __init__(self, setup: SearchSetup, state: LoopState) -> None:
        self.s = setup
        self.store = setup.store
        self.state = state
        self._t0 = time.monotonic()
        self._wall_base = state.wall_time_used_s
        self.llm_spent = False
        self.llm_cap = ("", "")  # (token_cap | usd_cap, the cap's message), when one ended the run
        self.failure: tuple[str, str] | None = None  # (kind, reason) when proposer errors ended the run
        self.error_streak: list[tuple[bool, str]] = []  # (an endpoint failure?, message) of the errors in a row
        setup.ctx.record_call = self._record_call
        setup.ctx.begin_call = self._begin_call
        self.last_profile: tuple[str, dict[str, Any]] | None = None  # (candidate, report) of the latest profile
        self._profile_noted = False

    # -- budget ----------------------------------------------------------------------------------------------------
    def wall_used(self) -> float:
        return self._wall_base + (time.monotonic() - self._t0)

    def budget_left(self) -> bool:
        if self.state.evaluations_done >= self.s.budget:
            return False
        if self.s.stop_after is not None and self.state.evaluations_done >= self.s.stop_after:
            return False
        return not (self.s.wall_time_s is not None and self.wall_used() >= self.s.wall_time_s)

    def finished(self) -> bool:
        return self.state.evaluations_done >= self.s.budget

    def spent(self) -> bool:
        """Whether one of the run's limits has run out: the evaluations, the wall time or the LLM spend. Such a run is
        finished and gets its holdout (a plain resume would stop again at once; `--resume` with a larger --budget
        or --wall-time continues it); one paused by stop_after, Ctrl-C or SIGTERM is stopped and resumable."""
        wall = self.s.wall_time_s is not None and self.wall_used() >= self.s.wall_time_s
        return self.finished() or wall or self.llm_spent

    def check_budget(self) -> None:
        if not self.budget_left():
            raise StopSearch("budget spent")

    # -- events and persistence ------------------------------------------------------------------------------------
    def event(self, kind: str, data: dict[str, Any]) -> None:
        data = redact_json(data)  # what the live view shows, as what the store keeps
        self.store.add_event(self.state.round, kind, data)
        self.s.on_event(kind, data)

    def _begin_call(self, bound: CallBound) -> None:
        ledger.begin_call(self.store, bound)

    def _record_call(self, call: CallRecord) -> None:
        ledger.record_call(self.store, self.state.round, call)

    def _snapshot_state(self) -> dict[str, Any]:
        self.state.rng = rng_state(self.s.ctx.rng)
        self.state.policy = self.s.policy.state()
        self.state.wall_time_used_s = self.wall_used()
        return self.state.to_json()

    def write_state(self, world_model: dict[str, Any] | None = None, reason: str = "") -> None:
        """A checkpoint outside an evaluation (cycle ends, world-model edits)."""
        with self.store.transaction():
            self._write_meta()
            if world_model is not None:
                self.store.add_world_model(self.state.round, world_model, reason)

    def _write_meta(self) -> None:
        # By reference: its long texts (analysis, last source, verdict messages) are stored once, not per commit.
        self.store.set_state("loop_state", self._snapshot_state())
        self.store.set_meta("evaluations_done", self.state.evaluations_done)
        self.store.set_meta("duplicates_skipped", self.state.duplicates_skipped)
        self.store.set_meta("best_candidate", self.state.best_candidate)
        self.store.set_meta("best_score", self.state.best_score)

    # -- profiling, after and apart from the verdict ---------------------------------------------------------------
    def profile(self, candidate_id: str, source: str, result: EvalResult | None) -> dict[str, Any] | None:
        """The profile report (JSON) of a candidate, profiling it now unless the run has one (a resumed run does not
        profile again); None when profiling is off. The first report that wanted counters and got none (ncu missing
        or refused) is said once, in one line (a `profile_note` event), and the search goes on."""
        if self.s.profile is None or self.s.profile_mode == "off":
            return None
        report = self.store.profile_of(candidate_id)
        if report is None:
            report = redact_json(self.s.profile(source, result).to_json())
            with self.store.transaction():
                self.store.add_profile(candidate_id, self.state.round, report)
            self.event("profile", {"candidate": candidate_id, "status": report.get("status"),
                                   "note": report.get("note"), "duration_s": report.get("duration_s")})
            # Said once: counters wanted and not had (ncu missing or refused). A backend without counters is no
            # failure: the report says so.
            if report.get("status") == "no_counters" and report.get("note") and not self._profile_noted:
                self._profile_noted = True
                self.event("profile_note", {"message": report["note"]})
        self.last_profile = (candidate_id, report)
        return report

    # -- the one way a candidate is judged -------------------------------------------------------------------------
    def submit(self, source: str, params: dict[str, Any], node_id: str, mode: Mode, parent_id: str | None,
               title: str | None, world_model: dict[str, Any] | None = None) -> tuple[Attempt, EvalResult | None]:
        """Evaluate a candidate unless its normalised source was seen; persist candidate, verdict and loop state in
        one commit. Duplicates are recorded, not counted, and not evaluated."""
        self.check_budget()
        normalized = normalise_source(source)
        dup = self.record_duplicate(source, normalized, params, node_id, mode, parent_id, title)
        if dup is not None:
            return dup, None
        result = _redacted(self.s.evaluate(source))  # a candidate that prints a key gets no further
        self.state.evaluations_done += 1
        with self.store.transaction():
            row = self.store.add_candidate(source, normalized, self.state.round, node_id, parent_id, title, mode,
                                           params)
            self.record_result(row.id, source, params, result)
            if world_model is not None:
                self.store.add_world_model(self.state.round, world_model, f"after {row.id}")
        attempt = Attempt(row.id, node_id, mode, result.status, result.score, stable_text(result.message)[-500:],
                          params)
        self.event("evaluation", {"candidate": row.id, "status": result.status, "score": result.score,
                                  "mode": mode, "node_id": node_id, "best_score": self.state.best_score,
                                  "evaluations_done": self.state.evaluations_done, "budget": self.s.budget})
        if result.passed and self.s.profile_mode == "all":
            self.profile(row.id, source, result)
        return attempt, result

    def record_duplicate(self, source: str, normalized: str, params: dict[str, Any], node_id: str, mode: Mode,
                         parent_id: str | None, title: str | None) -> Attempt | None:
        """A candidate whose normalised source was seen (judged, or on its way to an evaluator) is recorded, in one
        commit, and neither evaluated nor counted; None when it is new."""
        dup = self.store.find_normalized(normalized)
        if dup is None:
            return None
        self.state.duplicates_skipped += 1
        with self.store.transaction():
            row = self.store.add_candidate(source, normalized, self.state.round, node_id, parent_id, title, mode,
                                           params, duplicate_of=dup)
            self._write_meta()
        self.event("duplicate", {"candidate": row.id, "duplicate_of": dup})
        return Attempt(row.id, node_id, mode, "duplicate", 0.0, f"same as {dup}", params)

    def record_result(self, cid: str, source: str, params: dict[str, Any], result: EvalResult,
                      counts_for_best: bool = True) -> None:
        """Inside the caller's transaction: the evaluation (its index: the order verdicts arrived in), the best so
        far and the loop state. counts_for_best False: a verdict from another device kind than the run's best."""
        self.store.add_evaluation(cid, self.state.evaluations_done, self.state.round, "search", result.to_json())
        if counts_for_best and result.passed and result.score > self.state.best_score:
            self.state.best_candidate, self.state.best_score = cid, result.score
            self.state.best_params = params
            self.store.write_best(source)
        self._write_meta()

    def submit_start(self) -> None:
        """The task's starting kernel is the first evaluation: the point every improvement is measured from."""
        if self.state.start_candidate is not None:
            return
        source = self.s.ctx.task.starting_source(self.s.ctx.backend.family)
        attempt, result = self.submit(source, {"family": "start"}, "root", "first", None, "starting kernel")
        self.state.start_candidate = attempt.candidate_id
        self.state.start_score = attempt.score
        if result is not None and result.passed and self.state.best_candidate is None:
            self.state.best_candidate, self.state.best_score = attempt.candidate_id, result.score
        self.write_state()

    def call_policy(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Policy failures are counted and survived, up to max_consecutive_errors in a row, which fail the run; a
        spending cap ends the search cleanly. Once either has ended it, the policy is not asked again (None)."""
        if self.llm_spent or self.failure is not None:
            return None
        try:
            out = fn(*args)
        except BudgetExhausted as exc:
            self.llm_spent = True
            self.llm_cap = ("token_cap" if exc.cap == "tokens" else "usd_cap", str(exc))
            self.event("llm_budget", {"message": str(exc)})
            raise StopSearch(str(exc)) from exc
        except PolicyError as exc:
            self.state.policy_errors += 1
            self.event("policy_error", {"message": str(exc)[:2000]})
            self.error_streak.append((isinstance(exc, CallFailed), str(exc).splitlines()[0][:300] if str(exc) else ""))
            if len(self.error_streak) >= self.s.max_consecutive_errors:
                self.failure = self._failure()
                self.event("proposer_failed", {"kind": self.failure[0], "message": self.failure[1]})
                raise ProposerFailed(self.failure[1]) from exc
            return None
        self.error_streak = []
        return out

    def _failure(self) -> tuple[str, str]:
        n, last = len(self.error_streak), self.error_streak[-1][1]
        if all(endpoint for endpoint, _ in self.error_streak):
            return "endpoint_failure", f"endpoint failure: {n} proposer calls in a row failed (last: {last})"
        return "proposer_failure", f"proposer failure: {n} proposer errors in a row (last: {last})"

    # -- how the run ended -----------------------------------------------------------------------------------------
    def end_reason(self) -> tuple[str, str]:
        """Why run() returned, as (kind, one line): the kinds are proposer_failure / endpoint_failure (the run
        failed), usd_cap / token_cap, budget, wall_time, exhausted (nothing new to try), paused (stop_after)."""
        if self.failure is not None:
            return self.failure
        if self.llm_spent:
            return self.llm_cap
        if self.finished():
            return "budget", f"the budget of {self.s.budget} evaluations is spent"
        if self.s.wall_time_s is not None and self.wall_used() >= self.s.wall_time_s:
            return "wall_time", f"the wall time of {self.s.wall_time_s:g} s is spent ({self.wall_used():.0f} s used)"
        if self.state.phase == "done":
            return "exhausted", "the proposer had nothing new left to try"
        if self.s.stop_after is not None and self.state.evaluations_done >= self.s.stop_after:
            n = self.state.evaluations_done
            return "paused", f"paused after {n} evaluation{'s' if n != 1 else ''} (--stop-after); --resume continues it"
        return "paused", "stopped before its limits; --resume continues it"


def _redacted(result: EvalResult) -> EvalResult:
    """The verdict without any registered secret, before it reaches the store, the live view or a prompt."""
    if not SECRETS:
        return result
    data = result.to_json()
    clean = redact_json(data)
    return result if clean is data else EvalResult.from_json(clean)
