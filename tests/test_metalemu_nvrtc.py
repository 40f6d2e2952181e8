"""Every translation of the CUDA engine compiles with NVRTC itself, the compiler MLX runs at a kernel's first call, on
the CPU (no GPU: NVRTC compiles to PTX anywhere). nvcc and the host compilers accept gcc builtins that NVRTC refuses
(`__builtin_memcpy`, `__builtin_huge_valf`, `__builtin_nanf` failed every kernel on the GPU while both other checks
passed), so this is the check that stands for the GPU's compile: every construct case of the engine's tests and every
Metal kernel the project ships (ksearch.kernels, starters, exemplars, template renderings)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ksearch.backends.nvrtc import find_nvrtc, nvrtc_check
from ksearch.metalemu.cuda_check import check, wrapped
from ksearch.metalemu.cuda_kernel import Arg, MetalKernelTranslation

sys.path.insert(0, str(Path(__file__).parent))
from metalemu_cuda_cases import CASES  # noqa: E402
from test_metalemu_cuda_compile import KERNELS, _unit  # noqa: E402

pytestmark = pytest.mark.skipif(find_nvrtc() is None, reason="LOUD SKIP: NVRTC not installed (the dev extra's "
                                "nvidia-cuda-nvrtc): the CUDA engine's text is not compiled as MLX compiles it")


def _case_unit(case: object) -> str:
    from metalemu_cuda_host import _dtype_name

    args = []
    for name, x in zip(case.input_names, case.inputs(), strict=True):  # type: ignore[attr-defined]
        dtype, a = (x[0], np.asarray(x[1])) if isinstance(x, tuple) else (_dtype_name(np.asarray(x)), np.asarray(x))
        args.append(Arg(name, dtype, a.ndim))
    tr = MetalKernelTranslation(case.id, case.input_names, case.output_names, case.source,  # type: ignore[attr-defined]
                                case.header, case.atomic_outputs)  # type: ignore[attr-defined]
    src = tr.cuda_source(args, list(case.output_dtypes), list(case.template))  # type: ignore[attr-defined]
    return wrapped(src, [a.dtype for a in args], list(case.output_dtypes))  # type: ignore[attr-defined]


def test_every_construct_case_compiles_with_nvrtc() -> None:
    ok, log = nvrtc_check([_case_unit(case) for case in CASES])  # one program; diagnostics name <case>.metal
    assert ok, [line for line in log.splitlines() if "error" in line][:20]


def test_every_metal_kernel_compiles_with_nvrtc() -> None:
    units, owner = _unit(KERNELS)
    ok, log = nvrtc_check(units)
    errors = [line for line in log.splitlines() if "error" in line]
    assert ok, [(owner.get(e.split("(")[0].strip('"'), "?"), e) for e in errors][:20]


def test_nvrtc_refuses_what_nvcc_accepts_and_points_at_the_metal_line() -> None:
    ok, log = nvrtc_check(["__global__ void k(float* x) { x[0] = __builtin_huge_valf(); }"])
    assert not ok and "__builtin_huge_valf" in log
    body = "float a = x[0];\n\nfloat b = a + undefined_name;\nout[0] = b;\n"
    tr = MetalKernelTranslation("broken", ["x"], ["out"], body)
    diags = check(tr.cuda_source([Arg("x", "float32", 1)], ["float32"]), ["float32"], ["float32"], use_nvrtc=True)
    assert diags and diags[0].file == "broken.metal" and diags[0].line == 3 and "undefined_name" in diags[0].message
    good = MetalKernelTranslation("good", ["x"], ["out"], "out[0] = isnan(x[0] + NAN) ? INFINITY : simd_sum(x[0]);")
    assert check(good.cuda_source([Arg("x", "float16", 1)], ["float16"]), ["float16"], ["float16"],
                 use_nvrtc=True) == []
