"""Every Metal kernel the project ships, translated by the CUDA engine, compiles: with nvcc for sm_90a where nvcc
exists and NVRTC does not (NVRTC itself, where installed, compiles them in test_metalemu_nvrtc.py), and as host C++ against cuda_host.h with clang++/g++ otherwise, so that
checking needs no CUDA toolkit. Kernels: ksearch.kernels, the tasks' Metal starters, the knowledge base's Metal
exemplars and renderings of every Metal template family."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ksearch.backends.nvcc import compile_check, nvcc_path
from ksearch.backends.nvrtc import find_nvrtc
from ksearch.knowledge import load_patterns
from ksearch.knowledge.extract import KernelUse, find_kernels
from ksearch.metalemu.cuda_check import check, host_compiler, wrapped
from ksearch.metalemu.cuda_kernel import Arg, MetalKernelTranslation
from ksearch.policy.templates import all_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "data" / "cuda"))
from exemplar_candidates import candidate  # noqa: E402

# Template values for arguments a static read of the call site cannot resolve (the library's own choices).
INTS = {"N": 16, "CH": 8, "NCH": 32, "MAXD": 2048, "D": 64, "HEAD_DIM": 64, "G": 4, "NW": 4, "BK": 16, "BN": 16,
        "NT": 64, "K": 4, "R": 64, "CPB": 128, "MAX_N": 16, "TPB": 256, "ITEMS": 4, "TILE": 16, "U": 2}
BOOLS = {"HAS_H0", "Y_BLD", "HAS_BIAS", "HAS_STATE", "CAUSAL", "GQA"}


def _sources() -> list[tuple[str, str]]:
    out = [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "src/ksearch/kernels").rglob("metal*.py"))]
    out += [(str(p.relative_to(ROOT)), p.read_text())
            for p in sorted((ROOT / "src/ksearch/tasks/starters").glob("*_metal.py"))]
    for p in load_patterns():
        if "metal" in p["exemplars"] and "cuda" in p["exemplars"]:
            out.append((f"exemplar:{p['id']}", candidate(p["id"], p["exemplars"]["metal"], "metal")))
    for fam in all_families():
        if "mlx-metal" in fam.backends:
            # a rendering with `constants` makes its kernels at run time (no text to read here): the same texts and
            # headers as the library's, which are checked here through its own `constants=`
            params = [p for p in fam.all_params() if fam.valid(p) and not p.get("constants")]
            for i in sorted({0, len(params) - 1}):
                out.append((f"template:{fam.id}:{i}", fam.source(params[i])))
    return out


def _resolve(k: KernelUse, index: int) -> tuple[MetalKernelTranslation, list[Arg], list[str], list[tuple[str, object]]]:
    template: list[tuple[str, object]] = []
    for t in k.template:
        if t.name in BOOLS or t.kind == "bool":
            template.append((t.name, bool(t.value) if isinstance(t.value, bool) else True))
        elif t.kind == "dtype" and t.name == "T" or (t.kind == "dtype" and t.name not in INTS):
            template.append((t.name, t.value if t.value not in (None, "T") else "float16"))
        else:
            template.append((t.name, t.value if isinstance(t.value, int) else INTS.get(t.name, 32)))
    args = [Arg(n, k.input_dtypes.get(n) if k.input_dtypes.get(n) not in (None, "T") else "float16", 2)
            for n in k.input_names]
    outs = [d if d not in (None, "", "T") else "float16" for d in k.output_dtypes] or ["float16"] * len(k.output_names)
    tr = MetalKernelTranslation(f"{k.name}_{index}", k.input_names, k.output_names, k.source or "", k.header)
    return tr, args, outs, template


def _kernels() -> list[tuple[str, KernelUse]]:
    found = []
    for origin, text in _sources():
        for k in find_kernels(text):
            if k.dialect == "metal":
                assert k.source is not None, f"{origin}: {k.name}: {k.unresolved}"
                found.append((origin, k))
    return found


KERNELS = _kernels()


def test_the_sources_are_all_found() -> None:
    origins = {o.split(":")[0] for o, _ in KERNELS}
    assert {"exemplar", "template"} <= origins
    names = {k.name for _, k in KERNELS}
    for expected in ("ks_attention_simdgroup_mma", "ks_attention_fragments", "ks_attention_rows", "ks_decode_split", "ks_decode_merge",
                     "ksearch_selective_scan_chunked", "ksearch_causal_conv_silu", "ksearch_mamba_step",
                     "softmax_naive", "rmsnorm_naive", "attention_naive", "gqa_decode_naive", "selective_scan_naive",
                     "ssu_naive_conv", "ssu_naive_ssm"):
        assert expected in names, expected


def _unit(kernels: list[tuple[str, KernelUse]]) -> tuple[list[str], dict[str, str]]:
    units, owner = [], {}
    for i, (origin, k) in enumerate(kernels):
        tr, args, outs, template = _resolve(k, i)
        src = tr.cuda_source(args, outs, template)
        units.append(wrapped(src, [a.dtype for a in args], outs))
        owner[f"{tr.name}.metal"] = owner[f"{tr.name}.header.metal"] = f"{origin}:{k.name}"
    return units, owner


@pytest.mark.skipif(nvcc_path() is None or find_nvrtc() is not None,
                    reason="nvcc not found, or NVRTC found: test_metalemu_nvrtc.py compiles them as MLX does")
def test_every_metal_kernel_compiles_with_nvcc() -> None:
    units, owner = _unit(KERNELS)
    ok, log = compile_check(units, timeout=900)
    errors = [line for line in log.splitlines() if "error" in line]
    assert ok, [(owner.get(e.split("(")[0].strip('"'), "?"), e) for e in errors][:20]


@pytest.mark.skipif(host_compiler() is None, reason="LOUD SKIP: no clang++/g++ for the nvcc-free check")
def test_every_metal_kernel_passes_the_nvcc_free_check() -> None:
    import subprocess
    import tempfile

    from ksearch.metalemu.cuda_check import HOST_HEADER

    units, owner = _unit(KERNELS)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "all.cpp"
        path.write_text("\n".join(units))
        proc = subprocess.run([str(host_compiler()), "-std=c++20", "-fsyntax-only", "-w", "-include",
                               str(HOST_HEADER), str(path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.parametrize("use_nvcc", [True, False], ids=["nvcc", "host"])
def test_a_compile_error_points_at_the_metal_line(use_nvcc: bool) -> None:
    if use_nvcc and nvcc_path() is None or not use_nvcc and host_compiler() is None:
        pytest.skip("compiler missing")
    body = "float a = x[0];\n\nfloat b = a + undefined_name;\nout[0] = b;\n"
    tr = MetalKernelTranslation("broken", ["x"], ["out"], body)
    src = tr.cuda_source([Arg("x", "float32", 1)], ["float32"])
    diags = check(src, ["float32"], ["float32"], use_nvcc=use_nvcc)
    assert diags and diags[0].file == "broken.metal" and diags[0].line == 3 and "undefined_name" in diags[0].message
    good = MetalKernelTranslation("good", ["x"], ["out"], "out[0] = simd_sum(x[0]);")
    assert check(good.cuda_source([Arg("x", "float16", 1)], ["float16"]), ["float16"], ["float16"],
                 use_nvcc=use_nvcc) == []
