"""What ptxas made of the wgmma prefill kernels: each configuration compiled for sm_90a with nvcc as MLX would wrap it,
disassembled (cuobjdump -sass), and its main loop found (the first innermost loop that issues HGMMA): instructions,
HGMMAs, vector-to-uniform moves (R2UR), convergence barriers and local-memory loads and stores in it, the spill
bytes ptxas reports, and its first step's softmax path (instructions from the wait on S to the first exponential and
to the row sums' product, the shuffles between); with
--against, whether each configuration's main loop is the same instruction for instruction as the other's (branch
targets aside). No GPU needed.

    python benchmarks/prefill_sass.py CONFIG... [--against CONFIG] [--shapes 64,128c] [--dtype float16]
                                      [--json OUT.json]

--shapes: head dims to compile at, a trailing c for the causal mask (default 128).

Needs nvcc and cuobjdump with nvdisasm (`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`, or on PATH, or
KSEARCH_CUOBJDUMP / NVDISASM_PATH).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter
from typing import Any

Instr = tuple[int, str]  # (address, instruction text without its encoding)


def tool(name: str) -> str | None:
    """A CUDA binary tool: KSEARCH_<NAME>, PATH, or the pip package nvidia-cuda-<name>'s copy."""
    found = os.environ.get(f"KSEARCH_{name.upper()}") or shutil.which(name)
    if name == "nvdisasm" and not found and os.environ.get("NVDISASM_PATH"):  # cuobjdump's own setting
        found = shutil.which(name, path=os.environ["NVDISASM_PATH"])
    if found:
        return found
    hits = glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "cu*", "bin", name))
    return hits[0] if hits else None


def parse_sass(text: str) -> list[Instr]:
    """cuobjdump -sass's instruction lines as (address, instruction)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            out.append((int(m[1], 16), m[2].strip()))
    return out


def loops(ins: list[Instr]) -> list[tuple[int, int]]:
    """(first, last) instruction indices of every backward branch's loop."""
    where = {a: i for i, (a, _) in enumerate(ins)}
    found = []
    for i, (addr, text) in enumerate(ins):
        target = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if target and int(target[1], 16) < addr and int(target[1], 16) in where:
            found.append((where[int(target[1], 16)], i))
    return found


def main_loop(ins: list[Instr]) -> list[str] | None:
    """The first innermost loop that issues HGMMA (no other such loop inside it), as instruction texts."""
    def hgmma(span: tuple[int, int]) -> bool:
        return any("HGMMA" in ins[k][1] for k in range(span[0], span[1] + 1))

    with_mma = [s for s in loops(ins) if hgmma(s)]
    inner = [s for s in with_mma if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in with_mma)]
    if not inner:
        return None
    first, last = min(inner)
    return [ins[k][1] for k in range(first, last + 1)]


def opcode(text: str) -> str:
    parts = text.split()
    return parts[1] if parts[0].startswith("@") else parts[0]


def summary(loop: list[str] | None, spill: int | None) -> dict[str, Any]:
    if loop is None:
        return {"main_loop": None, "spill_bytes": spill}
    ops = Counter(opcode(x) for x in loop)
    return {"main_loop": len(loop), "hgmma": sum(n for k, n in ops.items() if k.startswith("HGMMA")),
            "r2ur": ops["R2UR"], "bssy": ops["BSSY"],
            "local": sum(n for k, n in ops.items() if k.startswith(("LDL", "STL"))), "spill_bytes": spill}


def softmax_path(loop: list[str] | None) -> dict[str, Any]:
    """The main loop's first step from the wait on its S product (`WARPGROUP.DEPBAR.LE gsb0, 0x1`: every product
    but the P V just issued has completed) to the row sums' product (the first HGMMA after it, m64n8k16): instructions
    to the first exponential, to that product, and the shuffles among them. What a warpgroup issues between its S
    product and its next product, in the order ptxas placed it (stalls not counted)."""
    if loop is None:
        return {}
    wait = next((i for i, x in enumerate(loop) if "DEPBAR.LE gsb0, 0x1" in x), None)
    if wait is None:
        return {}
    sums = next((i for i in range(wait, len(loop)) if opcode(loop[i]).startswith("HGMMA")), None)
    exps = [i for i in range(wait, sums or wait) if opcode(loop[i]) == "MUFU.EX2"]
    if sums is None or not exps:
        return {}
    return {"s_wait_to_first_exp": exps[0] - wait, "s_wait_to_sums": sums - wait,
            "shuffles_between": sum(opcode(loop[i]).startswith("SHFL") for i in range(wait, sums))}


def same_code(a: list[str], b: list[str]) -> bool:
    """The same instructions in the same order, branch targets aside."""
    def norm(x: str) -> str:
        return re.sub(r"0x[0-9a-f]+", "ADDR", x)

    return [norm(x) for x in a] == [norm(x) for x in b]


def same_but_registers(a: list[str], b: list[str]) -> bool:
    """The same instructions in the same order, register numbers (vector, uniform, predicate) and branch targets
    aside: what ptxas's allocation alone moves between two compiles of the same code."""
    def norm(x: str) -> str:
        return re.sub(r"\bU?[PR]\d+\b", "REG", re.sub(r"0x[0-9a-f]+", "ADDR", x))

    return [norm(x) for x in a] == [norm(x) for x in b]


def compile_sass(name: str, d: int, causal: bool, dtype: str, cuobjdump: str) -> tuple[list[Instr], int | None]:
    from ksearch.backends.nvcc import PRELUDE, nvcc_path, wrap
    from ksearch.kernels import tensor_map
    from ksearch.kernels.attention import wgmma_ws, wgmma_ws_grid
    from ksearch.kernels.cuda_headers import WGMMA_HEADER

    cfg = wgmma_ws.parse_config(name)
    ins_, outs = wgmma_ws_grid.kernel_io(cfg)
    header = WGMMA_HEADER + (tensor_map.TMA_HEADER if cfg.tma else wgmma_ws.BULK_HEADER)
    unit = wrap("k0", wgmma_ws.source_text(cfg), wgmma_ws.launch_bounds(cfg.threads(), cfg.blocks), ins_, outs,
                [("T", dtype), ("D", d), ("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", causal), *wgmma_ws.stage_args(cfg)])
    nvcc = nvcc_path()
    assert nvcc is not None
    with tempfile.TemporaryDirectory(prefix="ksearch_sass_") as tmp:
        src, cubin = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as fh:
            fh.write(PRELUDE + header + unit)
        built = subprocess.run([nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-cubin", "-Xptxas", "-v",
                                "-o", cubin, src], capture_output=True, text=True, timeout=300)
        if built.returncode:
            raise SystemExit(f"prefill_sass: nvcc failed on {name}: {built.stderr.strip().splitlines()[-1]}")
        spill = re.search(r"(\d+) bytes spill stores", built.stdout + built.stderr)
        env = dict(os.environ)
        env.setdefault("NVDISASM_PATH", os.path.dirname(tool("nvdisasm") or ""))
        dis = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, timeout=300, env=env)
    if dis.returncode:
        raise SystemExit(f"prefill_sass: cuobjdump failed: {dis.stderr.strip()[:200]} (is nvdisasm installed?)")
    return parse_sass(dis.stdout), int(spill[1]) if spill else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--against")
    ap.add_argument("--shapes", default="128")
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--json")
    args = ap.parse_args()
    shapes = []
    for part in args.shapes.split(","):
        m = re.fullmatch(r"(64|128)(c?)", part.strip())
        if not m:
            raise SystemExit(f"prefill_sass: --shapes takes 64 or 128, each with a trailing c for causal (got {part!r})")
        shapes.append((int(m[1]), bool(m[2])))
    from ksearch.backends.nvcc import nvcc_path
    from ksearch.kernels.attention.wgmma_ws import WsConfig, parse_config

    cuobjdump = tool("cuobjdump")
    for name in [*args.configs, *([args.against] if args.against else [])]:
        try:
            cfg = parse_config(name)
        except ValueError as exc:
            raise SystemExit(f"prefill_sass: {exc}") from None
        if not isinstance(cfg, WsConfig) or not cfg.pwarps:
            raise SystemExit(f"prefill_sass: {name} is not a producer-warpgroup configuration (wsW_..._pP)")
    if nvcc_path() is None or cuobjdump is None or tool("nvdisasm") is None:
        raise SystemExit("prefill_sass: needs nvcc, cuobjdump and nvdisasm: pip install nvidia-cuda-cuobjdump "
                         "nvidia-cuda-nvdisasm (or set KSEARCH_NVCC / KSEARCH_CUOBJDUMP / NVDISASM_PATH)")
    rows = []
    for d, causal in shapes:
        ref = main_loop(compile_sass(args.against, d, causal, args.dtype, cuobjdump)[0]) if args.against else None
        for name in args.configs:
            ins, spill = compile_sass(name, d, causal, args.dtype, cuobjdump)
            loop = main_loop(ins)
            row = {"config": name, "D": d, "causal": causal, "dtype": args.dtype, "instructions": len(ins),
                   **summary(loop, spill), **softmax_path(loop)}
            if ref is not None and loop is not None:
                row["main_loop_same_as_against"] = same_code(loop, ref)
                row["main_loop_same_but_registers"] = same_but_registers(loop, ref)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        nvcc_version = subprocess.run([nvcc_path() or "nvcc", "--version"], capture_output=True, text=True).stdout
        with open(args.json, "w") as fh:
            json.dump({"schema": "ksearch-sass/1", "against": args.against, "nvcc": nvcc_version.strip().splitlines()[-1],
                       "python": sys.version.split()[0], "rows": rows}, fh, indent=2)
            fh.write("\n")


if __name__ == "__main__":
    main()
