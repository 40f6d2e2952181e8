"""The dialect linter: good and bad candidates of each dialect, fast path and deep (compiler) path."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ksearch.backends.nvcc import nvcc_path
from ksearch.knowledge.diagnostic import Diagnostic
from ksearch.knowledge.lint import check_cuda_candidate, check_metal_candidate, lint_source
from ksearch.knowledge.metal_check import clang_path
from ksearch.tasks import get_task

STARTERS = sorted((Path(__file__).parent.parent / "src" / "ksearch" / "tasks" / "starters").glob("*_*.py"))
BACKEND = {"cuda": "mlx-cuda", "metal": "mlx-metal", "cpu": "mlx-cpu"}
NEED_NVCC = pytest.mark.skipif(nvcc_path() is None, reason="LOUD SKIP: nvcc not found: MLX-CUDA compile check not run")
NEED_CLANG = pytest.mark.skipif(clang_path() is None,
                                reason="LOUD SKIP: clang++ not found (apt-get install clang): MSL check not run")


def _starters() -> list[tuple[str, str, str]]:
    out = []
    for path in STARTERS:
        task, _, kind = path.stem.rpartition("_")
        if kind in BACKEND:
            out.append((path.name, task, BACKEND[kind]))
    return out


def _codes(diags: list[Diagnostic], severity: str = "error") -> set[str]:
    return {d.code for d in diags if d.severity == severity}


@pytest.mark.parametrize(("name", "task", "backend"), _starters())
def test_builtin_starters_lint_clean(name: str, task: str, backend: str) -> None:
    source = (STARTERS[0].parent / name).read_text()
    assert lint_source(source, backend, get_task(task)) == []


@NEED_NVCC
def test_cuda_starters_compile() -> None:
    # All starters in one nvcc call per dtype (start-up dominates); the templates' compile check uses the same path.
    from ksearch.knowledge.cuda_check import compile_kernels
    from ksearch.knowledge.extract import find_kernels

    kernels = []
    for name, task, backend in _starters():
        if backend == "mlx-cuda":
            t = get_task(task)
            dtypes = {s.name: ("T" if s.dtype == "workload" else s.dtype) for s in t.inputs}
            kernels += find_kernels((STARTERS[0].parent / name).read_text(), dtypes)
    assert kernels
    for dtype in ("float16", "float32", "bfloat16"):
        messages = compile_kernels(kernels, dtype)
        assert messages is not None
        assert [m for m in messages if m.severity == "error"] == [], dtype


@NEED_CLANG
def test_metal_starters_pass_clang() -> None:
    for name, task, backend in _starters():
        if backend == "mlx-metal":
            source = (STARTERS[0].parent / name).read_text()
            for dtype in ("float16", "float32"):
                assert check_metal_candidate(source, get_task(task), dtype) == [], (name, dtype)


BAD_METAL = '''import mlx.core as mx

_SRC = """
    uint i = thread_position_in_grid;
    threadgroup float big[64][256];
    float v = expf((float)x[threadIdx.x]);
    __syncthreads();
    v += __shfl_xor_sync(0xffffffff, v, 16);
    out[i] = (T)v;
"""

_k = mx.fast.metal_kernel(name="bad", input_names=["x"], output_names=["out"], source=_SRC)


def run(x):
    return _k(inputs=[x], template=[("T", x.dtype)], grid=(x.size, 1, 1), threadgroup=(256, 1, 1),
              output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''

BAD_CUDA = '''import mlx.core as mx

_SRC = """
    uint i = thread_position_in_grid.x;
    __shared__ float tile[128][128];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float s = simd_sum((float)x[i]);
    out[i] = (T)s;
"""

_k = mx.fast.cuda_kernel(name="bad", input_names=["x"], output_names=["out"], source=_SRC)


def run(x):
    return _k(inputs=[x], template=[("T", x.dtype)], grid=(x.size, 1, 1), threadgroup=(2048, 1, 1),
              output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''


def test_cuda_isms_in_metal_are_errors_at_their_lines() -> None:
    diags = lint_source(BAD_METAL, "mlx-metal", get_task("softmax"))
    errors = {d.message.split(":")[1].strip().split(" ")[0]: d.line for d in diags if d.code == "cuda-in-metal"}
    assert errors["__syncthreads()"] == 7 and errors["threadIdx"] == 6 and errors["__shfl_xor_sync(mask,"] == 8
    assert "threadgroup-memory" in _codes(diags)  # 64 KB > 32 KB
    assert "msl-api" in _codes(diags)  # uint i = thread_position_in_grid (a uint3)


TWO_LAUNCHES = '''import mlx.core as mx

_SRC = """
    threadgroup T tile[N];
    const uint i = thread_position_in_grid.x;
    tile[thread_position_in_threadgroup.x] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = tile[thread_position_in_threadgroup.x];
"""

_k = mx.fast.metal_kernel(name="two", input_names=["x"], output_names=["out"], source=_SRC)


def run(x):
    f16 = mx.float16
    f32 = mx.float32
    if x.dtype == f16:
        return _k(inputs=[x], template=[("T", f16), ("N", 8192)], grid=(x.size, 1, 1), threadgroup=(256, 1, 1),
                  output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
    if x.dtype == f32:
        return _k(inputs=[x], template=[("T", f32), ("N", N32)], grid=(x.size, 1, 1), threadgroup=(256, 1, 1),
                  output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
    return x
'''


@pytest.mark.parametrize("n32,over", [(4096, False), (16384, True)], ids=["fits", "past-32KB"])
def test_each_launch_configuration_of_a_kernel_is_checked(n32: int, over: bool) -> None:
    """One kernel launched at two template configurations (a dtype branch each): the second's threadgroup memory is
    checked too, not only the first launch's (8192 halves and 4096 floats fit 32 KB; 16384 floats do not)."""
    diags = lint_source(TWO_LAUNCHES.replace("N32", str(n32)), "mlx-metal")
    sizes = [d.message.split(":")[1].strip().split(" ")[0] for d in diags if d.code == "threadgroup-memory"]
    assert sizes == (["65536"] if over else [])


def test_metal_isms_in_cuda_are_errors() -> None:
    diags = lint_source(BAD_CUDA, "mlx-cuda")
    assert {"metal-in-cuda", "shared-memory", "threadgroup-size"} <= _codes(diags)
    line = next(d.line for d in diags if "threadgroup_barrier" in d.message)
    assert line == 6


def test_wrong_dialect_and_cpu_backend() -> None:
    assert _codes(lint_source(BAD_METAL, "mlx-cuda")) == {"wrong-dialect"}
    assert _codes(lint_source(BAD_CUDA, "mlx-metal")) == {"wrong-dialect"}
    assert _codes(lint_source(BAD_CUDA, "mlx-cpu")) == {"no-custom-kernels"}
    ops = "import mlx.core as mx\n\n\ndef run(x):\n    return mx.exp(x)\n"
    assert lint_source(ops, "mlx-cpu") == []


def test_forbidden_api_is_an_error_with_the_forbidden_code() -> None:
    src = ("import mlx.core as mx\n\n\ndef run(q, k, v, causal):\n"
           "    return mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0)\n")
    diags = lint_source(src, "mlx-cpu", get_task("attention"))
    assert [d.code for d in diags] == ["forbidden-api"] and diags[0].line == 5
    assert lint_source(src, "mlx-cpu") == []  # without a task there is nothing forbidden


@pytest.mark.parametrize(("call", "status"), [("mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0)", "forbidden"),
                                              ("mx.softmax(q @ k.swapaxes(-1, -2), axis=-1) @ v", None)])
def test_the_harness_scans_a_candidate_once(monkeypatch: pytest.MonkeyPatch, call: str, status: str | None) -> None:
    # The harness's static checks run the forbidden-API scan and hand the result to the linter, which reuses it.
    import ksearch.harness.static
    import ksearch.knowledge.lint
    from ksearch.backends import Backend
    from ksearch.harness.evaluator import EvalOptions, EvalResult, Evaluator
    from ksearch.harness.measure import Fail
    from ksearch.knowledge.forbidden import scan_forbidden

    scans = []

    def counted(*args: Any) -> Any:
        scans.append(args)
        return scan_forbidden(*args)

    monkeypatch.setattr(ksearch.harness.static, "scan_forbidden", counted)
    monkeypatch.setattr(ksearch.knowledge.lint, "scan_forbidden", counted)
    src = f"import mlx.core as mx\n\n\ndef run(q, k, v, causal):\n    return {call}\n"
    evaluator = Evaluator(get_task("attention"), Backend("mlx-cpu", "cpu"))
    try:
        evaluator._static(src, EvalOptions(), EvalResult(status="passed"))
        got = None
    except Fail as fail:
        got = fail.status
        assert fail.message == ("line 5: uses forbidden API mx.fast.scaled_dot_product_attention; write the "
                                "computation yourself")
    assert got == status and len(scans) == 1


CUDA_WARN = '''import mlx.core as mx

_SRC = """
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    extern __shared__ float dyn[];
    __shared__ float tile[32][32];
    out[i] = x[i] * 2;
"""

_k = mx.fast.cuda_kernel(name="warn", input_names=["x"], output_names=["out"], source=_SRC)
'''


def test_cuda_heuristics() -> None:
    diags = lint_source(CUDA_WARN, "mlx-cuda")
    assert {"bounds-check", "bank-conflict"} <= _codes(diags, "warning")
    assert "shared-memory" in _codes(diags)  # extern __shared__ without shared_memory=
    with_smem = CUDA_WARN.replace("source=_SRC)", "source=_SRC, shared_memory=4096)")
    assert "shared-memory" not in _codes(lint_source(with_smem, "mlx-cuda"))
    big = CUDA_WARN.replace("source=_SRC)", "source=_SRC, shared_memory=300000)")
    assert "shared-memory" in _codes(lint_source(big, "mlx-cuda"))  # above Hopper's 227 KB


def test_cluster_dims_warn_about_mlx_cuda_graphs() -> None:
    # In the header (MLX writes the __global__ line, so cluster dims ride on a redefinition of it) or the body.
    hdr = CUDA_WARN.replace("source=_SRC)", 'source=_SRC, header="#undef __global__\\n#define __global__ '
                            '__attribute__((global)) __cluster_dims__(1, 2, 1)\\n")')
    diags = lint_source(hdr, "mlx-cuda")
    assert "cluster-graphs" in _codes(diags, "warning")
    assert any("MLX_USE_CUDA_GRAPHS=0" in d.message for d in diags)
    assert "cluster-graphs" not in _codes(lint_source(CUDA_WARN, "mlx-cuda"), "warning")


def test_barrier_after_early_return_is_a_warning() -> None:
    src = CUDA_WARN.replace("    extern __shared__ float dyn[];\n", "    if (i >= 10) return;\n    __syncthreads();\n")
    assert "barrier-after-return" in _codes(lint_source(src, "mlx-cuda"), "warning")


FSTRING = '''import mlx.core as mx

TILE = 16
_BODY = """
    __shared__ float t[{tile}][{tile} + 1];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= x_shape[0]) return;
    out[i] = x[i] + (T)NAME;
"""
_SRC = _BODY.format(tile=TILE).replace("NAME", "1")
_k = mx.fast.cuda_kernel(name="fmt", input_names=["x"], output_names=["out"], source=_SRC)
_k2 = mx.fast.cuda_kernel(name="fs", input_names=["x"], output_names=["out"], source=f"{_SRC}")
_k3 = mx.fast.cuda_kernel(name="dyn", input_names=["x"], output_names=["out"], source=make_source())


def run(x):
    return _k(inputs=[x], template=[("T", x.dtype)], grid=(x.size, 1, 1), threadgroup=(256, 1, 1),
              output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''


def test_format_replace_and_fstring_sources_resolve_and_unresolvable_warns() -> None:
    diags = lint_source(FSTRING, "mlx-cuda")
    assert _codes(diags) == set()
    assert [d.code for d in diags] == ["unresolved-source"]
    from ksearch.knowledge.extract import find_kernels

    kernels = find_kernels(FSTRING)
    assert "float t[16][16 + 1]" in (kernels[0].source or "") and kernels[1].source == kernels[0].source


def test_syntax_error_and_str() -> None:
    diags = lint_source("def run(:\n", "mlx-cuda")
    assert diags[0].code == "syntax" and str(diags[0]).startswith("error [syntax] line 1:")
    assert str(Diagnostic("warning", "x", "msg")) == "warning [x] msg"
    with pytest.raises(ValueError):
        lint_source("", "mlx-vulkan")


def test_fast_path_is_fast() -> None:
    source = (STARTERS[0].parent / "attention_cuda.py").read_text()
    task = get_task("attention")
    lint_source(source, "mlx-cuda", task)
    t0 = time.perf_counter()
    for _ in range(10):
        lint_source(source, "mlx-cuda", task)
    assert (time.perf_counter() - t0) / 10 < 0.05


@NEED_NVCC
def test_deep_cuda_reports_compiler_errors_at_candidate_lines() -> None:
    plain = CUDA_WARN.replace("out[i] = x[i] * 2;", "out[i] = x[i] * undefined_name;")
    plain = plain.replace("source=_SRC)", "source=_SRC, shared_memory=1024)")
    diags = check_cuda_candidate(plain, None, "float32")
    assert [(d.code, d.line) for d in diags] == [("nvcc", 7)] and "undefined_name" in diags[0].message
    assert "nvcc" in _codes(lint_source(plain, "mlx-cuda", deep=True))
    # Sources assembled by .format / f-strings map their errors to the factory call's line.
    built = FSTRING.replace("out[i] = x[i] + (T)NAME;", "out[i] = x[i] + undefined_name;")
    diags = check_cuda_candidate(built, None, "float32")
    assert {d.line for d in diags if d.code == "nvcc"} == {11, 12}
    assert any(d.code == "unresolved-source" for d in diags)


@NEED_CLANG
def test_deep_metal_reports_type_errors_at_candidate_lines() -> None:
    src = '''import mlx.core as mx

_SRC = """
    uint i = thread_position_in_grid.x;
    float4 v = float4(1.0f, 2.0f, 3.0f);
    int4 w = int4(1);
    float4 u = w;
    out[i] = (T)(v.x + u.y);
"""
_k = mx.fast.metal_kernel(name="m", input_names=["x"], output_names=["out"], source=_SRC)
'''
    diags = check_metal_candidate(src, None)
    lines = {d.line for d in diags if d.code == "msl-compile"}
    assert 7 in lines  # int4 -> float4 implicit conversion is illegal in MSL
    assert any("number of components" in d.message for d in diags)
    # The fast path cannot see type errors (that is what deep is for); it sees only that this fragment has no run().
    assert [d.code for d in lint_source(src, "mlx-metal")] == ["no-run"]


@NEED_CLANG
@pytest.mark.parametrize("decl", ["texture2d<float> t;", "sampler s;"])
def test_deep_metal_says_a_texture_cannot_reach_the_kernel(decl: str) -> None:
    """Metal has textures and samplers, but mx.fast.metal_kernel binds buffers only: the check says so rather than
    that the type is unknown."""
    src = f'''import mlx.core as mx

_k = mx.fast.metal_kernel(name="m", input_names=["x"], output_names=["out"], source="""
    uint i = thread_position_in_grid.x;
    {decl}
    out[i] = x[i];
""")
'''
    (diag,) = [d for d in check_metal_candidate(src, None) if d.code == "msl-compile"]
    assert diag.line == 5 and "mx.fast.metal_kernel binds buffers only" in diag.message, diag.message
    assert "no template named" not in diag.message and "unknown type name" not in diag.message


def test_deep_metal_declares_atomic_outputs_as_mlx_does() -> None:
    """atomic_outputs=True makes MLX declare `device atomic<T>* out`: atomics on it check, plain stores do not."""
    body = "uint i = thread_position_in_grid.x; atomic_fetch_add_explicit(&out[0], x[i], memory_order_relaxed);"
    src = ("import mlx.core as mx\n\n"
           f"_k = mx.fast.metal_kernel(name='a', input_names=['x'], output_names=['out'], source={body!r}, "
           "atomic_outputs=True)\n")
    if clang_path() is None:
        pytest.skip("clang not installed")
    assert check_metal_candidate(src, None, "float32") == []
    plain = src.replace("atomic_outputs=True", "atomic_outputs=False")
    assert any(d.code == "msl-compile" for d in check_metal_candidate(plain, None, "float32"))


LAZY = '''import functools

import mlx.core as mx


@functools.cache
def _kernel():
    src = """
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= x_shape[0]) return;
  float acc[HEAD_DIM];
  acc[0] = (float)x[i];
  out[i] = (T)(acc[0] * (CAUSAL ? 2.f : 1.f));
"""
    return mx.fast.cuda_kernel(name="lazy", input_names=["x"], output_names=["out"], source=src)


def run(x):
    return _kernel()(inputs=[x], template=[("T", x.dtype), ("HEAD_DIM", 64), ("CAUSAL", True)],
                     grid=(x.size, 1, 1), threadgroup=(256, 1, 1), output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''


def test_lazily_built_kernel_gets_its_local_source_and_launch() -> None:
    from ksearch.knowledge.extract import find_kernels

    (k,) = find_kernels(LAZY)
    assert k.source and "HEAD_DIM" in k.source
    assert [(t.name, t.kind, t.value) for t in k.template] == [("T", "dtype", "T"), ("HEAD_DIM", "int", 64),
                                                               ("CAUSAL", "bool", True)]
    assert lint_source(LAZY, "mlx-cuda") == []
    if nvcc_path() is not None:
        assert check_cuda_candidate(LAZY, None, "float16") == []


LIBRARY_CONSTANTS = '''import mlx.core as mx
from ksearch.kernels.kernel_text import metal_kernel

SOURCE = "uint i = thread_position_in_grid.x; out[i] = x[i] * T(D) + T(CAUSAL);"


def _kernel(dtype, d, causal):
    args = (("T", dtype), ("D", d), ("CAUSAL", bool(causal)))
    return metal_kernel(name="k", input_names=["x", "meta"], output_names=["out"], source=SOURCE, constants=args)


def run(x, causal):
    meta = mx.array([1, 2], dtype=mx.int32)
    return _kernel(x.dtype, 64, causal)(inputs=[x, meta], grid=(x.size, 1, 1), threadgroup=(256, 1, 1),
                                         output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''


def test_the_librarys_constants_are_read_as_its_template_arguments() -> None:
    # kernel_text's wrappers write template arguments into the header (`constants=`, here through a name bound in the
    # same function); the launch, which passes none, still gives the input and output dtypes
    from ksearch.knowledge.extract import find_kernels

    (k,) = find_kernels(LIBRARY_CONSTANTS)
    assert [(t.name, t.kind, t.value) for t in k.template] == [("T", "dtype", "T"), ("D", "int", None),
                                                               ("CAUSAL", "bool", None)]
    assert k.input_dtypes == {"x": "T", "meta": "int32"} and k.output_dtypes == ["T"]


def _two_kernels(dialect: str, header_a: str, header_b: str) -> str:
    factory = "cuda_kernel" if dialect == "cuda" else "metal_kernel"
    body = "out[0] = (T)helper(1.0f);" if dialect == "cuda" else "out[0] = (T)helper(1.0f);"
    return f'''import mlx.core as mx

HA = {header_a!r}
HB = {header_b!r}
_a = mx.fast.{factory}(name="a", input_names=["x"], output_names=["out"], source={body!r}, header=HA)
_b = mx.fast.{factory}(name="b", input_names=["x"], output_names=["out"], source={body!r}, header=HB)
'''


@pytest.mark.parametrize("dialect", ["cuda", "metal"])
def test_kernels_sharing_or_clashing_headers_compile_as_mlx_would(dialect: str) -> None:
    if (nvcc_path() if dialect == "cuda" else clang_path()) is None:
        pytest.skip(f"LOUD SKIP: no compiler for {dialect}")
    check = check_cuda_candidate if dialect == "cuda" else check_metal_candidate
    q = "__device__ " if dialect == "cuda" else ""
    guarded = f"#ifndef HELPERS_H\n#define HELPERS_H\n{q}inline float helper(float v) {{ return v * 2.0f; }}\n#endif\n"
    assert check(_two_kernels(dialect, guarded, guarded), None, "float32") == []  # one header, two kernels
    other = f"{q}inline float helper(float v) {{ return v + 1.0f; }}\n"
    assert check(_two_kernels(dialect, guarded, other), None, "float32") == []  # same helper name, two headers


def test_block_uniform_early_return_is_fine_and_template_typed_arrays_are_sized() -> None:
    src = CUDA_WARN.replace("    extern __shared__ float dyn[];\n",
                            "    int row = blockIdx.x;\n    if (row >= x_shape[0]) return;\n    __syncthreads();\n")
    assert "barrier-after-return" not in _codes(lint_source(src, "mlx-cuda"), "warning")
    big = CUDA_WARN.replace("    extern __shared__ float dyn[];\n", "    __shared__ T a[64 * 128], b[64 * 128];\n")
    diags = lint_source(big, "mlx-cuda")  # T unknown: 4 bytes assumed, 64 KB > 48 KB static
    assert "shared-memory" in _codes(diags)
    ok = big.replace("64 * 128", "32 * 64")
    assert "shared-memory" not in _codes(lint_source(ok, "mlx-cuda"), "warning") | _codes(lint_source(ok, "mlx-cuda"))


def test_a_launch_bound_header_is_not_a_signature_and_leaves_the_next_kernel_plain() -> None:
    bounds = ("#undef __global__\n#define __global__ __attribute__((global)) __attribute__((launch_bounds(256, 1)))\n"
              "__device__ inline float helper(float v) { return v * 2.0f; }\n")
    plain = "__device__ inline float helper(float v) { return v + 1.0f; }\n"
    src = _two_kernels("cuda", bounds, plain)
    assert "cuda-signature" not in _codes(lint_source(src, "mlx-cuda"))
    for sig in ("__global__ void k(float* x) {", "__global__ __launch_bounds__(256) void k(float* x) {"):
        in_source = CUDA_WARN.replace("    int i = blockIdx.x", f"{sig}\n    int i = blockIdx.x")
        assert "cuda-signature" in _codes(lint_source(in_source, "mlx-cuda"))
    if nvcc_path() is not None:  # the header group's #undef restores the plain qualifier for kernel b
        assert check_cuda_candidate(src, None, "float32") == []


_CONSTANTS_CANDIDATE = '''
import mlx.core as mx

SOURCE = """
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = (T)((float)x[i] * 2.f);
"""
_TYPES = {mx.float16: "__half", mx.float32: "float"}
_KERNELS = {}


def _kernel(dtype, n):
    # The template arguments written into the header once per set (MLX formats them into every call otherwise).
    if (dtype, n) not in _KERNELS:
        header = "namespace mlx::core::cu {\\nusing T = " + _TYPES[dtype] + ";\\nconstexpr int N = " + str(n) + ";\\n}\\n"
        _KERNELS[(dtype, n)] = mx.fast.cuda_kernel(name="twice", input_names=["x"], output_names=["out"],
                                                   source=SOURCE, header=header)
    return _KERNELS[(dtype, n)]


def run(x):
    return _kernel(x.dtype, x.size)(inputs=[x], grid=(x.size, 1, 1), threadgroup=(256, 1, 1),
                                    output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''


def test_a_header_built_at_run_time_is_a_warning_not_a_compile_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # The body alone names constants only the header defines: compiling it without the header would report them as
    # undefined. The deep check leaves such a kernel to the compiler at its first call, and says so.
    from ksearch.knowledge import deep
    from ksearch.knowledge.extract import find_kernels

    (k,) = find_kernels(_CONSTANTS_CANDIDATE)
    assert k.source is not None and k.header_unresolved and k.header == ""
    compiled: list[Any] = []
    monkeypatch.setattr(deep, "compile_kernels", lambda kernels, dtype: compiled.append(kernels) or [])
    diags = lint_source(_CONSTANTS_CANDIDATE, "mlx-cuda", deep=True)
    assert [d.code for d in diags] == ["unresolved-header"] and diags[0].severity == "warning"
    assert compiled == []  # nothing handed to nvcc
    assert lint_source(_CONSTANTS_CANDIDATE, "mlx-cuda") == []  # the harness's (shallow) lint: clean


def test_deep_without_a_compiler_says_so_once_for_every_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    # softmax's GPU workloads use two dtypes; the missing compiler is one fact, not one per dtype.
    monkeypatch.delenv("KSEARCH_CLANG", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    source = (STARTERS[0].parent / "softmax_metal.py").read_text()
    diags = lint_source(source, "mlx-metal", get_task("softmax"), deep=True)
    assert [d.code for d in diags] == ["deep-check-skipped"]
