"""The kernel text handed to MLX (ksearch/kernels/kernel_text.py): comments, indentation and blank lines go, what the
compiler reads stays, and nvcc makes the same PTX of the library's kernels from either text."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

import pytest

from ksearch.backends.detect import clang_path
from ksearch.backends.nvcc import PRELUDE, nvcc_path, wrap
from ksearch.kernels import tensor_map
from ksearch.kernels.attention import wgmma as W
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.kernels.decode import cuda_split_k_text as SK
from ksearch.kernels.kernel_text import compact, constant_lines, content_name, cuda_kernel


def test_comments_indentation_and_blank_lines_go() -> None:
    text = """
    // a line comment
    int x = a / b;   // division stays, the comment goes
    x /= 2; /* a block
       comment over lines */ int y = 1;

        float z = 0.5f;  /* one-line block */ float w = 1.0f;
    """
    assert compact(text) == "int x = a / b;\nx /= 2;\nint y = 1;\nfloat z = 0.5f;    float w = 1.0f;\n"


def test_literals_and_directives_stay_as_they_are() -> None:
    text = r'''
    #define TWICE(x) \
        ((x) + (x))
    asm volatile("mov.u32 %0, %%laneid; // not a comment\n" : "=r"(lane));
    const char c = '/', d = '"';  const char* s = "/* nor this */ \" still in";
    #include "mlx/backend/cuda/device/utils.cuh"
    '''
    out = compact(text).split("\n")
    assert out[0] == "#define TWICE(x) \\" and out[1] == "((x) + (x))"  # the continuation keeps its line end
    assert out[2] == 'asm volatile("mov.u32 %0, %%laneid; // not a comment\\n" : "=r"(lane));'
    assert out[3] == "const char c = '/', d = '\"';  const char* s = \"/* nor this */ \\\" still in\";"
    assert out[4] == '#include "mlx/backend/cuda/device/utils.cuh"'
    # a block comment between directives keeps them on lines of their own
    assert compact("#if A /* x\n y */\n#endif\n") == "#if A\n#endif\n"


def test_compacting_twice_changes_nothing_more() -> None:
    for text in (WS.SOURCE_TMA, WGMMA_HEADER, SK.SPLIT_RING_SOURCE):
        once = compact(text)
        assert compact(once) == once and len(once) < len(text)


def test_unclosed_comments_and_literals_say_what_to_fix() -> None:
    with pytest.raises(ValueError, match="never closed; close it with"):
        compact("int x; /* open")
    with pytest.raises(ValueError, match="left open at the end of a line"):
        compact('const char* s = "open\nint x;')


def test_a_kernel_is_named_by_its_text() -> None:
    # MLX before 0.32.1 kept a process's compiled CUDA kernels by name alone: another text, header or argument list
    # under the same name is another name; the same text the same name, in any process.
    base = content_name("ks_k", "#define A 1\n", "o[0] = A;\n", ["x"], ["o"])
    assert base.startswith("ks_k_") and len(base) == len("ks_k_") + 8
    assert base == content_name("ks_k", "#define A 1\n", "o[0] = A;\n", ["x"], ["o"])
    others = {content_name("ks_k", "#define A 2\n", "o[0] = A;\n", ["x"], ["o"]),
              content_name("ks_k", "#define A 1\n", "o[0] = A + 1;\n", ["x"], ["o"]),
              content_name("ks_k", "#define A 1\n", "o[0] = A;\n", ["y"], ["o"]),
              content_name("ks_k", "#define A 1\n", "o[0] = A;\n", ["x", "o"], []),
              content_name("ks_k", "", "#define A 1\no[0] = A;\n", ["x"], ["o"]),
              content_name("ks_k", "#define A 1\n", "o[0] = A;\n", ["x"], ["o"], shared_memory=65536)}
    assert base not in others and len(others) == 6


def test_the_library_hands_mlx_the_compact_text_under_its_content_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import mlx.core as mx

    seen: list[dict[str, object]] = []
    monkeypatch.setattr(mx.fast, "cuda_kernel", lambda **kw: seen.append(kw) or kw)
    cuda_kernel(name="ks_split", input_names=["q"], output_names=["o"], source="// why\n  o[0] = q[0];\n",
                header="  #define B 2  // two\n")
    cuda_kernel(name="ks_split", input_names=["q"], output_names=["o"], source="o[0] = q[0];  /* same code */")
    first, second = seen
    assert first["source"] == "o[0] = q[0];\n" and first["header"] == "#define B 2\n"
    assert first["name"] == content_name("ks_split", "#define B 2\n", "o[0] = q[0];\n", ["q"], ["o"])
    assert second["name"] != first["name"]  # the header differs; a comment alone would not change the name
    assert cuda_kernel(name="ks_split", input_names=["q"], output_names=["o"], source="o[0] = q[0]; // other",
                       header="#define B 2")["name"] == first["name"]


def test_constants_are_written_into_the_header_in_mlx_s_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    # A kernel made with its template arguments as constants is called without them (MLX formats every template
    # argument into each call); each set of constants is a kernel of its own name.
    import mlx.core as mx

    seen: list[dict[str, object]] = []
    monkeypatch.setattr(mx.fast, "cuda_kernel", lambda **kw: seen.append(kw) or kw)
    half = cuda_kernel(name="ks_c", input_names=["q"], output_names=["o"], source="o[0] = q[0] * D;",
                       header="#define B 2\n", constants=(("T", mx.float16), ("D", 128), ("RING", True)))
    bf16 = cuda_kernel(name="ks_c", input_names=["q"], output_names=["o"], source="o[0] = q[0] * D;",
                       header="#define B 2\n", constants=(("T", mx.bfloat16), ("D", 128), ("RING", True)))
    assert half["header"] == ("#define B 2\nnamespace mlx::core::cu {\nusing T = __half;\nconstexpr int D = 128;\n"
                              "constexpr bool RING = true;\n}  // namespace mlx::core::cu\n")
    assert "using T = __nv_bfloat16;" in str(bf16["header"]) and half["name"] != bf16["name"]
    assert "template" not in half
    with pytest.raises(ValueError, match="not a type a kernel constant can be; use one of float16"):
        constant_lines([("T", mx.complex64)])
    assert constant_lines([]) == ""


def test_metal_constants_are_program_scope_constants_of_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    # MLX's Metal call formats template arguments into the kernel's name and an instantiation on every call, as the
    # CUDA call does; with constants each set is a kernel of its own name, called without them.
    import mlx.core as mx

    from ksearch.kernels.kernel_text import metal_constant_lines, metal_kernel

    seen: list[dict[str, object]] = []
    monkeypatch.setattr(mx.fast, "metal_kernel", lambda **kw: seen.append(kw) or kw)
    consts = (("T", mx.bfloat16), ("D", 64), ("CAUSAL", False))
    made = metal_kernel(name="ks_m", input_names=["q"], output_names=["o"], source="o[0] = q[0] * D;",
                        header="// why\n#define B 2\n", constants=consts)
    assert made["header"] == ("#define B 2\nusing T = bfloat16_t;\nconstant constexpr int D = 64;\n"
                              "constant constexpr bool CAUSAL = false;\n")
    half = metal_kernel(name="ks_m", input_names=["q"], output_names=["o"], source="o[0] = q[0] * D;",
                        constants=(("T", mx.float16), ("D", 64)))
    plain = metal_kernel(name="ks_m", input_names=["q"], output_names=["o"], source="o[0] = q[0] * D;")
    assert "using T = float16_t;" in str(half["header"]) and len({made["name"], half["name"], plain["name"]}) == 3
    assert plain["name"] == "ks_m" and plain["header"] == ""  # without constants the name is the caller's
    with pytest.raises(ValueError, match="not a type a Metal kernel constant can be; use one of float32"):
        metal_constant_lines([("T", "float8")])
    assert metal_constant_lines([]) == ""


def _ptx(units: list[str]) -> str:
    """nvcc's PTX of PRELUDE and `units` for sm_90a, without its comment lines (compiler banners) and with the hash
    of the file's text that names its internal symbols (`_INTERNAL_e98cede9_...`,
    `_GLOBAL__N__251f2a20_...`) made one name."""
    with tempfile.TemporaryDirectory(prefix="ksearch_ptx_") as tmp:
        src, out = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.ptx")
        with open(src, "w") as fh:
            fh.write(PRELUDE + "\n".join(units))
        proc = subprocess.run([str(nvcc_path()), "-arch=sm_90a", "-std=c++17", "-ptx", "-o", out, src],
                              capture_output=True, text=True, timeout=600, cwd=tmp)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(out) as fh:
            ptx = "\n".join(line for line in fh.read().split("\n") if not line.startswith("//"))
    return re.sub(r"_(INTERNAL|GLOBAL__N_)_[0-9a-f]{8}_", r"_\1_file_", ptx)


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_the_library_kernels_compile_to_the_same_ptx_from_the_compact_text() -> None:
    # The prefill default at D=128 (three warpgroups, tensor copies), the persistent 128-key tiles, and the decode
    # split (with its ring) and merge: each body and header as written and as MLX is handed them.
    def units(edit) -> list[str]:  # type: ignore[no-untyped-def]
        out = [edit(WGMMA_HEADER), edit(tensor_map.TMA_HEADER), edit(SK.HEADER)]
        for i, name in enumerate(("ws3_n64_s4_p4_tmas", "ws2_n128_s3_p4_tmas_pst")):
            cfg = WS.parse_config(name)
            src = WS.source_text(cfg)
            out.append(wrap(f"p{i}", edit(src), edit(W.launch_bounds(cfg.threads(), cfg.blocks)),
                            [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32"), ("tmap", "uint64")],
                            [("o", "T"), ("maps", "uint64")],
                            [("T", "float16"), ("D", 128), ("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", True),
                             *WS.stage_args(cfg)]))
        ins, parts = [("q", "T"), ("k", "T"), ("v", "T")], [("part_acc", "float32"), ("part_ml", "float32")]
        out.append(wrap("ring", edit(SK.SPLIT_RING_SOURCE), "", ins, parts,
                        [("T", "float16"), ("D", 128), ("G", 4), ("NW", 4), ("U", 2), ("PREFETCH", True),
                         ("RING", 3)]))
        out.append(wrap("merge", edit(SK.MERGE_SOURCE), "", parts, [("o", "T")], [("T", "float16"), ("D", 128),
                                                                                  ("G", 4)]))
        return out

    compacted = _ptx(units(compact))
    assert compacted.count(".entry ") == 4 and "wgmma.mma_async" in compacted and "cp.async.bulk.tensor" in compacted
    assert compacted == _ptx(units(lambda text: text))


@pytest.mark.skipif(clang_path() is None, reason="clang++ not installed: the Metal emulation needs it")
def test_a_metal_kernel_gives_the_same_bits_from_the_compact_text() -> None:
    # The row-per-thread prefill under the Metal emulation (its CPU engine), as written and as MLX is handed it.
    import mlx.core as mx

    from ksearch.kernels.attention import metal_rows
    from ksearch.kernels.kernel_text import metal_kernel
    from ksearch.metalemu import surface

    restore = surface.install("cpu")
    try:
        q, k, v = (mx.random.normal(shape, key=mx.random.key(i)) for i, shape in
                   enumerate(((1, 2, 19, 64), (1, 1, 23, 64), (1, 1, 23, 64))))
        args = dict(inputs=[q, k, v], template=[("T", mx.float32), ("D", 64), ("NT", metal_rows.PREFILL_NT),
                                                ("BN", metal_rows.PREFILL_BN), ("CAUSAL", True)],
                    grid=(2 * metal_rows.PREFILL_NT, 1, 1), threadgroup=(metal_rows.PREFILL_NT, 1, 1),
                    output_shapes=[q.shape], output_dtypes=[mx.float32])
        names = dict(input_names=["q", "k", "v"], output_names=["o"])
        raw = mx.fast.metal_kernel(name="rows_as_written", source=metal_rows.PREFILL_SOURCE, **names)(**args)[0]
        compacted = metal_kernel(name="rows_compact", source=metal_rows.PREFILL_SOURCE, **names)(**args)[0]
        assert mx.array_equal(raw, compacted).item() and float(mx.abs(raw).sum().item()) > 0
        # the template arguments as constants in the header, the call without them: the same bits
        template = args.pop("template")
        constant = metal_kernel(name="rows_constants", source=metal_rows.PREFILL_SOURCE, constants=template,
                                **names)(**args)[0]
        assert mx.array_equal(raw, constant).item()
    finally:
        restore()
