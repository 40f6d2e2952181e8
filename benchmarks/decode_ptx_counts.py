"""Static instruction counts of the split-K decode kernel, butterfly against reduce-scatter step (DecodeConfig.scatter),
from nvcc's PTX for sm_90a (the whole split kernel: its loop and its merge), with ptxas's register count. Needs nvcc,
no GPU:

    python benchmarks/decode_ptx_counts.py
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

from ksearch.backends.nvcc import PRELUDE, nvcc_path, wrap
from ksearch.kernels.decode import cuda_split_k_text as text

INPUTS = [("q", "T"), ("k", "T"), ("v", "T")]
OUTPUTS = [("part_acc", "float32"), ("part_ml", "float32")]


def counts(source: str, d: int, g: int, unroll: int = 4) -> dict[str, int]:
    nvcc = nvcc_path()
    if nvcc is None:
        raise SystemExit("decode_ptx_counts: nvcc not found (set KSEARCH_NVCC)")
    unit = wrap("k", source, "", INPUTS, OUTPUTS,
                [("T", "float16"), ("D", d), ("G", g), ("NW", 4), ("U", unroll), ("PREFETCH", True)])
    with tempfile.TemporaryDirectory(prefix="ksearch_ptx_") as tmp:
        path = os.path.join(tmp, "k.cu")
        with open(path, "w") as fh:
            fh.write(PRELUDE + text.HEADER + unit)
        base = [nvcc, "-arch=sm_90a", "-std=c++17"]
        subprocess.run([*base, "-ptx", "-o", os.path.join(tmp, "k.ptx"), path], check=True, capture_output=True)
        with open(os.path.join(tmp, "k.ptx")) as fh:
            ptx = fh.read()
        log = subprocess.run([*base, "-cubin", "-Xptxas", "-v", "-o", os.path.join(tmp, "k.cubin"), path],
                             capture_output=True, text=True)
    lines = [ln.strip() for ln in ptx.splitlines()]
    code = [ln for ln in lines if ln and not ln.startswith(("//", ".", "{", "}", "$"))]
    regs = re.search(r"Used (\d+) registers", log.stdout + log.stderr)
    return {"instructions": len(code), "shfl": sum(ln.startswith("shfl.") for ln in code),
            "ex2": sum(ln.startswith("ex2.") for ln in code), "fma": sum(ln.startswith("fma.") for ln in code),
            "registers": int(regs[1]) if regs else -1}


def main() -> None:
    print("D   G  step       instructions  shfl  ex2  fma  registers")
    for d, g in ((128, 4), (128, 8), (64, 4), (64, 8)):
        for name, source in (("butterfly", text.SPLIT_SOURCE), ("scatter", text.SPLIT_SCATTER_SOURCE)):
            c = counts(source, d, g)
            print(f"{d:<3} {g:<2} {name:<10} {c['instructions']:>12} {c['shfl']:>5} {c['ex2']:>4} {c['fma']:>4} "
                  f"{c['registers']:>10}")


if __name__ == "__main__":
    main()
