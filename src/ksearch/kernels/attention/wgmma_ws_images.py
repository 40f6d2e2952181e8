"""Tile images of K and V for the bulk-copy prefill (`_bulk`, and wherever no tensor map can be made): each 8-row block
of K / V stored as its D / 8 core matrices, so that a tile of BN rows is BN x D contiguous elements, the shared-memory
image one bulk copy moves (wgmma_ws.py runs it; the tensor-copy kernels need no image)."""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any

from ksearch.kernels.kernel_text import cuda_kernel

# Tile images of K and V in one launch: thread j writes 16-byte chunk j of the image (core matrix j / 8, row j % 8 of
# it), so a warp writes 512 contiguous bytes and reads 8 rows x 64 contiguous bytes: whole 32-byte sectors both ways.
# (MLX's own transpose copy of one array ran at 1.8-1.9 TB/s of traffic on the H200, and took two launches.)
IMAGE_SOURCE = r"""
    constexpr int CPR = D / 8;  // 16-byte chunks a row
    const size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t n = (size_t)k_shape[0] * k_shape[1] * k_shape[2] * CPR;
    if (j >= n) return;
    const size_t rest = j >> 3, c = rest % CPR, src = ((rest / CPR) * 8 + (j & 7)) * CPR + c;
    reinterpret_cast<uint4*>(ki)[j] = reinterpret_cast<const uint4*>(k)[src];
    reinterpret_cast<uint4*>(vi)[j] = reinterpret_cast<const uint4*>(v)[src];
"""


IMAGE_THREADS = 256  # a block of the image kernel: one 16-byte chunk a thread


@cache
def _image_kernel(d: int) -> Any:
    # D as a constant in the text, one kernel a head dim: MLX would format a template argument into every call
    return cuda_kernel(name="ks_tile_image", input_names=["k", "v"], output_names=["ki", "vi"],
                       source=IMAGE_SOURCE, constants=(("D", d),))


def tile_images(k: Any, v: Any) -> tuple[Any, Any]:
    """K and V (B, H, S, D), S a multiple of 8, -> arrays of the same shape with each 8-row block stored as its D / 8
    core matrices (8 rows x 16 bytes each, ks_core's order): a tile of BN rows is then BN * D contiguous elements,
    the shared-memory image that ks_load_core builds, for one bulk copy. `tile_image` is the same in MLX ops."""
    kern, kwargs = _image_launch(tuple(k.shape), k.dtype)
    ki, vi = kern(inputs=[k, v], **kwargs)
    return ki, vi


@lru_cache(maxsize=1024)
def _image_launch(shape: tuple[int, ...], dtype: Any) -> tuple[Any, dict[str, Any]]:
    """The image kernel and its launch for K / V of one shape (a chunk of 16 bytes a thread), made once per shape."""
    n = shape[0] * shape[1] * shape[2] * shape[3] // 8
    return _image_kernel(shape[-1]), {"grid": (n, 1, 1), "threadgroup": (IMAGE_THREADS, 1, 1),
                                      "output_shapes": [shape, shape], "output_dtypes": [dtype, dtype]}


def tile_image(x: Any) -> Any:
    """The reference for tile_images, in MLX ops (one transpose copy); runs on any backend."""
    b, h, s, d = x.shape
    return x.reshape(b, h, s // 8, 8, d // 8, 8).transpose(0, 1, 2, 4, 3, 5).reshape(b, h, s, d)
