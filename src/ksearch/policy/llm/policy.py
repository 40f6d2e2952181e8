"""The LLM policy: K-Search's five questions answered by a reasoning model and a coding model.

Each question is one call (plus at most one repair call when the answer cannot be used), and every call,
successful or not, is handed to ctx.record_call. Failures the loop should survive become PolicyError; the
spending caps become BudgetExhausted, checked before each call; a diverged replay becomes ReplayMismatch,
which stops the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ksearch.errors import CallFailed, PolicyError
from ksearch.policy.base import (
    Attempt,
    CallRecord,
    Feedback,
    ImplementRequest,
    PolicyContext,
)
from ksearch.policy.llm.client import Messages, Outcome, Transport
from ksearch.policy.llm.parsing import Parsed, extract_code, extract_json, strip_thinking
from ksearch.policy.llm.pricing import Budget
from ksearch.policy.llm.prompts import action_view, common, render
from ksearch.policy.llm.replay import ReplayTransport, render_prompt

CODE_TEMPLATES = {"first": "code_first.j2", "debug": "code_debug.j2", "improve": "code_improve.j2"}


class LLMPolicy:
    name = "llm"

    def __init__(
        self, transport: Transport, budget: Budget, reasoning_model: str | None, coder_model: str | None
    ) -> None:
        self.transport = transport
        self.budget = budget
        self.reasoning_model = reasoning_model
        self.coder_model = coder_model
        self.calls = 0  # calls made, failed ones included: a replay's position in its recording
        self.failures = 0
        self.analysis = ""
        # The last source handed to the loop: the fallback for a debug / improve request that carries no code.
        self.last_source: str | None = None

    # -- the protocol ----------------------------------------------------------------------------------------
    def analyse(self, ctx: PolicyContext) -> str:
        prompt = render("analysis.j2", **common(ctx))
        text: str = self._ask(ctx, "analysis", self.reasoning_model, prompt, _nonempty, want="text")
        self.analysis = text
        return text

    def init_world_model(self, ctx: PolicyContext, analysis: str) -> dict[str, Any]:
        self.analysis = analysis or self.analysis
        prompt = render("world_model_init.j2", **common(ctx), analysis=self.analysis)
        wm: dict[str, Any] = self._ask(
            ctx,
            "init",
            self.reasoning_model,
            prompt,
            lambda t: extract_json(t, ("decision_tree",)),
            want="json",
            keys=("kernel_summary", "decision_tree"),
        )
        return wm

    def implement(self, ctx: PolicyContext, request: ImplementRequest) -> tuple[str, dict[str, Any]] | None:
        # The loop hands over the code to work on (first: the parent's; debug: the failed attempt; improve: the
        # cycle's best); what this policy last proposed stands in when it has none.
        source = request.parent_source or (self.last_source if request.mode != "first" else None)
        if source is None:
            try:
                source = ctx.task.starting_source(ctx.backend.family)
            except KeyError:
                source = ""
        fb = request.feedback or Feedback(status="unknown", message="", score=0.0)
        prompt = render(
            CODE_TEMPLATES[request.mode],
            **common(ctx),
            action=action_view(request.action),
            parent_source=source.rstrip("\n"),
            fb=fb.to_json(),
            history=[a.to_json() for a in request.history],
            best_score=request.best_score,
            analysis=self.analysis,
        )
        code: str = self._ask(ctx, "code", self.coder_model, prompt, extract_code, want="code")
        self.last_source = code
        return code, {}

    def update(
        self, ctx: PolicyContext, world_model: dict[str, Any], cycle: list[Attempt], rejection: str | None
    ) -> dict[str, Any]:
        prompt = render(
            "world_model_edit.j2",
            **common(ctx),
            world_model=json.dumps(world_model, indent=1, sort_keys=True, default=str),
            cycle=[a.to_json() for a in cycle],
            rejection=rejection,
            best_score=_best_score(world_model, cycle),
        )
        edit: dict[str, Any] = self._ask(
            ctx,
            "edit",
            self.reasoning_model,
            prompt,
            lambda t: extract_json(t, ("ops",)),
            want="json",
            keys=("active_leaf_id", "ops"),
        )
        if not isinstance(edit.get("ops"), list):
            raise PolicyError(f"edit: 'ops' is a {type(edit.get('ops')).__name__}, not a list")
        return edit

    def state(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "failures": self.failures,
            "analysis": self.analysis,
            "last_source": self.last_source,
            "budget": self.budget.state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.calls = int(state.get("calls", 0))
        self.failures = int(state.get("failures", 0))
        self.analysis = str(state.get("analysis") or "")
        self.last_source = state.get("last_source")
        self.budget.load_state(state.get("budget") or {})
        if isinstance(self.transport, ReplayTransport):
            self.transport.position = self.calls

    # -- one question: a call, and at most one repair call ---------------------------------------------------
    def _ask(
        self,
        ctx: PolicyContext,
        role: str,
        model: str | None,
        prompt: str,
        parse: Callable[[str], Parsed],
        want: str,
        keys: tuple[str, ...] = (),
    ) -> Any:
        messages: Messages = [
            {"role": "system", "content": render("system.j2", **common(ctx))},
            {"role": "user", "content": prompt},
        ]
        json_mode = want == "json"
        out = self._call(ctx, role, model, messages, json_mode)
        parsed = parse(out.text)
        if parsed.problem is None:
            return parsed.value
        # One repair round: the model sees its own answer and what was wrong with it. Bounded, so that a model
        # that cannot comply costs two calls, not a loop.
        repair = render("repair.j2", problem=parsed.problem, want=want, keys=list(keys))
        messages = [
            *messages,
            {"role": "assistant", "content": out.text},
            {"role": "user", "content": repair},
        ]
        out = self._call(ctx, "repair", model, messages, json_mode)
        parsed = parse(out.text)
        if parsed.problem is None:
            return parsed.value
        self.failures += 1
        raise PolicyError(f"{role}: unusable answer after one repair round: {parsed.problem}")

    def _call(
        self, ctx: PolicyContext, role: str, model: str | None, messages: Messages, json_mode: bool
    ) -> Outcome:
        self.budget.check()
        prompt = render_prompt(messages)
        try:
            out = self.transport.complete(role, model, messages, json_mode=json_mode)
        except CallFailed as exc:
            self.calls += 1
            self.failures += 1
            ctx.record_call(
                CallRecord(
                    role=role,
                    model=model or "",
                    prompt=prompt,
                    response="",
                    latency_s=exc.latency_s,
                    retries=exc.retries,
                    error=str(exc),
                )
            )
            raise
        self.calls += 1
        cost = (
            out.cost_usd
            if out.cost_usd is not None
            else self.budget.cost(out.model, out.tokens_in, out.tokens_out)
        )
        self.budget.add(out.tokens_in, out.tokens_out, cost)
        ctx.record_call(
            CallRecord(
                role=role,
                model=out.model,
                prompt=prompt,
                response=out.text,
                tokens_in=out.tokens_in,
                tokens_out=out.tokens_out,
                latency_s=out.latency_s,
                cost_usd=cost,
                retries=out.retries,
            )
        )
        return out


def _nonempty(text: str) -> Parsed:
    text = strip_thinking(text).strip()
    return Parsed(text) if text else Parsed(None, "the answer is empty")


def _best_score(world_model: dict[str, Any], cycle: list[Attempt]) -> float:
    best = max((a.score for a in cycle), default=0.0)
    nodes = (world_model.get("decision_tree") or {}).get("nodes") or []
    if isinstance(nodes, dict):  # some writers key nodes by id
        nodes = list(nodes.values())
    for node in nodes:
        ev = ((node or {}).get("solution_ref") or {}).get("eval") or {}
        try:
            best = max(best, float(ev.get("score") or 0.0))
        except (TypeError, ValueError):
            continue
    return best
