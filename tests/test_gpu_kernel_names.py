"""GPU checks that a CUDA kernel runs its own text (marker `gpu`: skipped in CI, run on an NVIDIA GPU with mlx-cuda).

MLX's CUDA backend before 0.32.1 kept a process's compiled custom kernels by name alone; this package admits MLX from
0.29. The library names its kernels with a digest of their text (`kernel_text.cuda_kernel`), and the Metal emulation's
CUDA engine its translations (one text per dtype combination): a second text under a name already compiled, and a
second dtype of one Metal kernel, each run what they say, whatever MLX is installed.
"""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

pytestmark = pytest.mark.gpu

if not (hasattr(mx, "cuda") and mx.cuda.is_available()):
    pytest.skip("no CUDA GPU for MLX here", allow_module_level=True)


def test_two_texts_under_one_name_in_one_process() -> None:
    from ksearch.kernels.kernel_text import cuda_kernel

    def run(addend: float) -> float:
        kernel = cuda_kernel(name="ks_name_probe_inproc", input_names=["x"], output_names=["o"],
                             source=f"o[threadIdx.x] = x[threadIdx.x] + {addend}f;")
        o, = kernel(inputs=[mx.zeros((32,))], output_shapes=[(32,)], output_dtypes=[mx.float32], grid=(32, 1, 1),
                    threadgroup=(32, 1, 1))
        return float(o[0].item())

    assert run(3.0) == 3.0 and run(4.0) == 4.0


def test_one_metal_kernel_on_two_dtypes_through_the_cuda_engine() -> None:
    # No template: the Metal kernel takes its types from its inputs, as MLX's Metal backend makes them; the CUDA engine
    # writes one text per dtype, so the second dtype must not run the first's kernel.
    from ksearch.metalemu.cuda_kernel import metal_kernel_via_cuda

    kernel = metal_kernel_via_cuda("ks_two_dtypes", ["x"], ["o"],
                                   "uint i = thread_position_in_grid.x; o[i] = x[i] * 2;")
    for dtype in (mx.float32, mx.float16, mx.int32):
        x = mx.arange(64).astype(dtype)
        o, = kernel(inputs=[x], output_shapes=[(64,)], output_dtypes=[dtype], grid=(64, 1, 1),
                    threadgroup=(32, 1, 1))
        assert mx.array_equal(o, x * 2).item(), dtype


def test_mlx_itself_keys_a_custom_kernel_by_name_and_text() -> None:
    # What the docs say of MLX: from 0.32.1 its CUDA backend keeps a custom kernel by name and text, so a raw
    # `mx.fast.cuda_kernel` under one name with two texts runs each; before, the second ran the first's kernel.
    version = tuple(int(p) for p in mx.__version__.split(".")[:3] if p.isdigit())
    if version < (0, 32, 1):
        pytest.skip(f"MLX {mx.__version__} keeps custom kernels by name alone; the library's digest covers it")

    def run(addend: float) -> float:
        kernel = mx.fast.cuda_kernel(name="ks_raw_name_probe", input_names=["x"], output_names=["o"],
                                     source=f"o[threadIdx.x] = x[threadIdx.x] + {addend}f;")
        o, = kernel(inputs=[mx.zeros((32,))], output_shapes=[(32,)], output_dtypes=[mx.float32], grid=(32, 1, 1),
                    threadgroup=(32, 1, 1))
        return float(o[0].item())

    assert run(5.0) == 5.0 and run(6.0) == 6.0
