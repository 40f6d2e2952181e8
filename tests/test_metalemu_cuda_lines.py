"""The CUDA engine's compile errors in the user's own numbering, as the CPU engine's: led by the Metal kernel's name,
at the line of the file that created it (and the line of its source= or header=), never at a line of the generated
CUDA text or under the name the engine compiles it by. Translation errors need no compiler; NVRTC's run on the CPU."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from ksearch.backends.nvrtc import find_nvrtc
from ksearch.errors import MetalEmuError
from ksearch.metalemu.cuda_check import check
from ksearch.metalemu.cuda_kernel import Arg, MetalKernelViaCuda

KERNEL_FILE = '''from ksearch.metalemu.cuda_kernel import metal_kernel_via_cuda

HEADER = """
inline float twice(float v) { return HEADER_LINE_2; }
"""

SOURCE = """
uint i = thread_position_in_grid.x;
SOURCE_LINE_3;
out[i] = twice(x[i]);
"""

k = metal_kernel_via_cuda("mine", ["x"], ["out"], SOURCE, HEADER)
built = metal_kernel_via_cuda("built", ["x"], ["out"], "\\n".join(["", "uint i = 0;", "SOURCE_LINE_3;"]), HEADER)
'''
needs_nvrtc = pytest.mark.skipif(find_nvrtc() is None, reason="LOUD SKIP: NVRTC not installed (the dev extra's "
                                 "nvidia-cuda-nvrtc): NVRTC's errors are not checked")


def _load(tmp_path: Path, header: str = "v * 2.0f", body: str = "out[i] = 0.0f") -> dict[str, Any]:
    path = tmp_path / "kernels.py"
    path.write_text(KERNEL_FILE.replace("HEADER_LINE_2", header).replace("SOURCE_LINE_3", body))
    return runpy.run_path(str(path))


def _error(tmp_path: Path, **lines: str) -> MetalEmuError:
    with pytest.raises(MetalEmuError) as e:
        _load(tmp_path, **lines)
    return e.value


def test_translation_error_in_the_body_names_the_kernel_and_the_files_line(tmp_path: Path) -> None:
    e = _error(tmp_path, body="__syncthreads()")
    assert str(e).startswith("metal_kernel 'mine' at line 9 of kernels.py (line 3 of its source=): "), str(e)
    assert "__syncthreads" in str(e) and "compile error in Metal kernel" not in str(e)
    assert (e.status, e.kernel, e.line, e.body_line) == ("compile_error", "mine", 3, 3)


def test_translation_error_in_the_header_names_the_files_line(tmp_path: Path) -> None:
    e = _error(tmp_path, header="printf(v)")
    assert str(e).startswith("metal_kernel 'mine' at line 4 of kernels.py (line 2 of its header=): "), str(e)
    assert "printf" in str(e) and (e.line, e.body_line) == (2, None)


def test_a_source_built_at_run_time_is_counted_in_its_source(tmp_path: Path) -> None:
    good = _load(tmp_path)["k"].translation
    with pytest.raises(MetalEmuError) as e:
        type(good)("built", ["x"], ["out"], "\n".join(["", "uint i = 0;", "double d = 1;"]))
    assert str(e.value).startswith("metal_kernel 'built' at line 3 of its source=: "), str(e.value)


def test_a_dtype_without_an_msl_type_names_the_kernel(tmp_path: Path) -> None:
    kernel: MetalKernelViaCuda = _load(tmp_path)["k"]
    with pytest.raises(MetalEmuError) as e:
        kernel.translation.cuda_source([Arg("x", "complex64", 1)], ["float32"])
    assert str(e.value).startswith("metal_kernel 'mine': arrays of complex64 are not supported"), str(e.value)


@needs_nvrtc
@pytest.mark.parametrize(("lines", "place"), [
    ({"body": "float b = undefined_name"}, "line 9 of kernels.py (line 3 of its source=)"),
    ({"header": "undefined_name"}, "line 4 of kernels.py (line 2 of its header=)"),
], ids=["body", "header"])
def test_nvrtc_errors_name_the_kernel_and_the_files_line(tmp_path: Path, lines: dict[str, str], place: str) -> None:
    tr = _load(tmp_path, **lines)["k"].translation
    diags = check(tr.cuda_source([Arg("x", "float32", 1)], ["float32"]), ["float32"], ["float32"], use_nvrtc=True)
    assert diags, "the kernel should not compile"
    text = str(diags[0])
    assert text.startswith(f"metal_kernel 'mine' at {place}: ") and "undefined_name" in text, text
    assert ".metal" not in text and "custom_kernel" not in text


def test_the_installed_factory_names_the_callers_file(tmp_path: Path) -> None:
    from ksearch.metalemu.surface import install

    path = tmp_path / "candidate.py"
    path.write_text('import mlx.core as mx\n\nk = mx.fast.metal_kernel(name="cand", input_names=["x"], '
                    'output_names=["out"], source="""\nout[0] = x[0];\nfloat t = threadIdx.x;\n""")\n')
    restore = install("cuda")
    try:
        with pytest.raises(MetalEmuError) as e:
            runpy.run_path(str(path))
    finally:
        restore()
    assert str(e.value).startswith("metal_kernel 'cand' at line 5 of candidate.py (line 3 of its source=): "), e.value
