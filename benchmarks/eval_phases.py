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

import json
import sys
import tempfile
from pathlib import Path

from ksearch.bench.phases import run_phases


def _file(arg: str, tmp: Path) -> str:
    if not arg.startswith("family:"):
        return arg
    _, fid, params = arg.split(":", 2)
    from ksearch.policy.templates import all_families

    family = next(f for f in all_families() if f.id == fid)
    path = tmp / f"{fid}.py"
    path.write_text(family.render(json.loads(params)))
    return str(path)


def main() -> None:
    args = sys.argv[1:]
    options = {"--workloads": None, "--repeat": "2", "--out": None}
    for flag in list(options):
        if flag in args:
            i = args.index(flag)
            options[flag] = args[i + 1]
            del args[i:i + 2]
    task, backend, candidates = args[0], args[1], args[2:]
    with tempfile.TemporaryDirectory() as tmp:
        files = [_file(c, Path(tmp)) for c in candidates]
        workloads = options["--workloads"].split(",") if options["--workloads"] else None
        path = run_phases(task, backend, files, workloads, int(options["--repeat"] or 2), options["--out"])
    if path:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
