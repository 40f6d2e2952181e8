"""Metal kernels executed off the Mac.

The CPU engine (`ksearch.metalemu.cpu.run_kernel`) translates an MSL source as `mx.fast.metal_kernel` builds it into
C++ over a runtime that emulates Metal's execution model (threadgroups of fibers, SIMD-groups of 32 lanes,
threadgroup memory, atomics, simdgroup_matrix) and checks what Metal does not: out-of-bounds device accesses,
races and uninitialised reads on threadgroup memory, barriers some threads miss, shuffles from outside the
simdgroup, threadgroup memory past the limit. docs/metal-emulation.md describes the engine and its rules.

Modules: lexer/source (tokens), translate (+ translate_tg, rewrite_expr: MSL -> C++), compile (clang, cache),
launch (ctypes, threads, error decoding), cpu (the entry point); runtime/ holds the C++ headers and the scheduler.
"""
