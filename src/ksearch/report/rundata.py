"""A run, read back for showing: the store's records of one run, plus what the views derive from them.

The store reads the run read-only and in one transaction (ksearch.store.read), so `report` and `watch` can follow a
run that the search process is still writing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ksearch.harness.result import EvalResult
from ksearch.report.cycles import Cycle, read_cycles
from ksearch.store import CallRow, CandidateRow, EvaluationRow, EventRow, RunMeta, RunRecords, WorldModelRow, read_run

NOTABLE_EVENTS = ("backtrack", "too_hard", "edit_rejected", "policy_error", "world_model_fallback", "edit_fallback",
                  "world_model_tidied", "call_lost", "llm_budget", "proposer_failed", "baselines_reused",
                  "baselines_shared")


@dataclass
class Attempt:
    """One search evaluation, in budget order."""

    n: int  # 1-based position in the budget
    candidate_id: str
    status: str
    score: float
    best_so_far: float
    round: int
    action: str | None


@dataclass
class RunData:
    records: RunRecords
    evaluations: list[EvaluationRow] = field(init=False)  # kind == "search", in budget order
    holdout_evaluations: list[EvaluationRow] = field(init=False)
    attempts: list[Attempt] = field(init=False)

    def __post_init__(self) -> None:
        self.evaluations = self.records.evaluations_of("search")
        self.holdout_evaluations = self.records.evaluations_of("holdout")
        titles = {c.id: c.action_title for c in self.candidates}
        self.attempts = []
        best = 0.0
        for i, e in enumerate(self.evaluations, 1):
            score = e.score if e.status == "passed" else 0.0
            best = max(best, score)
            self.attempts.append(Attempt(i, e.candidate_id, e.status, score, best, e.round, titles.get(e.candidate_id)))

    @property
    def path(self) -> Path:
        return self.records.path

    @property
    def meta(self) -> RunMeta:
        return self.records.meta

    @property
    def candidates(self) -> list[CandidateRow]:
        return self.records.candidates

    @property
    def all_evaluations(self) -> list[EvaluationRow]:
        """Every evaluation of every kind (search, holdout, ...), in the order written."""
        return self.records.evaluations

    @property
    def world_models(self) -> list[WorldModelRow]:
        return self.records.world_models

    @property
    def calls(self) -> list[CallRow]:
        return self.records.calls

    @property
    def events(self) -> list[EventRow]:
        return self.records.events

    # -- identity -----------------------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def task(self) -> str:
        return self.meta.task or "?"

    @property
    def backend(self) -> str:
        return self.meta.backend or "?"

    @property
    def status(self) -> str:
        """As shown: `interrupted` for a run whose search process is gone without a word (store.owner)."""
        return self.meta.shown_status

    @property
    def stage(self) -> str:
        """The status with a run's end told apart: timing its best again, then `holdout` (search.run_end)."""
        from ksearch.search.run_end import shown_stage

        return shown_stage(self.status, self.meta.values)

    @property
    def stop_reason(self) -> str | None:
        """Why the run ended, in one line (None while it runs)."""
        return self.meta.stop_reason

    @property
    def budget(self) -> int | None:
        return self.meta.budget

    @property
    def evaluations_done(self) -> int:
        done = self.meta.evaluations_done
        return done if done is not None else len(self.evaluations)

    # -- the best candidate -------------------------------------------------------------------------------------
    @property
    def best_candidate(self) -> str | None:
        """The loop's own verdict when it recorded one; otherwise the best passed search evaluation."""
        cid = self.meta.best_candidate
        if cid:
            return cid
        passed = [e for e in self.evaluations if e.status == "passed" and e.score > 0]
        return max(passed, key=lambda e: e.score).candidate_id if passed else None

    @property
    def best_score(self) -> float:
        s = self.meta.best_score
        if s is not None:
            return s
        return max((a.score for a in self.attempts if a.status == "passed"), default=0.0)

    @property
    def chosen_candidate(self) -> str | None:
        """The run's result: its end's confirmation pick (meta `chosen_candidate`, search/run_end.py), else the
        search's best; `best.py` holds its source and the holdout judged it."""
        chosen = self.meta.get("chosen_candidate")
        return str(chosen) if chosen else self.best_candidate

    @property
    def holdout_candidate(self) -> str | None:
        """The candidate the last holdout evaluation judged (the run's result at its end); None without one."""
        return self.holdout_evaluations[-1].candidate_id if self.holdout_evaluations else None

    def best_result(self) -> EvalResult | None:
        """The search's best's highest search evaluation."""
        return self.search_result(self.best_candidate)

    def search_result(self, cid: str | None) -> EvalResult | None:
        """The candidate's highest search evaluation; None where it has none."""
        rows = [e for e in self.evaluations if e.candidate_id == cid]
        if not rows:
            return None
        return _result(max(rows, key=lambda e: e.score).result)

    def holdout_result(self) -> EvalResult | None:
        h = self.meta.holdout
        if h is not None and "status" in h:
            return _result(h)
        rows = [e for e in self.holdout_evaluations if e.candidate_id == self.chosen_candidate]
        return _result(rows[-1].result) if rows else None

    def confirmations(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The confirmation that chose the run's result (its end's, or an adopted `ksearch confirm`'s: the best timed
        again, the pick by median) and a later `ksearch confirm` not adopted; None each where there is none or its
        file does not read as one (search.confirm.confirmations)."""
        from ksearch.search.confirm import confirmations

        return confirmations(self.path, self.meta.values)

    def confirmation(self) -> dict[str, Any] | None:
        """The confirmation that chose the run's result (confirmations' first)."""
        return self.confirmations()[0]

    def candidate(self, cid: str | None) -> CandidateRow | None:
        return next((c for c in self.candidates if c.id == cid), None)

    def source(self, cid: str | None) -> str | None:
        c = self.candidate(cid)
        if c is None:
            return None
        p = self.path / c.path
        return p.read_text() if p.is_file() else None

    # -- world model ----------------------------------------------------------------------------------------------
    def world_model(self) -> dict[str, Any] | None:
        return self.world_models[-1].world_model if self.world_models else None

    def best_path(self) -> list[dict[str, Any]]:
        """World-model nodes from the root to the node whose solution is the best candidate (root first)."""
        wm = self.world_model()
        best = self.best_candidate
        if wm is None or best is None:
            return []
        nodes = {str(n.get("node_id")): n for n in wm_nodes(wm)}
        target = next((n for n in nodes.values() if solution_id(n) == best), None)
        if target is None:
            cand = self.candidate(best)
            target = nodes.get(str(cand.node_id)) if cand else None
        path: list[dict[str, Any]] = []
        seen: set[str] = set()
        while target is not None and str(target.get("node_id")) not in seen:
            seen.add(str(target.get("node_id")))
            path.append(target)
            target = nodes.get(str(target.get("parent_id")))
        return path[::-1]

    def best_actions(self) -> list[str]:
        """The path of actions that led to the best, as titles; falls back to the candidates' own lineage."""
        titles = [t for t in (action_title(n) for n in self.best_path()) if t]
        if titles:
            return titles
        chain: list[str] = []
        cand = self.candidate(self.best_candidate)
        seen: set[str] = set()
        while cand is not None and cand.id not in seen:
            seen.add(cand.id)
            if cand.action_title:
                chain.append(cand.action_title)
            cand = self.candidate(cand.parent_id)
        return chain[::-1]

    def current_action(self) -> str | None:
        selects = [e for e in self.events if e.kind == "select"]
        if selects:
            return str(selects[-1].data.get("title") or selects[-1].data.get("node_id"))
        return str(self.candidates[-1].action_title) if self.candidates else None

    # -- spend ----------------------------------------------------------------------------------------------------
    def llm_usage(self) -> dict[str, float]:
        """Totals from the calls table (authoritative: one row per call); the meta summary only when it has none."""
        if self.calls:
            return {
                "calls": len(self.calls),
                "tokens_in": sum(int(c.tokens_in or 0) for c in self.calls),
                "tokens_out": sum(int(c.tokens_out or 0) for c in self.calls),
                "cost_usd": sum(float(c.cost_usd or 0.0) for c in self.calls),
            }
        u = self.meta.llm_usage
        return {k: float(u.get(k) or 0) for k in ("calls", "tokens_in", "tokens_out", "cost_usd")}

    def llm_ledger(self) -> dict[str, Any]:
        """What the calls counted against the run's caps (search.ledger: counted tokens and cost, calls, retries,
        failed and lost calls, a claim past a call's bound). Runs written before the ledger kept retries: the
        calls table's figures."""
        u = self.meta.llm_usage
        if "retries" in u:
            return dict(u)
        out: dict[str, Any] = dict(self.llm_usage())
        out["retries"] = sum(int(c.retries or 0) for c in self.calls)
        out["failed_calls"] = sum(1 for c in self.calls if c.error)
        return out

    def world_model_origin(self) -> str:
        """Who wrote the initial world model: the proposer, or the offline one standing in for it (and why)."""
        fallback = next((e for e in self.events if e.kind == "world_model_fallback"), None)
        if fallback is not None:
            return str(fallback.data.get("message") or "the offline world model stands in for the proposer's")
        if self.meta.policy == "offline":
            return "the offline policy's (knowledge-driven)"
        inits = [c for c in self.calls if c.role == "init"]
        if not self.world_models and not inits:
            return "-"
        tidied = next((e for e in self.events if e.kind == "world_model_tidied"), None)
        mended = f"; {tidied.data.get('count')} of its links mended" if tidied is not None else ""
        return "written by the proposer" + (f" ({len(inits)} init calls)" if len(inits) > 1 else "") + mended

    def spend_by_role(self) -> list[dict[str, Any]]:
        roles: dict[str, dict[str, Any]] = {}
        for c in self.calls:
            r = roles.setdefault(str(c.role), {"role": str(c.role), "calls": 0, "tokens_in": 0, "tokens_out": 0,
                                               "cost_usd": 0.0, "errors": 0, "retries": 0})
            r["calls"] += 1
            r["retries"] += int(c.retries or 0)
            r["tokens_in"] += int(c.tokens_in or 0)
            r["tokens_out"] += int(c.tokens_out or 0)
            r["cost_usd"] += float(c.cost_usd or 0.0)
            r["errors"] += 1 if c.error else 0
        return list(roles.values())

    def cycles(self) -> list[Cycle]:
        """The refinement cycles: why each ended and the world-model edits around it (report/cycles.py)."""
        return read_cycles(self.events, self.meta.get("stop_kind"), self.stop_reason,
                           self.status not in ("running", "interrupted"))

    def notable_events(self) -> list[EventRow]:
        """What the loop did besides evaluating: backtracks, ideas judged too hard, rejected edits, policy errors."""
        return [e for e in self.events if e.kind in NOTABLE_EVENTS]

    def status_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.attempts:
            out[a.status] = out.get(a.status, 0) + 1
        return out


# -- world-model helpers (field names of the K-Search JSON; every field may be missing in a hand-edited snapshot) --
def wm_nodes(wm: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = (wm.get("decision_tree") or {}).get("nodes") or []
    return [n for n in nodes if isinstance(n, dict)]


def action_title(node: dict[str, Any]) -> str | None:
    a = node.get("action")
    if isinstance(a, dict) and a.get("title"):
        return str(a["title"])
    # A node without an action (the root) names what was chosen in `choice`, the question in `decision`.
    return str(node.get("choice") or node.get("decision") or "") or None


def solution_id(node: dict[str, Any]) -> str | None:
    ref = node.get("solution_ref")
    return str(ref["solution_id"]) if isinstance(ref, dict) and ref.get("solution_id") else None


def node_eval(node: dict[str, Any]) -> tuple[str | None, float | None]:
    ref = node.get("solution_ref")
    ev = ref.get("eval") if isinstance(ref, dict) else None
    if not isinstance(ev, dict):
        return None, None
    score = ev.get("score")
    return (str(ev["status"]) if ev.get("status") else None,
            float(score) if isinstance(score, int | float) else None)


def _result(data: dict[str, Any]) -> EvalResult | None:
    try:
        return EvalResult.from_json(data)
    except TypeError:  # a result written by a newer ksearch with extra fields: keep what we know
        known = set(EvalResult.__dataclass_fields__)
        return EvalResult.from_json({k: v for k, v in data.items() if k in known})


def load_run(run_dir: Path) -> RunData:
    """Read a whole run (RunNotFound, RunUnreadable from the store when it cannot be read)."""
    return RunData(read_run(run_dir))
