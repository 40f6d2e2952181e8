"""`ksearch spec`, `ksearch port`, `ksearch lint`: the knowledge layer on the command line."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from ksearch.cli.console import fail
from ksearch.cli.out_dir import check_out_file, writing
from ksearch.files import read_text

BACKEND_HELP = ("mlx-cuda, mlx-metal, mlx-cpu or mlx-metal-emu (need not be present here); default: the best one "
                "here.")


def _check_backend(backend: str | None) -> str:
    from ksearch.knowledge.lint import BACKENDS

    if backend is None:
        # The best backend on this machine; the knowledge layer works without one, so fall back to MLX-CUDA.
        try:
            from ksearch.backends import best_backend

            return best_backend().name
        except Exception:  # no MLX here: documentation and linting still work
            return "mlx-cuda"
    if backend not in BACKENDS:
        fail(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return backend


def spec_cmd(
    task: Annotated[str, typer.Argument(help="Built-in task name or a task file (.py exporting TASK).")],
    backend: Annotated[str | None, typer.Option(help=BACKEND_HELP)] = None,
    from_cuda: Annotated[Path | None, typer.Option("--from-cuda", help="Add the port context of a CUDA file (.cu, "
                                                   ".cuh, .cuda).")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the spec here instead of stdout.")] = None,
) -> None:
    """Print the spec a proposer receives: task contract, dialect API, knowledge, hardware, pitfalls."""
    from ksearch.knowledge.spec import render_spec
    from ksearch.tasks import get_task

    backend = _check_backend(backend)
    t = get_task(task)
    port = None
    if from_cuda is not None:
        from ksearch.knowledge.analyzer import analyze_cuda, read_cuda

        port = analyze_cuda(read_cuda(from_cuda, "--from-cuda file"), backend)
        port["file"] = str(from_cuda)
    if out is not None:
        check_out_file(out, "--out", "spec.md")
    text = render_spec(t, backend, port)
    if out is not None:
        with writing(out, "--out"):
            out.write_text(text)
        print(f"wrote {out} ({len(text.splitlines())} lines)")
    else:
        sys.stdout.write(text)


def port_cmd(
    cuda_file: Annotated[Path, typer.Argument(help="A CUDA source file (.cu, .cuh, .cuda).")],
    backend: Annotated[str | None, typer.Option(help=BACKEND_HELP)] = None,
    out: Annotated[Path | None, typer.Option(help="Write the port context JSON here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the port context as JSON.")] = False,
) -> None:
    """Analyse a CUDA kernel: primitives found, how they carry over, constructs without an equivalent."""
    from ksearch.knowledge.analyzer import analyze_cuda, read_cuda

    backend = _check_backend(backend)
    source = read_cuda(cuda_file, "CUDA file")
    if out is not None:
        check_out_file(out, "--out", "port.json")
    ctx = analyze_cuda(source, backend)
    ctx["file"] = str(cuda_file)
    if out is not None:
        with writing(out, "--out"):
            out.write_text(json.dumps(ctx, indent=2) + "\n")
    if as_json:
        sys.stdout.write(json.dumps(ctx, indent=2) + "\n")
        return
    print(ctx["summary"])
    for f in ctx["findings"]:
        print(f"  line {f['line']:>4}  {f['title']}: {f['target']}")
    for w in ctx["warnings"]:
        print(f"  line {w['line']:>4}  WARNING {w['message']}")
    if out is not None:
        print(f"wrote {out}: pass it to `ksearch run TASK --from-cuda {shlex.quote(str(cuda_file))}`")


def lint_cmd(
    candidate: Annotated[Path, typer.Argument(help="Candidate source file defining run(**inputs).")],
    backend: Annotated[str | None, typer.Option(help=BACKEND_HELP)] = None,
    task: Annotated[str | None, typer.Option(help="Task (built-in or file): checks its forbidden APIs, dtypes and "
                                             "run()'s parameters.")] = None,
    deep: Annotated[bool, typer.Option("--deep/--no-deep", help="Also compile: clang (Metal) / nvcc (CUDA).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print diagnostics as JSON.")] = False,
) -> None:
    """Lint a candidate for its dialect; exit 1 when errors are found."""
    from ksearch.knowledge.lint import lint_source
    from ksearch.tasks import get_task

    backend = _check_backend(backend)
    source = read_text(candidate, "candidate file")
    t = get_task(task) if task else None
    diags = lint_source(source, backend, t, deep=deep)
    errors = [d for d in diags if d.severity == "error"]
    if as_json:
        sys.stdout.write(json.dumps([d.to_json() for d in diags], indent=2) + "\n")
    else:
        for d in diags:
            print(f"{candidate}: {d}")
        print(f"{len(errors)} error(s), {len(diags) - len(errors)} warning(s)")
    raise typer.Exit(1 if errors else 0)


def register(app: typer.Typer) -> None:
    app.command("spec")(spec_cmd)
    app.command("port")(port_cmd)
    app.command("lint")(lint_cmd)
