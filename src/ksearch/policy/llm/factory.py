"""make_policy: an LLMConfig in, a Policy out (live or replaying)."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ksearch.config import LLMConfig, check_llm_settings
from ksearch.errors import ConfigError, LLMConfigError
from ksearch.policy.llm.client import Backoff, ChatClient, Sampling, Transport
from ksearch.policy.llm.keys import register_present, take_key
from ksearch.policy.llm.policy import LLMPolicy
from ksearch.policy.llm.presets import PRESETS, resolve
from ksearch.policy.llm.pricing import Budget, load_prices

#: Base delay (s) of the retry backoff; tests and impatient users shorten it.
BACKOFF_ENV = "KSEARCH_LLM_BACKOFF_S"
#: How long asking the server for its context may take, at most.
DISCOVERY_S = 5.0


def make_policy(
    cfg: LLMConfig,
    replay: Sequence[Mapping[str, Any]] | None = None,
    strict_prompts: bool = False,
    *,
    prices: str | Path | None = None,
    backoff_base_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    environ: Mapping[str, str] | None = None,
    seed: int | None = None,
    discover: bool = True,
    reach: bool = False,
) -> LLMPolicy:
    """A policy for `cfg`. With `replay` (the calls of a recorded run) it never touches the network and needs
    no key; with `strict_prompts` it raises ReplayMismatch at the first prompt that differs from the record.

    With `context_tokens` unset, a live policy asks the server for its context window (`discover`) and writes
    the answer into `cfg.context_tokens`, so that the run's stored settings resume and replay with the same
    fitting.

    With `reach`, a live policy first checks that the endpoint can be reached at all (a new run: a wrong port or
    host, or https:// to a plain-HTTP server, is a mistake in its settings to say at once, not a failure of the
    service to retry for minutes).

    Raises LLMConfigError when the configuration cannot work (unknown preset, unset key variable, bad number).
    """
    env = os.environ if environ is None else environ
    try:
        check_llm_settings(cfg)
    except ConfigError as exc:
        raise LLMConfigError(str(exc)) from None
    endpoint = resolve(cfg, environ, check_key=replay is None)
    # Taken now, before the search starts any worker, in replay too (where it goes unused): from here on the
    # key is in no environment a candidate could read, and redacted wherever it might turn up. Keys of the
    # other presets are not taken, but their values are redacted as well.
    take_key(endpoint.api_key_env, environ)
    register_present(sorted({p.api_key_env for p in PRESETS.values() if p.api_key_env}), environ)
    budget = Budget(prices=load_prices(prices, env), max_usd=cfg.max_usd, max_tokens=cfg.max_tokens_total,
                    warn_unpriced=endpoint.api_key_env is not None)
    transport: Transport
    context = cfg.context_tokens
    if replay is not None:
        from ksearch.policy.llm.replay import ReplayTransport

        transport = ReplayTransport(replay, strict=strict_prompts)
    else:
        base = backoff_base_s if backoff_base_s is not None else _env_float(env, BACKOFF_ENV, 1.0)
        sampling = Sampling(cfg.temperature, cfg.reasoning_effort, cfg.max_output_tokens)
        transport = ChatClient(
            endpoint,
            sampling,
            timeout_s=cfg.request_timeout_s,
            max_retries=cfg.max_retries,
            backoff=Backoff(base_s=base, max_s=max(base, 60.0 if base >= 1 else base * 64)),
            rng=random.Random(seed),
            sleep=sleep,
            environ=environ,
            max_answer_bytes=cfg.max_answer_kb * 1024,
            structured=cfg.structured_output,
        )
        if reach:
            why = transport.unreachable(min(DISCOVERY_S, cfg.request_timeout_s))
            if why is not None:
                raise LLMConfigError(
                    f"cannot reach the LLM endpoint {endpoint.base_url}: {why}; `ksearch llm ping` checks the "
                    "settings"
                )
        if context is None and discover:
            info = transport.discover_context(endpoint.model, timeout_s=min(DISCOVERY_S, cfg.request_timeout_s))
            if info.tokens is not None:
                # Recorded with the run's settings: a resumed or replayed run fits its prompts the same way.
                context = cfg.context_tokens = info.tokens
    return LLMPolicy(transport, budget, endpoint.model, endpoint.coder_model, context_tokens=context,
                     max_output_tokens=cfg.max_output_tokens)


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise LLMConfigError(f"${name} must be a number of seconds, not {raw!r}") from None
    if value < 0:
        raise LLMConfigError(f"${name} must be >= 0")
    return value
