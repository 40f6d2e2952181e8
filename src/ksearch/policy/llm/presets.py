"""Where the model lives: presets for hosted OpenAI-compatible endpoints and local servers, and how a config
resolves.

A hosted preset sends a key; a local one sends none. The key is only ever named here (the environment
variable), never read: the client takes it (keys.py) when it is made, so no settings object, state or log line
can carry it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from ksearch.config import LLMConfig
from ksearch.errors import LLMConfigError
from ksearch.policy.llm.context import PROBES
from ksearch.policy.llm.keys import key_problem
from ksearch.policy.llm.schemas import JSON_SCHEMA

#: What a variable name looks like (POSIX).
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Preset:
    name: str
    base_url: str
    api_key_env: str | None  # None: the server wants no key (local servers)
    model: str | None  # default reasoning model; None: ask the server (GET /models) and take the first
    coder_model: str | None = None  # default coding model; None: the reasoning model
    #: OpenAI's reasoning models refuse `max_tokens` and any temperature but 1 once reasoning is on.
    max_tokens_param: str = "max_tokens"
    #: Ask for a JSON object (response_format) on JSON calls; off where the endpoint does not take it.
    json_mode: bool = True
    #: The structured-output dialect (schemas.DIALECTS) for the world-model calls; None: free text.
    structured: str | None = JSON_SCHEMA
    #: Where the server tells its context window (context.PROBES); hosted models have 128k tokens or more.
    context_probes: tuple[str, ...] = ()
    note: str = ""

    @property
    def hosted(self) -> bool:
        return self.api_key_env is not None


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "openai",
            "https://api.openai.com/v1",
            "OPENAI_API_KEY",
            "gpt-5",
            "gpt-5",
            max_tokens_param="max_completion_tokens",
            note="OpenAI API",
        ),
        Preset(
            "gemini",
            "https://generativelanguage.googleapis.com/v1beta/openai/",
            "GEMINI_API_KEY",
            "gemini-2.5-pro",
            "gemini-2.5-pro",
            note="Google Gemini, OpenAI-compatible endpoint",
        ),
        Preset(
            "anthropic",
            "https://api.anthropic.com/v1/",
            "ANTHROPIC_API_KEY",
            "claude-sonnet-4-5",
            "claude-sonnet-4-5",
            json_mode=False,
            structured=None,  # its OpenAI-compatible layer ignores response_format
            note="Anthropic, OpenAI-compatible endpoint",
        ),
        Preset("vllm", "http://localhost:8000/v1", None, None, context_probes=("vllm",),
               note="vLLM `vllm serve MODEL` (no key)"),
        Preset("ollama", "http://localhost:11434/v1", None, None, context_probes=("ollama",), note="Ollama (no key)"),
        Preset("lmstudio", "http://localhost:1234/v1", None, None, note="LM Studio local server (no key)"),
        Preset("llamacpp", "http://localhost:8080/v1", None, None, context_probes=("llamacpp",),
               note="llama.cpp `llama-server` (no key)"),
    )
}


@dataclass(frozen=True)
class Endpoint:
    """A resolved configuration: everything the client needs except the key's value."""

    preset: str
    base_url: str
    api_key_env: str | None
    model: str | None
    coder_model: str | None
    max_tokens_param: str
    json_mode: bool = True
    structured: str | None = JSON_SCHEMA
    context_probes: tuple[str, ...] = ()


def resolve(cfg: LLMConfig, environ: Mapping[str, str] | None = None, check_key: bool = True) -> Endpoint:
    """Apply the preset's defaults to `cfg`; with `check_key` (a live client, not a replay), fail now (not mid-run)
    on a key variable that holds no usable key and on a base URL the HTTP client cannot use."""
    preset = PRESETS.get(cfg.preset)
    if preset is None:
        raise LLMConfigError(
            f"unknown LLM preset {cfg.preset!r}; choose one of {', '.join(PRESETS)} "
            "(or any preset with --base-url URL for another OpenAI-compatible server)"
        )
    base_url = preset.base_url if cfg.base_url is None else _checked_url(cfg.base_url, check_key)
    custom_url = base_url.rstrip("/") != preset.base_url.rstrip("/")
    # A hosted preset's key is never sent to a server of the user's choosing unless they name the variable
    # themselves: `--preset openai --base-url http://my-proxy` must not leak OPENAI_API_KEY to my-proxy.
    key_env = cfg.api_key_env or (None if custom_url else preset.api_key_env)
    if cfg.api_key_env is not None and not _VARIABLE.fullmatch(cfg.api_key_env):
        # Not echoed: a value that is no variable name is most likely the key itself, pasted in the wrong place.
        raise LLMConfigError(
            "api_key_env (--api-key-env) names the environment variable that holds the key (letters, digits "
            "and _, e.g. LLM_API_KEY), never the key itself: export LLM_API_KEY=... and pass --api-key-env "
            "LLM_API_KEY"
        )
    if check_key and key_env is not None:
        problem = key_problem(key_env, environ)
        if problem is not None:
            raise LLMConfigError(_key_message(key_env, problem, preset, named=cfg.api_key_env is not None))
    # Another server: ask it which model it serves (GET /models) rather than guess a hosted model's name.
    model = cfg.model or (None if custom_url else preset.model)
    preset_coder = None if (custom_url or cfg.model) else preset.coder_model
    coder = cfg.coder_model or preset_coder or model
    max_tokens_param = "max_tokens" if custom_url else preset.max_tokens_param
    return Endpoint(
        preset.name,
        base_url,
        key_env,
        model,
        coder,
        max_tokens_param,
        preset.json_mode,
        # Another server: try the common dialect (a refusal falls back to free text) and ask it its context.
        JSON_SCHEMA if custom_url else preset.structured,
        PROBES if custom_url else preset.context_probes,
    )


def _key_message(key_env: str, problem: str, preset: Preset, named: bool) -> str:
    """The one line that refuses the key variable `key_env` for `problem` (keys.key_problem), never its value."""
    if problem.startswith("set"):
        return f"${key_env} is {problem}: set it to the key alone (export {key_env}=...); the value is not shown"
    if problem != "unset":
        return f"${key_env} is {problem}: export {key_env}=... with the key"
    if named:
        return (f"${key_env} (api_key_env, --api-key-env) is unset: export {key_env}=... with the key, or leave "
                "api_key_env out for a server that takes no key")
    return (f"the {preset.name} LLM preset needs an API key in ${key_env}, which is unset: export {key_env}=... "
            "(or pass --api-key-env VAR naming the variable that holds the key); for a local server use --preset "
            "vllm|ollama|lmstudio|llamacpp")


def _checked_url(url: str, check: bool) -> str:
    """`url` without surrounding whitespace; with `check`, refused unless it is an http:// or https:// URL with a
    host and, where it names one, a port number: the HTTP client would otherwise fail every request alike."""
    url = url.strip()
    if not check:
        return url
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme in ("http", "https") and parts.hostname and port_ok:
        return url
    if "://" not in url:
        bare = url.removeprefix("//")
        fix = f"pass http://{bare}{'' if '/' in bare else '/v1'} (or https://...)"
    elif parts.scheme not in ("http", "https"):
        fix = "start it with http:// or https://"
    else:
        fix = "give a host and, after a colon, a port number: http://HOST:PORT/v1"
    raise LLMConfigError(f"base_url (--base-url) {url!r} is not the URL of an OpenAI-compatible endpoint: {fix}")
