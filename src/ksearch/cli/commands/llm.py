"""`ksearch llm presets | prices | ping`: see and check the LLM settings before spending a run on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ksearch.cli.console import console, err, fail
from ksearch.report.tables import fitted_table

llm_app = typer.Typer(no_args_is_help=True, rich_markup_mode="markdown",
                      help="LLM endpoints: presets, prices, a connectivity check.")


@llm_app.command("presets")
def presets_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON array: one object per "
                                                      "preset.")] = False) -> None:
    """The endpoint presets: base URL, key variable (the NAME; keys are never shown), default models."""
    from ksearch.policy.llm import PRESETS

    rows = [{"preset": p.name, "base_url": p.base_url, "api_key_env": p.api_key_env, "model": p.model,
             "coder_model": p.coder_model or p.model, "note": p.note} for p in PRESETS.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    cells = [tuple(escape(str(c)) for c in (r["preset"], r["base_url"], r["api_key_env"] or "(no key)",
                                            r["model"] or "(asks the server)", r["note"])) for r in rows]
    console.print(fitted_table(console, "LLM presets (--preset NAME; --base-url/--model/--api-key-env override)",
                               ("preset", "base_url", "api_key_env", "model", "note"), cells))


@llm_app.command("prices")
def prices_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object: each model's "
                                                     "input and output price.")] = False) -> None:
    """The price table in use (built-in, overlaid with $KSEARCH_LLM_PRICES): USD per million tokens."""
    from ksearch.policy.llm.pricing import load_prices

    table = load_prices()
    if as_json:
        print(json.dumps({m: {"input": i, "output": o} for m, (i, o) in sorted(table.items())}, indent=2))
        return
    t = Table(title="USD per 1M tokens (models not listed are counted as $0)")
    t.add_column("model")
    t.add_column("input", justify="right")
    t.add_column("output", justify="right")
    for m, (i, o) in sorted(table.items()):
        t.add_row(m, f"{i:g}", f"{o:g}")
    console.print(t)


@llm_app.command("ping")
def ping_cmd(
    preset: Annotated[str | None, typer.Option(help="LLM preset.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name.")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint.")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="NAME of the env variable holding the key.")] = None,
    timeout: Annotated[float, typer.Option(help="Deadline for the whole check (s), connect to last byte.")] = 60.0,
    context_tokens: Annotated[int | None, typer.Option(help="The model's context, if the server does not say.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")] = False,
    config: Annotated[Path | None, typer.Option(help="A run configuration (TOML) whose [llm] settings to check.")] = None,
) -> None:
    """Send one tiny request with these settings: model served, latency, tokens, cost, the model's context and
    whether ksearch's prompts fit it."""
    from ksearch.config import load_config
    from ksearch.errors import CallFailed
    from ksearch.policy.llm.ping import ping

    flags = {"preset": preset, "model": model, "base_url": base_url, "api_key_env": api_key_env,
             "context_tokens": context_tokens}
    # A ConfigError or LLMConfigError is a UsageError: one line, exit 2.
    cfg = load_config(config, {"llm": {k: v for k, v in flags.items() if v is not None}}).llm
    try:
        row = ping(cfg, timeout)
    except CallFailed as exc:
        fail(f"{base_url or cfg.base_url or cfg.preset}: {exc}")
    if as_json:
        print(json.dumps(row))
    else:
        for k, v in row.items():
            if k != "warning":
                console.print(f"{k:>14}: {v}", highlight=False, markup=False)
    if row.get("warning"):
        err.print(f"[yellow]warning:[/yellow] {escape(row['warning'])}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(llm_app, name="llm")
