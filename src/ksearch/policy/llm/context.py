"""The model's context window: asked of the endpoint where it tells (llama.cpp, vLLM, Ollama), and recognised in
a server's refusal of a prompt that does not fit.

Discovery is best effort and bounded: a few small GETs (one POST for Ollama) with a total deadline; whatever
fails, the answer is "unknown" and prompts go out whole. It asks only the server the run talks to, with the key
the run uses.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from ksearch.policy.llm.deadline import DeadlineExceeded, run_with_deadline

log = logging.getLogger("ksearch.llm")

#: What a discovery probe reads at most (a /props page carries the chat template: tens of KB).
PROBE_MAX_BYTES = 1 << 20
#: The servers whose answers say the context: llama.cpp's llama-server, vLLM, Ollama.
PROBES = ("llamacpp", "vllm", "ollama")

#: How to give a server a bigger context, for the messages that ask for one.
BIGGER_CONTEXT = (
    "start the server with a bigger context (llama.cpp: -c 8192; llama-cpp-python: --n_ctx 8192; "
    "vLLM: --max-model-len 8192; Ollama: OLLAMA_CONTEXT_LENGTH=8192)"
)

_CONTEXT_ERROR = re.compile(
    r"context[ _-]?(length|size|window)|maximum context|context_length_exceeded|prompt is too long|"
    r"maximum number of tokens|input token count|too many (input )?tokens",
    re.IGNORECASE,
)
_CONTEXT_NUMBER = (
    re.compile(r"the server's context: (\d+) tokens"),  # our own message, read back on replay
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),  # OpenAI, vLLM, llama-cpp-python
    re.compile(r"context window of (\d+)", re.IGNORECASE),
    re.compile(r"\"n_ctx\"\s*:\s*(\d+)"),  # llama.cpp's exceed_context_size_error body
    re.compile(r"maximum number of tokens allowed \((\d+)\)", re.IGNORECASE),  # Gemini
    re.compile(r"tokens > (\d+) maximum", re.IGNORECASE),  # Anthropic
    re.compile(r"context length of only (\d+)", re.IGNORECASE),  # LM Studio
)


@dataclass(frozen=True)
class ContextInfo:
    tokens: int | None
    source: str  # where the number comes from, for `ksearch llm ping` and the log


def is_context_error(text: str) -> bool:
    return _CONTEXT_ERROR.search(text) is not None


def context_from_error(text: str) -> int | None:
    """The context size a refusal names, if it names one."""
    for pattern in _CONTEXT_NUMBER:
        m = pattern.search(text)
        if m is not None:
            n = int(m.group(1))
            if 0 < n < 100_000_000:
                return n
    return None


def server_root(base_url: str) -> str:
    """http://host:port for http://host:port/v1 (llama.cpp's /props and Ollama's /api live at the root)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def discover_context(
    base_url: str,
    model: str | None,
    *,
    key: str | None = None,
    probes: tuple[str, ...] = PROBES,
    timeout_s: float = 5.0,
) -> ContextInfo:
    """The context window the server runs `model` with, or ContextInfo(None, why not)."""
    deadline = time.monotonic() + timeout_s
    headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    root = server_root(base_url)

    def get(url: str, body: dict[str, Any] | None = None) -> Any:
        left = deadline - time.monotonic()
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, headers={**headers, "Content-Type": "application/json"})

        def fetch(seconds: float, cancelled: threading.Event) -> Any:
            with urllib.request.urlopen(req, timeout=seconds) as resp:  # noqa: S310 (the configured server)
                raw = resp.read(PROBE_MAX_BYTES + 1)
            if len(raw) > PROBE_MAX_BYTES:
                return None
            return json.loads(raw)

        try:
            return run_with_deadline(fetch, left, "ksearch-llm-probe")
        except (DeadlineExceeded, Exception):  # best effort: whatever goes wrong, the server did not say
            return None

    for probe in probes:
        if time.monotonic() >= deadline:
            break
        found: ContextInfo | None = None
        if probe == "llamacpp":
            found = _llamacpp(get(f"{root}/props"))
        elif probe == "vllm":
            found = _vllm(get(f"{base_url.rstrip('/')}/models"), model)
        elif probe == "ollama":
            found = _ollama(get, root, model)
        if found is not None:
            log.info("the model's context: %d tokens (%s)", found.tokens, found.source)
            return found
    return ContextInfo(None, "the server does not say")


def _positive(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    n = int(value)
    return n if 0 < n < 100_000_000 else None


def _llamacpp(props: Any) -> ContextInfo | None:
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    # The per-slot context: what one request may use (the total divided among --parallel slots).
    n = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    n = n or _positive(props.get("n_ctx"))
    return ContextInfo(n, "llama.cpp /props") if n else None


def _vllm(listing: Any, model: str | None) -> ContextInfo | None:
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list):
        return None
    entries = [e for e in entries if isinstance(e, dict)]
    chosen = [e for e in entries if e.get("id") == model] or entries[:1]
    n = _positive(chosen[0].get("max_model_len")) if chosen else None
    return ContextInfo(n, "vLLM /v1/models max_model_len") if n else None


def _ollama(get: Any, root: str, model: str | None) -> ContextInfo | None:
    # A loaded model's context is what Ollama actually runs with (it silently cuts longer prompts); the model's
    # own metadata is only its trained length.
    running = get(f"{root}/api/ps")
    models = running.get("models") if isinstance(running, dict) else None
    if isinstance(models, list):
        loaded = [m for m in models if isinstance(m, dict)]
        chosen = [m for m in loaded if model in (m.get("name"), m.get("model"))] or (loaded[:1] if not model else [])
        n = _positive(chosen[0].get("context_length")) if chosen else None
        if n:
            return ContextInfo(n, "Ollama /api/ps")
    if not model:
        return None
    shown = get(f"{root}/api/show", {"model": model})
    if not isinstance(shown, dict):
        return None
    m = re.search(r"^\s*num_ctx\s+(\d+)", str(shown.get("parameters") or ""), re.MULTILINE)
    if m:
        return ContextInfo(int(m.group(1)), "Ollama /api/show num_ctx")
    info = shown.get("model_info")
    if isinstance(info, dict):
        for k, v in info.items():
            if str(k).endswith(".context_length") and _positive(v):
                return ContextInfo(
                    _positive(v), "Ollama /api/show model_info (the trained length; Ollama may run less: "
                    "set OLLAMA_CONTEXT_LENGTH)"
                )
    return None
