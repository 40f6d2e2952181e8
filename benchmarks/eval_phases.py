"""Where harness evaluations spend their time: seconds per phase (worker start, references, trials, the first call with
its compiles, timing, judging the checked timed calls, baselines), for one or more candidates judged in turn by one
Evaluator, as a search judges them (the baseline is timed once, at the first evaluation; the reference worker and
the references of the trial seeds are kept). The suite is ksearch.bench.phases (`ksearch bench eval-phases`).

    python benchmarks/eval_phases.py TASK BACKEND [CANDIDATE.py|family:ID:PARAMS_JSON ...] [--workloads A,B]
                                     [--repeat N] [--out DIR]

No candidate: the task's starter. A `family:` argument renders a template family with the given parameters, e.g.
`family:attention.cuda.flash_wgmma:{"wg":3,"bn":64,"producer":true}`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from ksearch.bench.phases import run_phases


def _file(arg: str, tmp: Path) -> str:
    if not arg.startswith("family:"):
        if not Path(arg).is_file():
            raise SystemExit(f"eval_phases: no candidate file {arg}: give a .py file or family:ID:PARAMS_JSON")
        return arg
    try:
        _, fid, params = arg.split(":", 2)
        values = json.loads(params)
    except ValueError:
        raise SystemExit(f"eval_phases: {arg!r} is not family:ID:PARAMS_JSON") from None
    from ksearch.policy.templates import all_families

    family = next((f for f in all_families() if f.id == fid), None)
    if family is None:
        known = ", ".join(sorted(f.id for f in all_families()))
        raise SystemExit(f"eval_phases: no template family {fid}; known: {known}")
    path = tmp / f"{fid}.py"
    path.write_text(family.render(values))
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task")
    ap.add_argument("backend")
    ap.add_argument("candidates", nargs="*", help="CANDIDATE.py or family:ID:PARAMS_JSON (none: the starter)")
    ap.add_argument("--workloads", default=None, help="comma-separated workload names")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = [_file(c, Path(tmp)) for c in args.candidates]
        workloads = args.workloads.split(",") if args.workloads else None
        path = run_phases(args.task, args.backend, files, workloads, args.repeat, args.out)
    if path:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
