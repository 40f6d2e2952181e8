"""`ksearch bench mamba`: prefill and decode tok/s of ksearch's Mamba vs mlx-lm's, same random weights
(the suite: ksearch.bench.mamba)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ksearch.cli.out_dir import check_out_dir

DTYPES = ("float16", "bfloat16", "float32")


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("mamba")
    def mamba_cmd(
        model_config: Annotated[str, typer.Option(help="Published size: 130m, 370m, 790m, 1.4b, 2.8b.")] = "370m",
        lengths: Annotated[str, typer.Option(help="Comma-separated prefill lengths.")] = "512,1024,2048,4096",
        decode_tokens: Annotated[int, typer.Option(help="Greedy decode steps per repetition.")] = 64,
        batch: Annotated[int, typer.Option(help="Batch size.")] = 1,
        dtype: Annotated[str, typer.Option(help="float16, bfloat16 or float32.")] = DTYPES[0],
        reps: Annotated[int, typer.Option(help="Timed repetitions (interleaved) per configuration.")] = 3,
        baseline_max_length: Annotated[int, typer.Option(
            help="Longest prefill to run mlx-lm's per-token loop on (it runs ~100 tok/s on an H200).")] = 512,
        no_compare: Annotated[bool, typer.Option("--no-compare", help="Only time ksearch's model.")] = False,
        out: Annotated[Path, typer.Option(help="Directory for the JSON result.")] = Path("benchmarks/results"),
    ) -> None:
        """Prefill and decode tok/s: ksearch.models.mamba vs mlx-lm's Mamba (and mlx-lm patched with our kernels)."""
        from ksearch.bench.mamba import run_and_write
        from ksearch.models import mamba

        if model_config not in mamba.CONFIGS:
            raise typer.BadParameter(f"unknown --model-config {model_config!r}; one of {', '.join(mamba.CONFIGS)}")
        try:
            lens = tuple(int(x) for x in lengths.split(",") if x.strip())
        except ValueError as exc:
            raise typer.BadParameter(f"--lengths must be comma-separated integers, got {lengths!r}") from exc
        for flag, value in (("--reps", reps), ("--decode-tokens", decode_tokens), ("--batch", batch)):
            if value < 1:
                raise typer.BadParameter(f"{value}: give 1 or more", param_hint=flag)
        if baseline_max_length < 0:
            raise typer.BadParameter(f"{baseline_max_length}: give 0 or more", param_hint="--baseline-max-length")
        if dtype not in DTYPES:
            raise typer.BadParameter(f"{dtype!r}: one of {', '.join(DTYPES)}", param_hint="--dtype")
        mamba.fused_from_env()  # KSEARCH_MAMBA_FUSED=maybe: one line now, not after the model is built
        if not lens or min(lens) < 1:
            raise typer.BadParameter(f"--lengths must be positive integers, got {lengths!r}")
        check_out_dir(out)
        from ksearch.kernels.selective_scan import kernel_backend

        try:
            kernel_backend()  # a bad KSEARCH_SCAN_BACKEND as one line here, not from inside the first prefill
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
        if not no_compare:
            from ksearch.errors import IntegrationError
            from ksearch.integrations.mlx_lm import mamba_module

            try:
                mamba_module()
            except IntegrationError as exc:
                raise typer.BadParameter(f"{exc}, or pass --no-compare") from exc
        path = run_and_write(model_config, lens, decode_tokens, batch, dtype, reps, baseline_max_length,
                             not no_compare, out, log=typer.echo)
        typer.echo(f"wrote {path}")
