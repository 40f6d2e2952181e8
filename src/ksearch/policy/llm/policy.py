"""The LLM policy: K-Search's five questions answered by a reasoning model and a coding model.

Each question is one call (plus at most one repair call when the answer cannot be used), and every call,
successful or not, is handed to ctx.record_call (and announced before the request, with its bound, to
ctx.begin_call). Failures the loop should survive become PolicyError; the spending caps become BudgetExhausted,
checked before each call, whose max_tokens is what the token and USD caps leave (pricing.Budget); a diverged
replay becomes ReplayMismatch, which stops the run.

Prompts are fitted to the model's context (fitting.py) when it is known; a server refusing a prompt as too
long for its context teaches the policy that context (the question is then asked once more, fitted). The
world-model calls name their JSON schema (schemas.py), which the transport sends as a structured-output
response format where the endpoint takes one. What is done with an answer depends only on its text, so a
replayed run takes the same path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ksearch.errors import CallFailed, PolicyError
from ksearch.policy.base import (
    Attempt,
    CallBound,
    CallRecord,
    CycleEvidence,
    Feedback,
    ImplementRequest,
    PolicyContext,
)
from ksearch.policy.llm.client import Messages, Outcome, Transport
from ksearch.policy.llm.context import context_from_error
from ksearch.policy.llm.fitting import (
    MESSAGE_OVERHEAD,
    Prompt,
    Window,
    estimate_tokens,
    fit,
    messages_tokens,
    shorter,
    spec_trims,
)
from ksearch.policy.llm.parsing import Parsed, excerpt, extract_code, extract_json, strip_thinking
from ksearch.policy.llm.pricing import Budget
from ksearch.policy.llm.prompts import (
    action_view,
    common,
    edit_json,
    frontier_view,
    render,
    wm_nodes,
    world_model_view,
)
from ksearch.policy.llm.replay import ReplayTransport, render_prompt
from ksearch.policy.llm.schemas import without_null_patches
from ksearch.store.redact import redact

log = logging.getLogger("ksearch.llm")

CODE_TEMPLATES = {"first": "code_first.j2", "debug": "code_debug.j2", "improve": "code_improve.j2"}
#: The analysis is kept (and later quoted) up to this many characters.
ANALYSIS_CHARS = 12_000
#: A repair round quotes at most this much of the unusable answer (less where the context is small).
REPAIR_QUOTE_CHARS = 12_000


class LLMPolicy:
    name = "llm"

    def __init__(
        self,
        transport: Transport,
        budget: Budget,
        reasoning_model: str | None,
        coder_model: str | None,
        *,
        context_tokens: int | None = None,
        max_output_tokens: int = 8192,
    ) -> None:
        self.transport = transport
        self.budget = budget
        self.reasoning_model = reasoning_model
        self.coder_model = coder_model
        self.context_tokens = context_tokens  # None: unknown, prompts go out whole
        self.max_output_tokens = max_output_tokens
        self.calls = 0  # calls made, failed ones included: a replay's position in its recording
        self.failures = 0
        self.analysis = ""
        # The last source handed to the loop: the fallback for a debug / improve request that carries no code.
        self.last_source: str | None = None
        self.notes: list[str] = []  # what the endpoint made us change (structured output refused, ...)
        self.served_model: str | None = None  # the model that answered (where none was named)

    # -- the protocol ----------------------------------------------------------------------------------------
    def analyse(self, ctx: PolicyContext) -> str:
        base = common(ctx)
        prompt = Prompt("analysis.j2", base, spec_trims(base["spec"], base["port"]))
        text: str = self._ask(ctx, "analysis", self.reasoning_model, prompt, _nonempty, want="text")
        self.analysis = text[:ANALYSIS_CHARS]
        return self.analysis

    def init_world_model(self, ctx: PolicyContext, analysis: str) -> dict[str, Any]:
        self.analysis = (analysis or self.analysis)[:ANALYSIS_CHARS]
        base = common(ctx)
        spec, port = base["spec"], base["port"]
        trims: list[tuple[str, Any]] = [("port", "")] if port else []
        if spec:
            trims += [("spec", shorter(spec, 0.5))]
        trims += [("analysis", shorter(self.analysis, 0.35))]
        if spec:
            trims += [("spec", shorter(spec, 0.25)), ("spec", "")]
        trims += [("analysis", shorter(self.analysis, 0.12)), ("analysis", "")]
        prompt = Prompt("world_model_init.j2", {**base, "analysis": self.analysis}, trims)
        wm: dict[str, Any] = self._ask(
            ctx,
            "init",
            self.reasoning_model,
            prompt,
            lambda t: extract_json(t, ("decision_tree",)),
            want="json",
            keys=("kernel_summary", "decision_tree"),
            schema="world_model",
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
        fb = (request.feedback or Feedback(status="unknown", message="", score=0.0)).to_json()
        best_fb = request.best_feedback.to_json() if request.best_feedback else None
        history = [a.to_json() for a in request.history]
        base = common(ctx)
        wm = world_model_view(request.world_model, str(request.action.get("node_id") or ""))
        # The search's best is shown when it is none of the code the prompt already quotes.
        quoted = {source, request.latest_source, request.base_source}
        best_source = request.best_source if request.best_source and request.best_source not in quoted else None
        variables = {
            **base,
            "action": action_view(request.action),
            "parent_source": source.rstrip("\n"),
            "fb": fb,
            "best_fb": best_fb,
            "latest_source": (request.latest_source or "").rstrip("\n") or None,
            "base_source": (request.base_source or "").rstrip("\n") or None,
            "parent_score": request.parent_score,
            "best_source": (best_source or "").rstrip("\n") or None,
            "wm": wm,
            "history": history,
            "best_score": request.best_score,
            "analysis": self.analysis,
        }
        # Least important first: the attempt log, the search's best kept for reference, the world model's
        # alternatives, the analysis, the porting context, the spec's details, the code the action started from,
        # the verdicts' logs, the rest of the world model. The task, the contract, the action, the code to work on
        # and the latest attempt stay whole.
        trims: list[tuple[str, Any]] = []
        if len(history) > 3:
            trims.append(("history", history[-3:]))
        if history:
            trims.append(("history", []))
        if best_source:
            trims.append(("best_source", None))
        if wm and (wm["siblings"] or wm["open_questions"]):
            trims.append(("wm", {**wm, "siblings": [], "open_questions": []}))
        if request.mode == "first" and self.analysis:
            trims.append(("analysis", shorter(self.analysis, 0.15)))
        message = str(fb.get("message") or "")
        if len(message) > 2000:
            trims.append(("fb", {**fb, "message": shorter(message, 2000 / len(message))}))
        trims += spec_trims(base["spec"], base["port"])
        if request.base_source:
            trims.append(("base_source", None))
        if request.mode == "first" and self.analysis:
            trims.append(("analysis", ""))
        if len(message) > 500:
            trims.append(("fb", {**fb, "message": shorter(message, 500 / len(message))}))
        best_message = str((best_fb or {}).get("message") or "")
        if best_fb and len(best_message) > 500:
            trims.append(("best_fb", {**best_fb, "message": shorter(best_message, 500 / len(best_message))}))
        if wm:
            trims.append(("wm", None))
        prompt = Prompt(CODE_TEMPLATES[request.mode], variables, trims)
        code: str = self._ask(ctx, "code", self.coder_model, prompt, extract_code, want="code")
        self.last_source = code
        return code, {}

    def update(
        self, ctx: PolicyContext, world_model: dict[str, Any], cycle: list[Attempt], rejection: str | None,
        evidence: CycleEvidence | None = None,
    ) -> dict[str, Any]:
        attempts = [a.to_json() for a in cycle]
        ev = None
        fb = None
        if evidence is not None:
            node = next((n for n in wm_nodes(world_model) if n.get("node_id") == evidence.node_id), {})
            ev = {**asdict(evidence), "title": action_view(node)["title"] if node else evidence.node_id,
                  "code": (evidence.code or "").rstrip("\n") or None}
            ev.pop("verdict")
            fb = evidence.verdict.to_json() if evidence.verdict else None
        variables = {
            **self._edit_head(ctx, world_model),
            "cycle": attempts,
            "ev": ev,
            "fb": fb,
            "rejection": rejection,
            "best_score": _best_score(world_model, cycle),
        }
        trims: list[tuple[str, Any]] = []
        if len(attempts) > 6:
            trims.append(("cycle", attempts[-6:]))
        trims += self._edit_trims(variables, world_model)
        if fb and len(str(fb.get("message") or "")) > 500:
            message = str(fb["message"])
            trims.append(("fb", {**fb, "message": shorter(message, 500 / len(message))}))
        if len(attempts) > 2:
            trims.append(("cycle", attempts[-2:]))
        if ev and ev.get("code"):
            trims.append(("ev", {**ev, "code": shorter(str(ev["code"]), 0.3)}))
        return self._edit(ctx, Prompt("world_model_edit.j2", variables, trims))

    def refresh(
        self, ctx: PolicyContext, world_model: dict[str, Any], needs: list[str], rejection: str | None
    ) -> dict[str, Any]:
        variables = {
            **self._edit_head(ctx, world_model),
            "needs": list(needs),
            "rejection": rejection,
            "best_score": _best_score(world_model, []),
        }
        return self._edit(ctx, Prompt("world_model_refresh.j2", variables, self._edit_trims(variables, world_model)))

    def _edit_head(self, ctx: PolicyContext, world_model: dict[str, Any]) -> dict[str, Any]:
        """What every world-model edit prompt shows: the task, the analysis (kept in the root's notes), the world
        model, the actions ready to try."""
        return {**common(ctx), "analysis": self.analysis, "world_model": edit_json(world_model),
                "frontier": frontier_view(world_model)}

    @staticmethod
    def _edit_trims(variables: dict[str, Any], world_model: dict[str, Any]) -> list[tuple[str, Any]]:
        """Least important first: most of the analysis, the world model's layout, then the rest of the analysis."""
        analysis = str(variables.get("analysis") or "")
        trims: list[tuple[str, Any]] = []
        if analysis:
            trims.append(("analysis", shorter(analysis, 0.35)))
        trims.append(("world_model", edit_json(world_model, compact=True)))
        if analysis:
            trims += [("analysis", shorter(analysis, 0.1)), ("analysis", "")]
        return trims

    def _edit(self, ctx: PolicyContext, prompt: Prompt) -> dict[str, Any]:
        edit: dict[str, Any] = self._ask(
            ctx,
            "edit",
            self.reasoning_model,
            prompt,
            lambda t: extract_json(t, ("ops",)),
            want="json",
            keys=("active_leaf_id", "ops"),
            schema="world_model_edit",
        )
        if not isinstance(edit.get("ops"), list):
            raise PolicyError(f"edit: 'ops' is a {type(edit.get('ops')).__name__}, not a list")
        return without_null_patches(edit)

    def state(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "failures": self.failures,
            "analysis": self.analysis,
            "last_source": self.last_source,
            "budget": self.budget.state(),
            "context_tokens": self.context_tokens,
            "structured_output": getattr(self.transport, "structured", None),
            "structured_refused": bool(getattr(self.transport, "refused", False)),
            "notes": list(self.notes),
            "served_model": self.served_model,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.calls = int(state.get("calls", 0))
        self.failures = int(state.get("failures", 0))
        self.analysis = str(state.get("analysis") or "")[:ANALYSIS_CHARS]
        self.last_source = state.get("last_source")
        self.budget.load_state(state.get("budget") or {})
        if state.get("context_tokens"):
            self.context_tokens = int(state["context_tokens"])
        self.notes = [str(n) for n in state.get("notes") or []]
        self.served_model = state.get("served_model") or None
        if "structured_output" in state and hasattr(self.transport, "structured"):
            # A refusal of structured output holds for the whole run, resumed or not.
            setattr(self.transport, "structured", state["structured_output"])  # noqa: B010 (not in the protocol)
            setattr(self.transport, "refused", bool(state.get("structured_refused")))  # noqa: B010
        if isinstance(self.transport, ReplayTransport):
            self.transport.position = self.calls

    # -- one question: a call, and at most one repair call ---------------------------------------------------
    def window(self) -> Window:
        return Window(self.context_tokens, self.max_output_tokens)

    def _ask(
        self,
        ctx: PolicyContext,
        role: str,
        model: str | None,
        prompt: Prompt,
        parse: Callable[[str], Parsed],
        want: str,
        keys: tuple[str, ...] = (),
        schema: str | None = None,
    ) -> Any:
        system = render("system.j2", **common(ctx))
        json_mode = want == "json"

        def messages_now() -> Messages:
            budget = self.window().prompt_tokens
            if budget is not None:
                budget -= estimate_tokens(system) + MESSAGE_OVERHEAD
            fitted = fit(prompt, budget)
            if fitted.trimmed:
                log.info("%s: prompt trimmed to fit %s tokens of context: %s", role, self.context_tokens,
                         ", ".join(fitted.trimmed))
            return [{"role": "system", "content": system}, {"role": "user", "content": fitted.text}]

        messages = messages_now()
        try:
            out = self._call(ctx, role, model, messages, json_mode, schema)
        except CallFailed as exc:
            if not self._learn_context(exc):
                raise
            messages = messages_now()  # the same question, fitted to the context the server named
            out = self._call(ctx, role, model, messages, json_mode, schema)
        parsed = parse(out.text)
        if parsed.problem is None:
            return parsed.value
        # One repair round: the model sees (an excerpt of) its own answer and what was wrong with it. Bounded,
        # so that a model that cannot comply costs two calls, not a loop.
        repair = render("repair.j2", problem=parsed.problem, want=want, keys=list(keys))
        quote = REPAIR_QUOTE_CHARS
        budget = self.window().prompt_tokens
        if budget is not None:
            room = budget - messages_tokens([*messages, {"role": "user", "content": repair}]) - MESSAGE_OVERHEAD
            quote = max(400, min(quote, int(room * 3)))
        messages = [
            *messages,
            {"role": "assistant", "content": excerpt(out.text, quote)},
            {"role": "user", "content": repair},
        ]
        out = self._call(ctx, "repair", model, messages, json_mode, schema)
        parsed = parse(out.text)
        if parsed.problem is None:
            return parsed.value
        self.failures += 1
        raise PolicyError(f"{role}: unusable answer after one repair round: {parsed.problem}")

    def _learn_context(self, exc: CallFailed) -> bool:
        """True when the failure names a context smaller than the one prompts were fitted to (reading the
        message, so that a replay learns the same)."""
        n = context_from_error(str(exc))
        if n is None or (self.context_tokens is not None and n >= self.context_tokens):
            return False
        log.warning("the server's context is %d tokens; prompts are fitted to it from now on", n)
        self.context_tokens = n
        return True

    def _call(
        self,
        ctx: PolicyContext,
        role: str,
        model: str | None,
        messages: Messages,
        json_mode: bool,
        schema: str | None = None,
    ) -> Outcome:
        self.budget.check()
        # Nothing the search read from a candidate or an answer takes a key to the server (the verdicts are
        # redacted before they get here; this is the last look before the text leaves the process).
        messages = [{**m, "content": redact(m["content"])} for m in messages]
        prompt = render_prompt(messages)
        prompt_tokens = messages_tokens(messages)
        wanted = self.window().max_tokens_for(prompt_tokens) or self.max_output_tokens
        name = self._model_name(model)
        # Bounded by what the caps leave (BudgetExhausted, before anything is sent, when that is too little).
        max_tokens = self.budget.answer_room(name, prompt_tokens, wanted)
        ctx.begin_call(
            CallBound(role, name, prompt_tokens, max_tokens, self.budget.bound_cost(name, prompt_tokens, max_tokens))
        )
        try:
            out = self.transport.complete(
                role, model, messages, json_mode=json_mode, schema=schema, max_tokens=max_tokens
            )
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
        if model is None and out.model:
            self.served_model = out.model
        for note in out.notes:
            if note not in self.notes:
                self.notes.append(note)
        cost = (
            out.cost_usd
            if out.cost_usd is not None
            else self.budget.cost(out.model, out.tokens_in, out.tokens_out)
        )
        bound = (prompt_tokens, max_tokens, self.budget.bound_cost(out.model, prompt_tokens, max_tokens))
        counted, over = self.budget.count((out.tokens_in, out.tokens_out, cost), bound)
        if over:
            log.warning("%s: %s", role, over)
        self.budget.add(*counted)
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
                counted=counted if over else None,
                note=over,
            )
        )
        return out

    def _model_name(self, model: str | None) -> str:
        """The model a call goes to, for pricing its bound: the one named, else the one the server serves (asked
        only where a USD cap needs its price)."""
        if model or self.served_model or self.budget.max_usd is None:
            return model or self.served_model or ""
        resolve = getattr(self.transport, "model_for", None)
        if resolve is None:
            return ""
        try:
            self.served_model = str(resolve(None))
        except CallFailed:
            return ""  # the call itself will fail the same way, and be recorded
        return self.served_model

    def load_usage(self, usage: dict[str, Any]) -> None:
        """The spending counters from the run's ledger (exact, lost calls at their bound); see Budget.load_usage."""
        self.budget.load_usage(usage)


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
