"""`ksearch report RUN --calls`: the run's LLM transcripts, every call in full, or as JSON.

Each call shows what it cost and how it went (role, model, tokens, latency, retries, USD, its error), then the
prompt exactly as sent (the message roles as `[system]` / `[user]` / `[assistant]` header lines) and the answer
exactly as received. Nothing is cut: a transcript is read to find out why the model did what it did, and the line
that explains it may be anywhere. On a terminal the CLI pages it; piped, it is plain text.

Calls that a kill cut off after they were recorded (the resumed search asked them again) are marked `lost`.

Keys: the search redacts every key it reads before anything is stored. On top of that, the values of the run's key
variable and of every preset's key variable, where this process's environment has them, are redacted here too, so
that a run recorded by an older ksearch shows none either.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from ksearch.search.replay import lost_call_positions
from ksearch.store import CallRow, RunReader
from ksearch.store.redact import SECRETS, Redactor


@dataclass(frozen=True)
class Transcript:
    run_id: str
    calls: list[CallRow]
    lost: set[int]  # positions in `calls`
    redactor: Redactor


def key_variables(config: Any) -> list[str]:
    """The names of the variables that may hold a key of this run: its own, and every preset's."""
    from ksearch.policy.llm.presets import PRESETS

    names = {p.api_key_env for p in PRESETS.values() if p.api_key_env}
    llm = config.get("llm") if isinstance(config, dict) else None
    if isinstance(llm, dict) and isinstance(llm.get("api_key_env"), str) and llm["api_key_env"]:
        names.add(llm["api_key_env"])
    return sorted(names)


def load_transcript(run_dir: Path, environ: Mapping[str, str] | None = None) -> Transcript:
    env = os.environ if environ is None else environ
    with RunReader(run_dir) as reader:
        meta = reader.meta()
        calls = reader.calls(texts=True)
        lost = lost_call_positions(reader)
    redactor = SECRETS.copy()
    for name in key_variables(meta.get("config")):
        redactor.add(env.get(name))
    return Transcript(Path(run_dir).name, calls, lost, redactor)


def call_rows(t: Transcript) -> Iterator[dict[str, Any]]:
    """One dict per call, its texts redacted: index (1-based), figures, error, lost, prompt, response."""
    r = t.redactor.text
    for i, c in enumerate(t.calls):
        yield {"index": i + 1, "id": c.id, "created_at": c.created_at, "round": c.round, "role": c.role,
               "model": c.model, "tokens_in": c.tokens_in, "tokens_out": c.tokens_out, "latency_s": c.latency_s,
               "retries": c.retries, "cost_usd": c.cost_usd, "error": None if c.error is None else r(c.error),
               "lost": i in t.lost, "prompt": r(c.prompt or ""), "response": r(c.response or "")}


def calls_json(t: Transcript) -> str:
    return json.dumps({"run": t.run_id, "calls": list(call_rows(t))}, indent=1)


def _figures(row: dict[str, Any], total: int) -> str:
    parts = [f"call {row['index']}/{total}", f"round {row['round']}", row["role"], row["model"] or "-"]
    if row["tokens_in"] is not None or row["tokens_out"] is not None:
        parts.append(f"{row['tokens_in'] or 0:,} in / {row['tokens_out'] or 0:,} out tokens")
    if row["latency_s"] is not None:
        parts.append(f"{row['latency_s']:.2f} s")
    retries = row["retries"] or 0
    parts.append(f"{retries} {'retry' if retries == 1 else 'retries'}")
    if row["cost_usd"]:
        parts.append(f"${row['cost_usd']:.4f}")
    return " · ".join(parts)


def calls_renderable(t: Transcript) -> RenderableType:
    if not t.calls:
        return Text(f"{t.run_id}: no LLM calls (an offline run, or none made yet)")
    total = len(t.calls)
    parts: list[RenderableType] = [Text(f"{t.run_id}: {total} LLM calls", style="bold")]
    for row in call_rows(t):
        # Plain lines rather than rules: a rule is cut to the terminal's width, and these figures must stay whole.
        parts.append(Text(f"═══ {_figures(row, total)}", style="bold cyan"))
        if row["lost"]:
            parts.append(Text("lost: a kill cut the search off after this call; the resumed search asked again",
                              style="yellow"))
        if row["error"]:
            parts.append(Text(f"error: {row['error']}", style="red"))
        parts.append(Text("─── prompt", style="cyan"))
        parts.append(Text(row["prompt"].rstrip("\n")))
        parts.append(Text("─── response", style="cyan"))
        parts.append(Text(row["response"].rstrip("\n") or "(none)", style="" if row["response"] else "dim"))
    return Group(*parts)
