"""Planted faults in Metal kernels, each caught by the CPU engine with its status, kind and MSL line: a missing
barrier between threadgroup-memory writes and reads, a write one element past a buffer, a simd_shuffle from a lane
outside the simdgroup, a barrier inside a branch some threads skip (or after some threads returned), an
uninitialised threadgroup read, threadgroup memory past 32 KB, unsupported constructs, a wrong buffer type. The
runtime faults share one source (one compile)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from metalemu_source import mlx_source

from ksearch.errors import MetalEmuError
from ksearch.knowledge.metal_check import clang_path

pytestmark = pytest.mark.skipif(clang_path() is None, reason="the Metal emulation needs clang++")

MISSING_BARRIER = """
    uint t = thread_position_in_threadgroup.x;
    threadgroup float buf[64];
    buf[t] = x[t];
    out[t] = buf[63 - t];
"""
WRITE_PAST = """
    uint i = thread_position_in_grid.x;
    out[i + 1] = x[i];
"""
SHUFFLE_OUTSIDE = """
    uint i = thread_position_in_grid.x, lane = thread_index_in_simdgroup;
    out[i] = simd_shuffle(x[i], lane + 16);
"""
BARRIER_IN_BRANCH = """
    uint t = thread_position_in_threadgroup.x;
    threadgroup float buf[64];
    buf[t] = x[t];
    if (t < 32) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[t] = buf[63 - t];
"""
RETURN_BEFORE_BARRIER = """
    uint t = thread_position_in_threadgroup.x;
    threadgroup float buf[64];
    if (t >= 40) return;
    buf[t] = x[t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[t] = buf[39 - t];
"""
UNWRITTEN = """
    uint t = thread_position_in_threadgroup.x;
    threadgroup float buf[64];
    if (t < 32) buf[t] = x[t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[t] = buf[t + 1];
"""
NO_MEMORY_ORDER = """
    uint t = thread_position_in_threadgroup.x;
    threadgroup float buf[64];
    buf[t] = x[t];
    threadgroup_barrier(mem_flags::mem_none);
    out[t] = buf[63 - t];
"""
CORRECT = """
    uint t = thread_position_in_threadgroup.x;
    threadgroup float buf[64];
    buf[t] = x[t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[t] = buf[63 - t];
"""
MISALIGNED = """
    uint i = thread_position_in_grid.x;
    const device float4* v = (const device float4*)(x + 1);
    out[i] = v[0].x;
"""
PRIVATE_OOB = """
    uint i = thread_position_in_grid.x;
    float acc[4];
    for (int k = 0; k <= 4; ++k) acc[k] = x[i] * k;
    out[i] = acc[0];
"""
# Many accesses, one out of bounds (the last row reads x[64]): the error keeps the line of the one that failed.
READ_PAST_IN_LOOP = """
    uint row = thread_position_in_grid.x;
    if (row >= 8) return;
    float m = -INFINITY;
    for (int c = 0; c < 8; ++c) m = metal::max(m, x[row * 8 + c]);
    float s = 0.0f;
    for (int c = 0; c < 8; ++c) s += metal::exp(x[row * 8 + c] - m);
    for (int c = 0; c <= 8; ++c) out[row * 8 + c] = metal::exp(x[row * 8 + c] - m) / s;
"""
KERNELS = {"read_past_in_loop": READ_PAST_IN_LOOP, "private_oob": PRIVATE_OOB, "misaligned": MISALIGNED, "missing_barrier": MISSING_BARRIER, "write_past": WRITE_PAST, "shuffle_outside": SHUFFLE_OUTSIDE,
           "barrier_in_branch": BARRIER_IN_BRANCH, "return_before_barrier": RETURN_BEFORE_BARRIER,
           "unwritten": UNWRITTEN, "no_memory_order": NO_MEMORY_ORDER, "correct": CORRECT}


@pytest.fixture(scope="module")
def faults() -> dict[str, tuple[str, int]]:
    """One source with every faulty kernel: name -> (host name, line of the kernel's opening brace)."""
    src, names = "", {}
    x = np.zeros(64, np.float32)
    for key, body in KERNELS.items():
        part, host = mlx_source(key, {"x": x}, {"out": "float32"}, body)
        names[key] = host
        src += part
    lines = src.splitlines()
    out = {k: (h, next(i + 1 for i, ln in enumerate(lines) if h in ln and ln.endswith("("))) for k, h in names.items()}
    return {"source": src, **out}  # type: ignore[dict-item]


def _fail(faults: dict, key: str, n: int = 64, tg: int = 64) -> MetalEmuError:
    from ksearch.metalemu.cpu import run_kernel

    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    with pytest.raises(MetalEmuError) as e:
        run_kernel(faults["source"], faults[key][0], [x, out], (n, 1, 1), (tg, 1, 1))
    assert e.value.status == "runtime_error"
    assert e.value.kernel == faults[key][0]
    return e.value


def _body_line(body: str, needle: str) -> int:
    """1-based line of `needle` in the kernel body (MLX puts the body right after the signature)."""
    return next(i + 1 for i, ln in enumerate(body.splitlines()) if needle in ln)


def test_correct_kernel_passes(faults: dict) -> None:
    from ksearch.metalemu.cpu import run_kernel

    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    run_kernel(faults["source"], faults["correct"][0], [x, out], (64, 1, 1), (64, 1, 1))
    np.testing.assert_array_equal(out, x[::-1])


def test_missing_barrier_is_a_race(faults: dict) -> None:
    # Threads run in order: thread 31 reads buf[32] before thread 32 writes it; the race is reported at the write.
    e = _fail(faults, "missing_barrier")
    assert e.kind == "threadgroup_race"
    assert e.body_line == _body_line(MISSING_BARRIER, "buf[t] = x[t]")
    assert "buf[32]" in str(e) and "read by thread 31" in str(e) and "written by thread 32" in str(e)


def test_barrier_without_threadgroup_memory_order_is_a_race(faults: dict) -> None:
    e = _fail(faults, "no_memory_order")
    assert e.kind == "threadgroup_race"
    assert e.body_line == _body_line(NO_MEMORY_ORDER, "out[t] = buf[63 - t]")


def test_write_one_past_the_buffer(faults: dict) -> None:
    e = _fail(faults, "write_past")
    assert e.kind == "out_of_bounds"
    assert e.body_line == _body_line(WRITE_PAST, "out[i + 1]")
    assert "`out`" in str(e) and "element 64" in str(e) and "of 64 elements" in str(e)


def test_read_past_the_buffer_among_many_accesses(faults: dict) -> None:
    e = _fail(faults, "read_past_in_loop")
    assert e.kind == "out_of_bounds" and "`x`" in str(e) and "read" in str(e) and "element 64" in str(e)
    assert e.body_line == _body_line(READ_PAST_IN_LOOP, "c <= 8")


def test_misaligned_vector_read(faults: dict) -> None:
    e = _fail(faults, "misaligned")
    assert e.kind == "misaligned"
    assert e.body_line == _body_line(MISALIGNED, "v[0].x")
    assert "byte offset 4" in str(e) and "16-byte alignment" in str(e)


def test_private_array_index_past_its_end(faults: dict) -> None:
    e = _fail(faults, "private_oob")
    assert e.kind == "private_out_of_bounds"
    assert e.body_line == _body_line(PRIVATE_OOB, "acc[k] = x[i] * k")
    assert "index 4" in str(e)


def test_shuffle_from_outside_the_simdgroup(faults: dict) -> None:
    e = _fail(faults, "shuffle_outside")
    assert e.kind == "shuffle_lane"
    assert e.body_line == _body_line(SHUFFLE_OUTSIDE, "simd_shuffle")
    assert "lane 32" in str(e)


def test_barrier_in_a_branch_some_threads_skip(faults: dict) -> None:
    e = _fail(faults, "barrier_in_branch")
    assert e.kind == "barrier_divergence"
    assert e.body_line == _body_line(BARRIER_IN_BRANCH, "        threadgroup_barrier")
    assert "threads 0-31" in str(e) and "32-63" in str(e)


def test_barrier_after_some_threads_returned(faults: dict) -> None:
    e = _fail(faults, "return_before_barrier")
    assert e.kind == "barrier_divergence"
    assert e.body_line == _body_line(RETURN_BEFORE_BARRIER, "threadgroup_barrier")
    assert "40-63" in str(e) and "returned" in str(e)


def test_read_of_unwritten_threadgroup_memory(faults: dict) -> None:
    e = _fail(faults, "unwritten")
    assert e.kind == "uninitialized_threadgroup_read"
    assert e.body_line == _body_line(UNWRITTEN, "out[t] = buf[t + 1]")
    assert "buf[32]" in str(e) and "thread 31" in str(e)


def test_threadgroup_memory_past_the_limit() -> None:
    from ksearch.metalemu.cpu import run_kernel

    body = """
    uint t = thread_position_in_threadgroup.x;
    threadgroup float big[8192];
    threadgroup float more[2048];
    threadgroup float last[2048];
    big[t] = x[t];
    more[t] = x[t];
    last[t] = x[t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[t] = big[t] + more[t] + last[t];
"""
    src, host = mlx_source("big_tg", {"x": np.zeros(64, np.float32)}, {"out": "float32"}, body)
    with pytest.raises(MetalEmuError) as e:
        run_kernel(src, host, [np.zeros(64, np.float32), np.zeros(64, np.float32)], (64, 1, 1), (64, 1, 1))
    assert e.value.status == "compile_error" and e.value.kind == "threadgroup_memory_limit"
    assert e.value.body_line == _body_line(body, "threadgroup float more")
    assert "49152 bytes" in str(e.value) and "32768" in str(e.value) and "more error" not in str(e.value)


@pytest.mark.parametrize("header, body, construct, words", [
    ("float sample(texture2d<float> t) { return 0.0f; }\n", "out[0] = x[0];", "texture2d", "not emulated: textures"),
    ("", "double d = x[0];\n    out[0] = d;", "double", "Metal has no 64-bit floating point type"),
])
def test_unsupported_construct(header: str, body: str, construct: str, words: str) -> None:
    from ksearch.metalemu.translate import translate

    src, _ = mlx_source("unsupported", {"x": np.zeros(64, np.float32)}, {"out": "float32"}, body, header=header)
    with pytest.raises(MetalEmuError) as e:
        translate(src)
    assert e.value.status == "compile_error"
    assert f"`{construct}`" in str(e.value) and words in str(e.value)
    lines = src.splitlines()
    assert construct in lines[e.value.line - 1]


def test_threadgroup_kernel_parameter_is_unsupported() -> None:
    from ksearch.metalemu.translate import translate

    src = ("[[kernel]] void k(device float* out [[buffer(0)]], threadgroup float* s [[threadgroup(0)]],\n"
           "  uint i [[thread_position_in_grid]]) { out[i] = 0; }\n")
    with pytest.raises(MetalEmuError) as e:
        translate(src)
    assert e.value.status == "compile_error" and "[[threadgroup(0)]]" in str(e.value) and e.value.line == 1


def test_buffer_of_the_wrong_type(faults: dict) -> None:
    from ksearch.metalemu.cpu import run_kernel

    with pytest.raises(MetalEmuError) as e:
        run_kernel(faults["source"], faults["correct"][0], [np.zeros(64), np.zeros(64, np.float32)], (64, 1, 1),
                   (64, 1, 1))
    assert e.value.kind == "arguments" and "float64" in str(e.value) and "`x`" in str(e.value)


@pytest.mark.parametrize("dtype", ["float16", "int16"])
def test_atomic_of_a_type_metal_has_no_atomic_for(dtype: str) -> None:
    # atomic_outputs=True on a float16 output: `device atomic<float16_t>*`, which Metal does not compile.
    from ksearch.metalemu.cpu import run_kernel

    body = """
    uint i = thread_position_in_grid.x;
    atomic_fetch_add_explicit(&out[i], x[i], memory_order_relaxed);
"""
    x = np.zeros(64, dtype)
    src, host = mlx_source("atomic_" + dtype, {"x": x}, {"out": dtype}, body, atomic=True)
    with pytest.raises(MetalEmuError) as e:
        run_kernel(src, host, [x, np.zeros(64, dtype)], (64, 1, 1), (64, 1, 1))
    assert e.value.status == "compile_error" and e.value.body_line == _body_line(body, "atomic_fetch_add")
    assert "Metal has atomic<T> only for T = int, uint, bool, ulong and float" in str(e.value)
    assert f"(here T = {'half' if dtype == 'float16' else 'short'})" in str(e.value)
    assert "static_assert" not in str(e.value) and "requirement" not in str(e.value)


NEVER_ENDS = """
    uint i = thread_position_in_grid.x;
    float s = 0.0f;
    for (int c = 0; c < 8; c += 0) s += x[c];
    out[i] = s;
"""


def test_a_loop_that_never_ends_runs_until_stopped() -> None:
    """C++ lets a compiler assume that a loop without side effects ends; clang then compiled this one to whatever
    came after it, and the kernel failed at once with a misaligned read it never made. A kernel that never returns
    must run until its caller's timeout, as on a GPU."""
    from ksearch.metalemu.compile import build

    x = np.zeros(64, np.float32)
    src, host = mlx_source("never_ends", {"x": x}, {"out": "float32"}, NEVER_ENDS)
    build(src)  # compiled (and cached) here: the seconds below are the run's
    script = ("import numpy as np\nfrom ksearch.metalemu.cpu import run_kernel\n"
              f"run_kernel({src!r}, {host!r}, [np.zeros(64, np.float32), np.zeros(64, np.float32)], (64, 1, 1), "
              "(64, 1, 1))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=4)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return
    pytest.fail(f"a kernel that never ends returned (exit {proc.returncode}): {err[-1500:]}")
