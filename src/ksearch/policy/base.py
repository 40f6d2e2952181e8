"""The policy protocol: who proposes actions and code. The search loop is the only caller.

A policy answers these questions, in the order of K-Search:
  analyse(ctx)                      -> the fixed analysis of the task (text), once per run
  init_world_model(ctx, analysis)   -> the initial world model (K-Search JSON: kernel_summary, decision_tree, ...)
  implement(ctx, request)           -> candidate source for one attempt (first / debug / improve), or None
  update(ctx, world_model, cycle)   -> world-model edit ops {"active_leaf_id": ..., "ops": [...]} after a cycle
  refresh(ctx, world_model, needs)  -> edit ops that keep the frontier supplied, before a cycle
  state() / load_state(state)       -> what the policy needs to resume exactly (JSON-serialisable)

Policies raise PolicyError for failures the loop should count and survive (an LLM that times out, unparseable output);
any other exception is a bug.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from ksearch.backends import Backend
from ksearch.harness.result import EvalResult
from ksearch.policy.stable import stable_text
from ksearch.tasks.base import Task

Mode = Literal["first", "debug", "improve"]


@dataclass
class Feedback:
    """What the harness said about the last attempt, in the form prompts and templates consume."""

    status: str
    message: str
    score: float
    speedups: dict[str, float] = field(default_factory=dict)
    latencies_s: dict[str, float] = field(default_factory=dict)
    baseline_latencies_s: dict[str, float] = field(default_factory=dict)
    roofline: dict[str, float] = field(default_factory=dict)
    #: The profiler's counters in one line (harness/profile.py: summary_line), where the candidate was profiled.
    counters: str = ""

    @classmethod
    def from_result(cls, r: EvalResult) -> Feedback:
        return cls(
            status=r.status,
            message=stable_text(r.message)[-3000:],  # the same words for the same failure (stable.py)
            score=r.score,
            speedups={w.name: w.speedup for w in r.workloads if w.speedup is not None},
            latencies_s={w.name: w.latency_s for w in r.workloads if w.latency_s is not None},
            baseline_latencies_s={w.name: w.baseline_latency_s for w in r.workloads
                                  if w.baseline_latency_s is not None},
            roofline={w.name: w.roofline_fraction for w in r.workloads if w.roofline_fraction is not None},
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Attempt:
    """One evaluated (or skipped) candidate within a refinement cycle."""

    candidate_id: str
    node_id: str
    mode: Mode
    status: str
    score: float
    message: str = ""
    params: dict[str, Any] = field(default_factory=dict)  # template parameters (offline) or "" (LLM)
    improved: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ImplementRequest:
    action: dict[str, Any]  # the world-model node being implemented (K-Search node JSON)
    mode: Mode
    #: The code to work on: first, the parent node's (the starting kernel at the root); debug, the attempt that
    #: failed; improve, the cycle's best.
    parent_source: str | None
    parent_params: dict[str, Any] | None  # template parameters of the parent (offline policy)
    feedback: Feedback | None  # the harness's verdict on the latest attempt (debug / improve)
    history: list[Attempt]  # this cycle so far
    best_source: str | None  # the best kernel of the whole search
    best_score: float
    #: The world model as it stands (K-Search JSON), for the context a prompt shows around the action.
    world_model: dict[str, Any] | None = None
    #: improve: the latest attempt's code when it is not the cycle's best (`feedback` is its verdict).
    latest_source: str | None = None
    #: improve: the verdict on the cycle's best (`parent_source`).
    best_feedback: Feedback | None = None
    #: debug / improve: the code the action started from (the parent node's), and the parent's score.
    base_source: str | None = None
    parent_score: float | None = None


@dataclass
class CycleEvidence:
    """What the world-model edit after a refinement cycle reasons over, beside the cycle's attempts."""

    node_id: str
    end_reason: str  # why the cycle ended, in words
    code: str | None  # the code the cycle ended with: its best passing kernel, else its latest attempt
    code_candidate: str | None
    verdict: Feedback | None  # the harness's whole verdict on that code
    expected: float | None  # the node's prediction: action.expected_vs_baseline_factor
    measured: float | None  # the cycle's best score (None: nothing passed)
    parent_score: float | None  # the score of the code the action started from


@dataclass
class CallRecord:
    """One proposer call (an LLM request; the offline policy records none)."""

    role: str  # analysis | init | edit | code | repair
    model: str
    prompt: str
    response: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    retries: int = 0
    error: str | None = None
    #: What the call counts against the run's token and USD caps, where that differs from what the endpoint
    #: claimed (tokens_in, tokens_out, cost_usd above): a claim past the call's bound that would break a cap
    #: counts at the bound. None: as claimed.
    counted: tuple[int, int, float] | None = None
    note: str | None = None  # e.g. the claimed usage was over the call's bound


@dataclass(frozen=True)
class CallBound:
    """The most one call may cost: its prompt (estimated tokens) and the answer's max_tokens, priced. Recorded
    in the run before the request goes out, so that a call lost to a kill still counts, at this bound."""

    role: str
    model: str
    tokens_in: int
    tokens_out: int
    cost_usd: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PolicyContext:
    task: Task
    backend: Backend
    rng: random.Random
    spec: str = ""  # the rendered spec document (ksearch.knowledge.spec), "" without the knowledge layer
    port_context: dict[str, Any] | None = None  # from `--from-cuda FILE.cu` (ksearch.knowledge.analyzer)
    record_call: Callable[[CallRecord], None] = lambda _c: None
    #: Called before each proposer request with its bound; record_call then replaces it by the outcome.
    begin_call: Callable[[CallBound], None] = lambda _b: None
    round: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Policy(Protocol):
    name: str

    def analyse(self, ctx: PolicyContext) -> str: ...

    def init_world_model(self, ctx: PolicyContext, analysis: str) -> dict[str, Any]: ...

    def implement(self, ctx: PolicyContext, request: ImplementRequest) -> tuple[str, dict[str, Any]] | None:
        """Candidate source plus its parameters (JSON; {} when not template-based), or None."""
        ...

    def update(
        self, ctx: PolicyContext, world_model: dict[str, Any], cycle: list[Attempt], rejection: str | None,
        evidence: CycleEvidence | None = None,
    ) -> dict[str, Any]:
        """Edit ops for the world model after a cycle. `rejection` is the reason the previous proposal was refused,
        if any; `evidence` what the cycle ended with (code, verdict, predicted against measured)."""
        ...

    def refresh(
        self, ctx: PolicyContext, world_model: dict[str, Any], needs: list[str], rejection: str | None
    ) -> dict[str, Any]:
        """Edit ops that supply the frontier before a cycle: `needs` says what is missing (too few actions ready
        to try, none rated above 0.5, no open child under the best node)."""
        ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...
