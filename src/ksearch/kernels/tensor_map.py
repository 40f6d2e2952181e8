"""Tensor maps (TMA descriptors) encoded on the host, for kernels launched through `mx.fast.cuda_kernel`.

A Hopper tensor copy (`cp.async.bulk.tensor`) reads a 128-byte tensor map that the driver encodes
(`cuTensorMapEncodeTiled`) from the array's global address, dimensions, strides and the box one copy moves. MLX
neither encodes one nor tells Python an array's device address, so the map is encoded here with a placeholder
address and handed to the kernel as a 16-element uint64 input; the kernel sets the real address with
`tensormap.replace`, publishes the map to global memory and fences it before its first copy (see `TMA_HEADER`).
The map depends only on the shape, so it is encoded once per shape and kept.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import cache
from typing import Any

from ksearch.errors import BackendUnavailable

UINT16 = 1  # CU_TENSOR_MAP_DATA_TYPE_UINT16: a copy moves bytes, fp16 and bf16 alike
L2_PROMOTION_128B = 2  # CU_TENSOR_MAP_L2_PROMOTION_L2_128B

# Device helpers for kernels that take such a map (input `tmap`) and a scratch output for the maps they publish.
TMA_HEADER = r"""
#ifndef KS_TMA_HEADER
#define KS_TMA_HEADER
// The map's global address set in a copy of it in shared memory (one thread).
__device__ __forceinline__ void ks_tmap_address(unsigned long long* smap, const void* g) {
  asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n"
               :: "r"((unsigned)__cvta_generic_to_shared(smap)), "l"(g) : "memory");
}
// Shared -> global (128-byte aligned), with the release fence of the tensormap proxy; every lane of the warp.
__device__ __forceinline__ void ks_tmap_publish(unsigned long long* gmap, unsigned long long* smap) {
  asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned"
               " [%0], [%1], 128;\n"
               :: "l"(gmap), "r"((unsigned)__cvta_generic_to_shared(smap)) : "memory");
}
// Before the first copy through a published map.
__device__ __forceinline__ void ks_tmap_acquire(const unsigned long long* gmap) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" :: "l"(gmap) : "memory");
}
__device__ __forceinline__ void ks_mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
               :: "r"((unsigned)__cvta_generic_to_shared(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void ks_tma_load3(unsigned smem, const void* map, int c0, int c1, int c2,
                                             unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];\n"
               :: "r"(smem), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"((unsigned)__cvta_generic_to_shared(bar))
               : "memory");
}
__device__ __forceinline__ void ks_tma_load4(unsigned smem, const void* map, int c0, int c1, int c2, int c3,
                                             unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               :: "r"(smem), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                  "r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
}
#endif
"""


@cache
def _encode_fn() -> Any:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise BackendUnavailable(f"tensor maps need the CUDA driver (libcuda.so.1): {exc}; use a _bulk "
                                 "configuration") from exc
    fn = lib.cuTensorMapEncodeTiled
    u32, u64p, u32p = ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}  # CUtensorMapSwizzle -> its span


def check_geometry(dims: Sequence[int], strides: Sequence[int], box: Sequence[int], element_bytes: int,
                   swizzle: int = 0) -> None:
    """The driver's documented limits, checked before it is asked: a ValueError that names the one broken."""
    if swizzle not in SWIZZLE_BYTES:
        raise ValueError(f"swizzle {swizzle}: use 0 (none), 1 (32 bytes), 2 (64) or 3 (128)")
    if swizzle and box and box[0] * element_bytes > SWIZZLE_BYTES[swizzle]:
        raise ValueError(f"a swizzled box's innermost dimension may span at most {SWIZZLE_BYTES[swizzle]} bytes: "
                         f"{box}")
    if not 1 <= len(dims) <= 5 or len(box) != len(dims) or len(strides) != len(dims) - 1:
        raise ValueError(f"a tensor map takes 1-5 dimensions, a box of as many and one stride fewer: dims {dims}, "
                         f"strides {strides}, box {box}")
    if any(not 0 < d <= 2 ** 32 for d in dims):
        raise ValueError(f"tensor map dims must be in 1..2^32: {dims}")
    if any(s % 16 or not 0 < s < 2 ** 40 for s in strides):
        raise ValueError(f"tensor map strides must be positive multiples of 16 bytes below 2^40: {strides}")
    if any(not 0 < b <= 256 for b in box) or box[0] * element_bytes % 16:
        raise ValueError(f"a tensor map box takes 1..256 elements a dimension and whole 16 bytes innermost: {box}")


def encode(dims: Sequence[int], strides: Sequence[int], box: Sequence[int], swizzle: int = 0) -> bytes:
    """The 128 bytes of a 2-byte-element tile map: `dims` innermost first, `strides` in bytes (dims[1:]'s), `box`
    the elements one copy moves along each dimension, `swizzle` a CUtensorMapSwizzle (0 none, 3 128 bytes: the
    copy's shared-memory destination then 1024-byte aligned); no interleave, zeros out of bounds. The global address
    is a placeholder that the kernel replaces."""
    check_geometry(dims, strides, box, 2, swizzle)
    n = len(dims)
    out = (ctypes.c_uint64 * 16)()
    placeholder = (ctypes.c_uint64 * 4)()  # 16-byte aligned, never read: the kernel sets the real address
    code = _encode_fn()(ctypes.byref(out), UINT16, n, ctypes.addressof(placeholder),
                        (ctypes.c_uint64 * n)(*dims), (ctypes.c_uint64 * max(1, n - 1))(*strides),
                        (ctypes.c_uint32 * n)(*box), (ctypes.c_uint32 * n)(*([1] * n)), 0, swizzle,
                        L2_PROMOTION_128B, 0)
    if code != 0:
        raise BackendUnavailable(f"cuTensorMapEncodeTiled refused dims {list(dims)}, strides {list(strides)}, box "
                                 f"{list(box)} (CUresult {code}); use a _bulk configuration")
    return bytes(out)


@cache
def map_input(dims: tuple[int, ...], strides: tuple[int, ...], box: tuple[int, ...], swizzle: int = 0) -> Any:
    """`encode`'s map as the uint64 array a kernel takes (input `tmap`), made once per geometry."""
    import mlx.core as mx
    import numpy as np

    arr = mx.array(np.frombuffer(encode(dims, strides, box, swizzle), dtype=np.uint64))
    mx.eval(arr)
    return arr
