"""Metal kernels executed off the Mac.

The CPU engine (`run_kernel`, from ksearch.metalemu.cpu) translates an MSL source as `mx.fast.metal_kernel` builds it
into C++ over a runtime that emulates Metal's execution model (threadgroups of fibers, SIMD-groups of 32 lanes,
threadgroup memory, atomics, simdgroup_matrix) and checks what Metal does not: out-of-bounds device accesses,
races and uninitialised reads on threadgroup memory, barriers some threads miss, shuffles from outside the
simdgroup, threadgroup memory past the limit. docs/metal-emulation.md describes the engine and its rules.

Modules: lexer/source (tokens), translate (+ translate_tg, rewrite_expr: MSL -> C++), compile (clang, cache),
launch (ctypes, threads, error decoding), cpu (the entry point); runtime/ holds the C++ headers and the scheduler.

The CUDA engine (`cuda_kernel.metal_kernel_via_cuda`, `mx.fast.metal_kernel`'s signature) translates the body to CUDA
by the concept rows of the knowledge base and runs it through `mx.fast.cuda_kernel` on NVIDIA GPUs: cuda_lex,
cuda_structure, cuda_rules, cuda_translate, cuda_kernel, cuda_check, the device library cuda_msl_*.cuh and
cuda_host.h;
docs/metal-emulation-cuda.md describes it.
"""

from __future__ import annotations

from typing import Any


def run_kernel(*args: Any, **kwargs: Any) -> None:
    """ksearch.metalemu.cpu.run_kernel (same arguments), imported on first use so that importing the package stays
    cheap."""
    from ksearch.metalemu.cpu import run_kernel as run

    run(*args, **kwargs)
