"""`ksearch llm ping`: one tiny request with the run's LLM settings, the model's context window, and whether
ksearch's prompts fit in it, all within one deadline."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ksearch.config import LLMConfig
from ksearch.errors import CallFailed, ContextTooSmall
from ksearch.policy.llm.client import ChatClient, Messages, Sampling
from ksearch.policy.llm.context import BIGGER_CONTEXT, ContextInfo, context_from_error
from ksearch.policy.llm.fitting import Window, messages_tokens
from ksearch.policy.llm.presets import resolve
from ksearch.policy.llm.pricing import Budget, load_prices
from ksearch.policy.llm.prompts import render

#: A code prompt for a small task with the spec, as ksearch sends it (softmax on mlx-cpu: about 13k
#: characters); prompts larger than the window allows are trimmed, least important sections first.
TYPICAL_PROMPT_TOKENS = 4600


def smallest_prompt() -> Messages:
    """ksearch's smallest complete question, as fitting leaves it in the tightest window: a debug request for a
    small task with every trimmable section cut (no spec, no history, a short verdict)."""
    task = {
        "name": "softmax",
        "kind": "reduction",
        "description": "Row-wise softmax over the last axis of x.",
        "inputs": [{"name": "x", "shape": ["M", "N"], "dtype": "the workload's dtype"}],
        "outputs": [{"name": "y", "shape": ["M", "N"], "dtype": "the workload's dtype"}],
        "workloads": [{"name": "cpu_256x1024_f32", "axes": {"M": 256, "N": 1024}, "dtype": "float32", "params": {}}],
        "params": [],
        "forbidden": ["mx.softmax"],
    }
    backend = {"name": "mlx-cpu", "dialect": "cpu", "tier": "cpu", "hardware": '{"cores": 8}'}
    source = (
        "import mlx.core as mx\n\n\ndef run(x):\n    xf = x.astype(mx.float32)\n"
        "    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))\n"
        "    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)"
    )
    variables = {
        "task": task,
        "backend": backend,
        "spec": "",
        "port": "",
        "round": 0,
        "action": {"title": "fuse the passes", "description": "one compiled graph", "rationale": "",
                   "expected": 1.3, "notes": ""},
        "parent_source": source,
        "fb": {"status": "runtime_error", "message": "NameError: name 'e2' is not defined", "score": 0.0,
               "speedups": {}, "latencies_s": {}, "baseline_latencies_s": {}, "roofline": {}},
        "history": [],
        "best_score": 0.0,
        "analysis": "",
        "wm": None,  # the smallest prompt: no world model, no parent code
        "base_source": None,
        "parent_score": None,
    }
    return [
        {"role": "system", "content": render("system.j2", **variables)},
        {"role": "user", "content": render("code_debug.j2", **variables)},
    ]


def ping(cfg: LLMConfig, timeout_s: float, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A row of facts about the endpoint; raises CallFailed when it does not answer, LLMConfigError when the
    settings cannot work. Everything, retries and probes included, ends within `timeout_s`."""
    endpoint = resolve(cfg, environ)
    budget = Budget(prices=load_prices(None, environ), warn_unpriced=endpoint.api_key_env is not None)
    deadline = time.monotonic() + timeout_s
    client = ChatClient(
        endpoint,
        Sampling(temperature=0.0, max_output_tokens=16),
        timeout_s=timeout_s,
        max_retries=1,
        deadline=deadline,
        max_answer_bytes=cfg.max_answer_kb * 1024,
        structured=False,
        environ=environ,
    )
    out = client.complete("ping", endpoint.model, [{"role": "user", "content": "Reply with one word: pong"}])
    row: dict[str, Any] = {
        "base_url": endpoint.base_url,
        "model": out.model,
        "latency_s": round(out.latency_s, 3),
        "retries": out.retries,
        "tokens_in": out.tokens_in,
        "tokens_out": out.tokens_out,
        "cost_usd": budget.cost(out.model, out.tokens_in, out.tokens_out),
        "answer": out.text.strip()[:200],
    }
    if cfg.context_tokens:
        info = ContextInfo(cfg.context_tokens, "[llm] context_tokens")
    else:
        info = client.discover_context(out.model, timeout_s=max(deadline - time.monotonic(), 0.0))
    smallest = smallest_prompt()
    need = messages_tokens(smallest)
    if info.tokens is None and endpoint.api_key_env is None and deadline - time.monotonic() > 1.0:
        # A local server that does not say: send the smallest real prompt and see whether it is refused.
        try:
            client.complete("ping", out.model, smallest, max_tokens=1)
            row["probe"] = f"a prompt of about {need} tokens was accepted"
        except ContextTooSmall as exc:
            n = context_from_error(str(exc))
            info = ContextInfo(n, f"the server's refusal of a prompt of about {need} tokens") if n else info
            row["probe"] = f"a prompt of about {need} tokens was refused as too long for the context"
        except CallFailed as exc:
            row["probe"] = f"no verdict ({str(exc)[:120]})"
    row["context_tokens"] = info.tokens
    row["context_source"] = info.source
    row["prompts"], warning = fit_verdict(info.tokens, cfg.max_output_tokens, need,
                                          refused="refused" in str(row.get("probe", "")))
    if warning:
        row["warning"] = warning
    return row


def fit_verdict(context: int | None, max_output_tokens: int, need: int, refused: bool = False) -> tuple[str, str]:
    """(what happens to ksearch's prompts in this context, a warning or "")."""
    if context is None:
        if refused:
            return "do not fit", f"the server refused ksearch's smallest prompt (about {need} tokens): {BIGGER_CONTEXT}"
        return "unknown: the server does not say its context (set [llm] context_tokens to fit prompts to it)", ""
    window = Window(context, max_output_tokens)
    room = window.prompt_tokens or 0
    if room < need:
        return "do not fit", (
            f"ksearch's prompts will not fit: the smallest needs about {need} tokens plus {window.answer_tokens} "
            f"for the answer, and the model's context is {context} tokens; {BIGGER_CONTEXT}"
        )
    if room < TYPICAL_PROMPT_TOKENS:
        return f"trimmed to fit {room} tokens (history, analysis and spec details first)", ""
    return "fit", ""
