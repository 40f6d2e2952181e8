"""The emulated `mx.fast.metal_kernel` against MLX itself.

The CPU build of MLX cannot launch a Metal kernel, but it can trace one into an exported function, and then it writes
the translation unit it would compile (`verbose=True`): that text is the oracle for ours, character for character.
Bad arguments are compared with the exceptions MLX raises before it looks for a GPU. What the surface hands the engine
(buffers in [[buffer(i)]] order, strides, launch sizes, output contents) is checked with a recording engine.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from ksearch.errors import MetalEmuError
from ksearch.metalemu import surface
from ksearch.metalemu.surface import metal_kernel

BODY = """
    uint i = thread_position_in_grid.x;
    if (i < a_shape[0]) o[i] = a[i] * b + T(N) + (FLAG ? 1 : 0) + c_strides[0];
"""


def _mlx_source(capfd: pytest.CaptureFixture[str], tmp_path: Any, factory: dict[str, Any], call: dict[str, Any],
                inputs: list[Any]) -> str:
    """The translation unit real MLX writes for this call (traced by mx.export_function, printed by verbose)."""
    k = mx.fast.metal_kernel(**factory)
    traced = [x for x in inputs if isinstance(x, mx.array)]

    def fn(*args: mx.array) -> list[mx.array]:
        it = iter(args)
        ins = [next(it) if isinstance(x, mx.array) else x for x in inputs]
        return k(inputs=ins, verbose=True, **call)  # type: ignore[no-any-return]

    capfd.readouterr()
    mx.export_function(str(tmp_path / "k.mlxfn"), fn, *traced)
    return capfd.readouterr().out


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, source: str, kernel_name: str, buffers: list[np.ndarray], grid: tuple[int, int, int],
                 threadgroup: tuple[int, int, int], *, threadgroup_memory_limit: int, **_options: object) -> None:
        self.calls.append({"source": source, "name": kernel_name, "buffers": [b.copy() for b in buffers],
                           "grid": grid, "threadgroup": threadgroup, "limit": threadgroup_memory_limit})


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setitem(surface.ENGINES, "record", lambda: rec)
    return rec


CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[Any]]] = [
    ("templates, scalar, constant and shape parameters",
     {"name": "foo", "input_names": ["a", "b", "c"], "output_names": ["o", "p"], "source": BODY,
      "header": "#define X 1\n"},
     {"template": [("T", mx.float32), ("N", 3), ("FLAG", True)], "output_shapes": [(4,), (2, 2)],
      "output_dtypes": [mx.float32, mx.int32], "grid": (4, 1, 1), "threadgroup": (4, 1, 1)},
     [mx.ones(4), 2.0, mx.ones((3, 5), dtype=mx.float16)]),
    ("every attribute, atomic outputs, ndim and bfloat16",
     {"name": "attrs", "input_names": ["x"], "output_names": ["y"], "atomic_outputs": True,
      "source": "uint a = thread_index_in_simdgroup + simdgroup_index_in_threadgroup + threads_per_simdgroup;\n"
                "uint3 g = threadgroup_position_in_grid + thread_position_in_threadgroup + threads_per_threadgroup"
                " + threads_per_grid + threadgroups_per_grid; int n = x_ndim;\n"
                "atomic_fetch_add_explicit(&y[0], x[0], memory_order_relaxed);"},
     {"output_shapes": [(1,)], "output_dtypes": [mx.float32], "grid": (64, 1, 1), "threadgroup": (32, 1, 1)},
     [mx.ones((2, 8), dtype=mx.bfloat16)]),
    ("no attribute, shape parameters, two outputs (MLX closes the signature after the first)",
     {"name": "noattr", "input_names": ["x"], "output_names": ["y", "z"], "source": "y[0] = x[0] + x_shape[0];"},
     {"output_shapes": [(1,), (1,)], "output_dtypes": [mx.float32, mx.uint8], "grid": (1, 1, 1),
      "threadgroup": (1, 1, 1)},
     [mx.ones((9,))]),
    ("integer inputs and a Python int scalar",
     {"name": "ints", "input_names": ["idx", "n"], "output_names": ["out"],
      "source": "uint i = thread_position_in_grid.x; out[i] = idx[i] + n;"},
     {"output_shapes": [(16,)], "output_dtypes": [mx.int64], "grid": (16, 1, 1), "threadgroup": (8, 1, 1),
      "template": [("B", False)]},
     [mx.arange(16, dtype=mx.int32), 7]),
]


@pytest.mark.parametrize("factory,call,inputs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_source_is_mlx_s(factory: dict[str, Any], call: dict[str, Any], inputs: list[Any], capfd: Any,
                         tmp_path: Any, recorder: Recorder) -> None:
    expected = _mlx_source(capfd, tmp_path, factory, call, inputs)
    assert "Generated source code for" in expected
    metal_kernel(**factory, engine="record")(inputs=inputs, verbose=True, **call)
    assert capfd.readouterr().out == expected
    # The engine gets that translation unit and the host name of its kernel.
    text = expected.split("```\n", 1)[1].rsplit("\n```", 1)[0]
    assert recorder.calls[-1]["source"] == text
    assert f'[[kernel]] void {recorder.calls[-1]["name"]}(' in text


def _base_call() -> dict[str, Any]:
    return {"inputs": [mx.ones(4)], "output_shapes": [(4,)], "output_dtypes": [mx.float32], "grid": (4, 1, 1),
            "threadgroup": (4, 1, 1)}


BAD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("two output shapes", {"output_shapes": [(4,), (4,)]}),
    ("no inputs", {"inputs": []}),
    ("no output dtypes", {"output_dtypes": []}),
    ("a grid of two", {"grid": (4, 1)}),
    ("a float grid", {"grid": (4.0, 1, 1)}),
    ("a grid past int32", {"grid": (2**40, 1, 1)}),
    ("a float template argument", {"template": [("T", 1.5)]}),
    ("a NumPy int template argument", {"template": [("T", np.int64(3))]}),
    ("a template dict", {"template": {"T": 1}}),
    ("a list as an input", {"inputs": [[1, 2]]}),
    ("a str init_value", {"init_value": "a"}),
    ("an int verbose", {"verbose": 1}),
    ("a NumPy dtype", {"output_dtypes": [np.float32]}),
    ("an int output shape", {"output_shapes": [4]}),
    ("a CPU stream", {"stream": mx.cpu}),
]


@pytest.mark.parametrize("change", [c[1] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_calls_raise_what_mlx_raises(change: dict[str, Any], recorder: Recorder) -> None:
    real = mx.fast.metal_kernel(name="foo", input_names=["a"], output_names=["o"], source="o[0] = a[0];")
    with pytest.raises(Exception) as theirs:
        real(**{**_base_call(), **change})
    ours_k = metal_kernel(name="foo", input_names=["a"], output_names=["o"], source="o[0] = a[0];", engine="record")
    with pytest.raises(Exception) as ours:
        ours_k(**{**_base_call(), **change})
    if "No Metal back-end" in str(theirs.value):
        # MLX found nothing wrong before looking for the GPU it lacks: ours refuses on the GPU MLX would have used.
        assert change == {"stream": mx.cpu} and str(ours.value) == "[metal_kernel] Only supports the GPU."
        return
    assert type(ours.value) is type(theirs.value)
    if str(theirs.value).startswith(("[metal_kernel]", "Invalid type")):
        assert str(ours.value) == str(theirs.value)
    assert not recorder.calls


@pytest.mark.parametrize("args", [
    {"name": "x", "input_names": ["a"], "output_names": [], "source": ""},
    {"name": "x", "input_names": ["a"], "output_names": ["o"], "source": "", "compile_options": {"x": 1}},
    {"name": "x", "input_names": ["a"], "output_names": ["o"], "source": "", "compile_options": {"math_mode": "q"}},
    {"name": "x", "input_names": ["a"], "output_names": ["o"], "source": "", "compile_options": [1]},
    {"name": 1, "input_names": ["a"], "output_names": ["o"], "source": ""},
    {"name": "x", "input_names": "a", "output_names": ["o"], "source": ""},
    {"name": "x", "input_names": ["a"], "output_names": ["o"], "source": "", "ensure_row_contiguous": 1},
    {"name": "x", "input_names": ["a"], "output_names": ["o"], "source": "", "header": None},
], ids=["no outputs", "unknown option", "bad math mode", "options not a dict", "int name", "str input names",
        "int flag", "None header"])
def test_bad_factories_raise_what_mlx_raises(args: dict[str, Any]) -> None:
    with pytest.raises(Exception) as theirs:
        mx.fast.metal_kernel(**args)
    with pytest.raises(Exception) as ours:
        metal_kernel(**args)
    assert type(ours.value) is type(theirs.value)
    if str(theirs.value).startswith("[metal_kernel]"):
        assert str(ours.value) == str(theirs.value)


def test_factory_accepts_what_mlx_accepts() -> None:
    for args in ({"name": "x", "input_names": ("a",), "output_names": ["o"], "source": ""},
                 {"name": "x", "input_names": [], "output_names": ["o"], "source": "",
                  "compile_options": {"math_mode": "fast"}}):
        mx.fast.metal_kernel(**args)
        assert metal_kernel(**args).math_mode == args.get("compile_options", {}).get("math_mode", "safe")


def test_buffers_in_signature_order(recorder: Recorder) -> None:
    src = "uint i = thread_position_in_grid.x; o[i] = x[i] + s + x_shape[1] + x_strides[0] + x_ndim + w[0];"
    k = metal_kernel(name="order", input_names=["x", "s", "w"], output_names=["o"], source=src, engine="record")
    x = mx.arange(6, dtype=mx.float16).reshape(2, 3)
    k(inputs=[x, 3, mx.array([1.5, 2.5], dtype=mx.bfloat16)], output_shapes=[(6,)], output_dtypes=[mx.float32],
      grid=(6, 1, 1), threadgroup=(4, 1, 1))
    b = recorder.calls[0]["buffers"]
    assert [a.dtype for a in b] == [np.float16, np.int32, np.int64, np.int32, np.int32, np.uint16, np.float32]
    np.testing.assert_array_equal(b[0], np.arange(6, dtype=np.float16))
    np.testing.assert_array_equal(b[1], [2, 3])
    np.testing.assert_array_equal(b[2], [3, 1])
    assert b[3].shape == () and int(b[3]) == 2
    assert b[4].shape == () and int(b[4]) == 3
    np.testing.assert_array_equal(b[5], np.array([1.5, 2.5], dtype=np.float32).view(np.uint32) >> 16)
    assert recorder.calls[0]["limit"] == 32 << 10
    assert "const constant int32_t& s [[buffer(4)]]" in recorder.calls[0]["source"]


def test_strided_input_without_row_contiguity(recorder: Recorder) -> None:
    """ensure_row_contiguous=False: the kernel reads the array where it lies, through its real strides."""
    src = "uint i = thread_position_in_grid.x; o[i] = x[i * x_strides[0]];"
    base = mx.arange(24, dtype=mx.float32).reshape(4, 6)
    view = base[:, 1:3].T  # (2, 4), strides (1, 6), first element 1
    for ensure, strides, first in ((False, [1, 6], [1, 2, 3, 4, 5, 6, 7, 8]), (True, [4, 1], [1, 7, 13, 19])):
        k = metal_kernel(name="strided", input_names=["x"], output_names=["o"], source=src,
                         ensure_row_contiguous=ensure, engine="record")
        k(inputs=[view], output_shapes=[(2,)], output_dtypes=[mx.float32], grid=(2, 1, 1), threadgroup=(2, 1, 1))
        data, got_strides = recorder.calls[-1]["buffers"][:2]
        assert got_strides.tolist() == strides
        assert data[:len(first)].tolist() == first
    assert recorder.calls[0]["buffers"][0].size == 1 + 1 * 1 + 3 * 6  # the span the view covers, no more


def test_outputs_initialised_or_poisoned(recorder: Recorder) -> None:
    k = metal_kernel(name="noop", input_names=["x"], output_names=["f", "h", "b", "i"], source="// nothing",
                     engine="record")
    call = {"inputs": [mx.ones(2)], "output_shapes": [(3,), (3,), (3,), (3,)],
            "output_dtypes": [mx.float32, mx.float16, mx.bfloat16, mx.int32], "grid": (1, 1, 1),
            "threadgroup": (1, 1, 1)}
    f, h, b, i = k(**call)
    assert np.isnan(np.array(f)).all() and np.isnan(np.array(h)).all()
    assert np.isnan(np.array(b.astype(mx.float32))).all()
    assert (np.array(i) == np.int32(np.uint32(0xA5A5A5A5).view(np.int32))).all()
    f, h, b, i = k(**call, init_value=2.7)
    for out, want in ((f, 2.7), (h, 2.7), (b, 2.7), (i, 2)):
        np.testing.assert_allclose(np.array(out.astype(mx.float32)), want, rtol=1e-2)
    assert b.dtype == mx.bfloat16 and i.dtype == mx.int32


def test_launch_sizes(recorder: Recorder) -> None:
    k = metal_kernel(name="l", input_names=["x"], output_names=["o"], source="o[0] = x[0];", engine="record")
    call = {"inputs": [mx.ones(2)], "output_shapes": [(1,)], "output_dtypes": [mx.float32]}
    k(**call, grid=(100, 3, 1), threadgroup=(64, 4, 1))
    assert recorder.calls[-1]["grid"] == (100, 3, 1) and recorder.calls[-1]["threadgroup"] == (64, 3, 1)
    with pytest.raises(ValueError, match=r"Thread group size \(2048\) is greater than  the maximum allowed"):
        k(**call, grid=(4096, 1, 1), threadgroup=(1024, 2, 1))
    with pytest.raises(ValueError, match="negative"):
        k(**call, grid=(-1, 1, 1), threadgroup=(1, 1, 1))
    n = len(recorder.calls)
    k(**call, grid=(0, 1, 1), threadgroup=(32, 1, 1))  # an empty grid launches nothing
    assert len(recorder.calls) == n
    k(**call, grid=(4, 1, 1), threadgroup=(8, 1, 1), stream=mx.gpu)
    k(**call, grid=(4, 1, 1), threadgroup=(8, 1, 1), stream=mx.Device(mx.gpu))
    assert recorder.calls[-1]["threadgroup"] == (4, 1, 1)


def test_install_replaces_and_restores() -> None:
    original = mx.fast.metal_kernel
    restore = surface.install("cpu")
    try:
        assert mx.fast.metal_kernel is not original
        assert mx.fast.metal_kernel.metal_emulation == "cpu"
        k = mx.fast.metal_kernel("n", ["x"], ["o"], "o[0] = x[0];", "", False)
        assert isinstance(k, surface.MetalKernel) and not k.ensure_row_contiguous
    finally:
        restore()
    assert mx.fast.metal_kernel is original
    with pytest.raises(ValueError, match="unknown Metal emulation engine"):
        surface.install("nope")


# -- errors in the kernel author's own lines ---------------------------------------------------------------------------
KERNEL_FILE = '''from ksearch.metalemu.surface import metal_kernel

HEADER = """
inline float twice(float v) { return 2.0f * v; }
"""

SOURCE = """
    uint i = thread_position_in_grid.x;
    threadgroup_barrier(mem_flags::mem_threadgroup);  // line 3
    out[i] = twice(x[i]);
"""

k = metal_kernel(name="mine", input_names=["x"], output_names=["out"], source=SOURCE, header=HEADER, engine="raise")
built = metal_kernel(name="built", input_names=["x"], output_names=["out"], engine="raise",
                     source=SOURCE.replace("x[i]", "x[i] + 1.0f"))
'''


def _raise_at(monkeypatch: pytest.MonkeyPatch, needle: str) -> None:
    """An engine that fails as the real one does: at the translation unit's line holding `needle`, naming the line
    of the kernel's last statement too, quoting its own line."""
    def engine(source: str, kernel_name: str, *_args: Any, **_kw: Any) -> None:
        lines = source.splitlines()
        at = next(i + 1 for i, ln in enumerate(lines) if needle in ln)
        last = next(i + 1 for i, ln in enumerate(lines) if "out[i] = twice" in ln)
        raise MetalEmuError(f"{kernel_name}: line {at}: stuck; the others wait at line {last} "
                            f"[{lines[at - 1].strip()}] (threadgroup (0, 0, 0), thread (0, 0, 0) in it)",
                            kernel=kernel_name, line=at, kind="barrier_divergence")

    monkeypatch.setitem(surface.ENGINES, "raise", lambda: engine)


@pytest.mark.parametrize("kernel,needle,place,other,body_line", [
    ("mine", "threadgroup_barrier", "at line 9 of kernels.py (line 3 of its source=)", "line 10", 3),
    ("mine", "inline float twice", "at line 4 of kernels.py (line 2 of its header=)", "line 10", None),
    ("mine", "[[kernel]]", "at line 3 of the source MLX generates around source= (verbose=True prints it)", "line 10",
     None),
    ("built", "threadgroup_barrier", "at line 3 of its source=", "line 4 of its source=", 3),
], ids=["body", "header", "generated signature", "source built at run time"])
def test_engine_errors_name_the_kernel_and_the_authors_lines(kernel: str, needle: str, place: str, other: str,
                                                            body_line: int | None, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Any) -> None:
    import runpy

    _raise_at(monkeypatch, needle)
    path = tmp_path / "kernels.py"
    path.write_text(KERNEL_FILE)
    k = runpy.run_path(str(path))["k" if kernel == "mine" else kernel]
    with pytest.raises(MetalEmuError) as e:
        k(inputs=[mx.ones(4)], output_shapes=[(4,)], output_dtypes=[mx.float32], grid=(4, 1, 1),
          threadgroup=(4, 1, 1))
    msg = str(e.value)
    # The other line it names is counted the same way; the name MLX generates is not the author's.
    assert msg.startswith(f"metal_kernel {kernel!r} {place}: stuck; the others wait at {other} ["), msg
    assert "custom_kernel_" not in msg.split(" [")[0]
    if needle == "threadgroup_barrier":
        assert "// line 3] (threadgroup" in msg  # the quoted source line stays as written
    assert e.value.body_line == body_line and e.value.kind == "barrier_divergence"


@pytest.mark.parametrize("dtype,words", [(mx.float64, "Metal has no 64-bit floating point"),
                                         (mx.complex64, "not emulated: complex64")])
def test_dtypes_it_does_not_run_are_compile_errors_naming_the_buffer(dtype: Any, words: str,
                                                                      recorder: Recorder) -> None:
    k = metal_kernel(name="cast", input_names=["x"], output_names=["out"], source="out[0] = x[0];", engine="record")
    for inputs, out, which in (([mx.ones(4, dtype=dtype)], mx.float32, "input `x`"),
                               ([mx.ones(4)], dtype, "output `out`")):
        with pytest.raises(MetalEmuError) as e:
            k(inputs=inputs, output_shapes=[(4,)], output_dtypes=[out], grid=(4, 1, 1), threadgroup=(4, 1, 1))
        assert e.value.status == "compile_error"
        assert str(e.value).startswith(f"metal_kernel 'cast': {which} is ") and words in str(e.value)
    assert recorder.calls == []
