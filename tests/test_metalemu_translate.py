"""The MSL -> C++ translation of the Metal emulation, without a compiler: lines stay where they were, address
spaces become checked types, MSL-only syntax is rewritten, kernels and instantiations are found, and what cannot be
emulated is a compile_error at its line."""

from __future__ import annotations

import pytest

from ksearch.errors import MetalEmuError
from ksearch.metalemu.translate import FILE_TAG, translate

KERNEL = """#include <metal_stdlib>
using namespace metal;
struct Acc { float v; float get() const device { return v; } };
template <typename T, int N, bool B>
[[kernel]] void custom_kernel_k(
  const device T* x [[buffer(0)]],
  const constant int* x_shape [[buffer(1)]],
  const constant float& scale [[buffer(2)]],
  device atomic<float>* out [[buffer(3)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]],
  uint thread_index_in_simdgroup [[thread_index_in_simdgroup]]) {
    threadgroup float tile[N][N + 1];
    half h = 1.5h;
    float4 f = float4(1.0f, 2.0f, float2(3.0f));
    int4 i = static_cast<int4>(f) + (int4)f;
    auto a = tile[0][1];
    float m = B ? h
                : 2.0f;
    const device float4* v = (const device float4*)(x + 4);
    thread float* p = &m;
}
template [[host_name("custom_kernel_k_float_8_1")]] [[kernel]] decltype(custom_kernel_k<float, 8, 1>)
    custom_kernel_k<float, 8, 1>;
"""


def _user_part(cpp: str) -> str:
    start = cpp.index(f'#line 1 "{FILE_TAG}"') + len(f'#line 1 "{FILE_TAG}"') + 1
    return cpp[start:cpp.index("#pragma clang attribute pop") - 1]


def test_lines_stay_in_place() -> None:
    tr = translate(KERNEL)
    user = _user_part(tr.cpp)
    assert user.count("\n") == KERNEL.count("\n")
    out, src = user.splitlines(), KERNEL.splitlines()
    assert "tg_decl<float[N][N + 1]>" in out[src.index("    threadgroup float tile[N][N + 1];")]


def test_rewrites() -> None:
    user = _user_part(translate(KERNEL).cpp)
    assert "::ks::dptr<const T> x" in user and "::ks::dptr<const int> x_shape" in user
    assert "const float& scale" in user.replace("const const", "const")
    assert "::ks::dptr<atomic<float>>out" in user.replace(" ", "")
    assert "constant" not in user
    assert "[[" not in user and "#include" not in user
    assert "::ks::half(1.5f)" in user
    assert "::ks::make<float, 4>(1.0f, 2.0f, ::ks::make<float, 2>(3.0f))" in user
    assert "::ks::vcast<int4>(f)" in user and "::ks::vcast<int4>(f)" in user.split("+", 1)[1]
    assert "auto a = ::ks::val(tile[0][1])" in user
    assert "::ks::tc<decltype((h)), decltype((2.0f))>(h)" in user
    assert "(::ks::dptr<const float4>)(x + 4)" in user
    assert "float* p = &m" in user and "get() const  {" in user
    assert "custom_kernel_k<float, 8, 1>;" not in user  # the instantiation statement is gone


def test_kernels_and_entries() -> None:
    tr = translate(KERNEL)
    (k,) = tr.kernels
    assert k.name == "custom_kernel_k" and k.templated and tr.fibers is False
    assert [(p.name, p.kind, p.index) for p in k.params] == [
        ("x", "buffer", 0), ("x_shape", "buffer", 1), ("scale", "buffer", 2), ("out", "buffer", 3),
        ("thread_position_in_grid", "attribute", 0), ("thread_index_in_simdgroup", "attribute", 10)]
    e = tr.entry("custom_kernel_k_float_8_1")
    assert e is not None and e.function.replace(" ", "") == "custom_kernel_k<float,8,1>"
    assert "ks_entry_0" in tr.cpp and "ks_desc_0" in tr.cpp
    assert tr.entry("custom_kernel_k") is e  # a template kernel's only instantiation answers to its name too


def test_synchronising_kernels_run_on_fibers() -> None:
    src = ("[[kernel]] void k(device float* o [[buffer(0)]], uint i [[thread_index_in_simdgroup]]) {\n"
           "  o[i] = simd_sum(o[i]);\n}\n")
    assert translate(src).fibers is True


@pytest.mark.parametrize("snippet, construct, line", [
    ("texture2d<float> t;", "texture2d", 2),
    ("sampler s;", "sampler", 2),
    ("double d = 1.0;", "double", 2),
])
def test_unsupported_constructs(snippet: str, construct: str, line: int) -> None:
    src = f"[[kernel]] void k(device float* o [[buffer(0)]]) {{\n  {snippet}\n}}\n"
    with pytest.raises(MetalEmuError) as e:
        translate(src)
    assert e.value.status == "compile_error" and f"`{construct}`" in str(e.value) and e.value.line == line


@pytest.mark.parametrize("src, words, line", [
    ('#include "mlx/utils.h"\n[[kernel]] void k(device float* o [[buffer(0)]]) {}\n', "#include", 1),
    ("[[kernel]] void k(device float* o [[buffer(0)]],\n  uint i [[vertex_id]]) {}\n", "[[vertex_id]]", 2),
    ("[[kernel]] void k(device float* o [[buffer(0)]],\n  uint i [[no_such_thing]]) {}\n", "unknown parameter", 2),
    ("[[kernel]] void k(device float* o [[buffer(0)]], uint i) {}\n", "no [[buffer(i)]]", 1),
    ("void f() {\n  threadgroup float t[4];\n}\n[[kernel]] void k(device float* o [[buffer(0)]]) {}\n",
     "only be declared in a kernel", 2),
    ("[[kernel]] void k(device float* o [[buffer(0)]]) {\n  threadgroup float t[4] = {0};\n}\n", "initializer", 2),
    ("[[kernel]] void k(device float** o [[buffer(0)]]) {}\n", "not emulated: a pointer to a pointer", 1),
    ("float f(float x) { return x; }\n", "no [[kernel]]", None),
])
def test_bad_sources(src: str, words: str, line: int | None) -> None:
    with pytest.raises(MetalEmuError) as e:
        translate(src)
    assert e.value.status == "compile_error" and words in str(e.value) and e.value.line == line


def test_the_runtime_hash_covers_every_header_the_runtime_includes() -> None:
    """A compiled kernel is cached under the hash of the runtime's sources: a header it includes from elsewhere (MSL's
    scalar type names, one copy with the knowledge layer's syntax-check shim) must count, or editing it would leave
    stale libraries in the cache."""
    import re

    from ksearch.metalemu.compile import RUNTIME, runtime_sources

    hashed = {p.resolve() for p in runtime_sources()}
    included = set()
    for src in RUNTIME.iterdir():
        if src.suffix in (".h", ".cpp"):
            for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', src.read_text(), re.M):
                included.add((src.parent / name).resolve())
    assert included, "the runtime includes none of its headers: the pattern above no longer matches"
    missing = sorted(str(p) for p in included - hashed)
    assert not missing, f"included by the runtime but not in runtime_sources(): {missing}"
    assert all(p.is_file() for p in included)
