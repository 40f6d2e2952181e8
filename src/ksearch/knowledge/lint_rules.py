"""The linter's fast rules: tokens that belong to the other dialect, with the form to use instead.

Each rule is (regex, code, message, concept id). Regexes run on kernel bodies with comments removed. The concept id
points at the row of data/concepts.yaml that explains the mapping, so a message can be followed up in the spec.
"""

from __future__ import annotations

import re

Rule = tuple[re.Pattern[str], str, str, str]


def _r(pattern: str, code: str, message: str, concept: str) -> Rule:
    return re.compile(pattern), code, message, concept


# CUDA-isms that do not exist in MSL (errors in Metal bodies).
CUDA_IN_METAL: list[Rule] = [
    _r(r"\b__syncthreads\s*\(", "cuda-in-metal", "__syncthreads() -> threadgroup_barrier(mem_flags::mem_threadgroup)",
       "syncthreads"),
    _r(r"\b__syncwarp\s*\(", "cuda-in-metal", "__syncwarp() -> simdgroup_barrier(mem_flags::mem_none)", "syncwarp"),
    _r(r"\bextern\s+__shared__\b", "cuda-in-metal",
       "dynamic shared memory does not exist in mx.fast.metal_kernel: size a `threadgroup T buf[N]` with a template int",
       "dynamic_shared_memory"),
    _r(r"\b__shared__\b", "cuda-in-metal", "__shared__ -> `threadgroup T buf[N];` inside the body", "shared_memory"),
    _r(r"\bthreadIdx\b", "cuda-in-metal", "threadIdx -> thread_position_in_threadgroup (uint3)", "thread_index"),
    _r(r"\bblockIdx\b", "cuda-in-metal", "blockIdx -> threadgroup_position_in_grid (uint3)", "block_index"),
    _r(r"\bblockDim\b", "cuda-in-metal", "blockDim -> threads_per_threadgroup (uint3)", "block_dim"),
    _r(r"\bgridDim\b", "cuda-in-metal", "gridDim -> threadgroups_per_grid (uint3)", "block_dim"),
    _r(r"\bwarpSize\b", "cuda-in-metal", "warpSize -> threads_per_simdgroup", "lane_and_warp_id"),
    _r(r"\b__shfl_xor_sync\s*\(", "cuda-in-metal", "__shfl_xor_sync(mask, v, m) -> simd_shuffle_xor(v, m) (no mask)",
       "warp_shuffle_xor"),
    _r(r"\b__shfl_(down|up)_sync\s*\(", "cuda-in-metal",
       "__shfl_down/up_sync(mask, v, d) -> simd_shuffle_down/up(v, d) (no mask, no width)", "warp_shuffle_down_up"),
    _r(r"\b__shfl_sync\s*\(", "cuda-in-metal", "__shfl_sync(mask, v, lane) -> simd_shuffle(v, lane)", "warp_shuffle"),
    _r(r"\b__(ballot|any|all)_sync\s*\(|\b__activemask\s*\(", "cuda-in-metal",
       "warp votes -> simd_ballot / simd_any / simd_all / simd_active_threads_mask", "warp_vote"),
    _r(r"\b__reduce_(add|min|max)_sync\s*\(", "cuda-in-metal", "__reduce_*_sync -> simd_sum / simd_min / simd_max",
       "warp_reduce"),
    _r(r"\batomic(Add|Sub|CAS|Max|Min|Exch|Inc|Dec|And|Or|Xor)\s*\(", "cuda-in-metal",
       "atomicX(...) -> atomic_fetch_x_explicit((device atomic<T>*)p, v, memory_order_relaxed); "
       "MLX: atomic_outputs=True", "atomic_add"),
    _r(r"\b__threadfence(_block|_system)?\s*\(", "cuda-in-metal",
       "__threadfence -> threadgroup_barrier(mem_flags::mem_device) or atomic_thread_fence (Metal 3.2)",
       "threadfence"),
    _r(r"\b__ldg\s*\(", "cuda-in-metal", "__ldg(p) -> a plain load from `const device T*`", "ldg"),
    _r(r"\b__(expf|logf|powf|sinf|cosf|fdividef|exp10f)\s*\(", "cuda-in-metal",
       "CUDA fast intrinsics -> metal::fast::exp / log / pow / divide", "fast_exp"),
    _r(r"\b(expf|exp2f|logf|log2f|sqrtf|rsqrtf|fmaxf|fminf|tanhf|powf|fabsf|log1pf|erff|floorf|ceilf)\s*\(",
       "cuda-in-metal", "C float functions (expf, sqrtf, fmaxf...) -> metal::exp, metal::sqrt, metal::max...",
       "fast_math_intrinsics"),
    _r(r"\b__(int_as_float|float_as_int|float_as_uint|uint_as_float)\s*\(", "cuda-in-metal",
       "__int_as_float(i) -> as_type<float>(i)", "type_punning"),
    _r(r"\b__(float2half|half2float|float2bfloat16|bfloat162float|halves2half2)\w*\s*\(", "cuda-in-metal",
       "CUDA half conversions -> half(f), float(h), bfloat(f)", "half_types"),
    _r(r"\bmake_(float|int|uint|half)[234]\s*\(", "cuda-in-metal", "make_float4(a,b,c,d) -> float4(a,b,c,d)",
       "vectorized_loads"),
    _r(r"\b(__global__|__device__|__forceinline__|__host__)\b", "cuda-in-metal",
       "CUDA function qualifiers do not exist in MSL; MLX writes the kernel signature, helpers go in header=",
       "kernel_launch"),
    _r(r"\bcooperative_groups\b|\bcg::", "cuda-in-metal",
       "cooperative groups do not exist in Metal; there is no grid-wide sync", "cooperative_groups"),
    _r(r"\basm\s*(volatile\s*)?\(", "cuda-in-metal",
       "inline PTX has no Metal equivalent (Apple blocks asm in JIT): use simdgroup_matrix / simd_* functions",
       "mma_sync"),
    _r(r"\b(wmma|nvcuda)::", "cuda-in-metal", "wmma -> simdgroup_matrix<T,8,8> + simdgroup_multiply_accumulate",
       "wmma"),
    _r(r"#\s*include\s*<(cuda|cub|mma|cooperative_groups|thrust)", "cuda-in-metal",
       "CUDA headers are not available in MSL: #include <metal_stdlib> only", "kernel_launch"),
    _r(r"\bdouble\b", "no-double", "Metal GPUs have no double: use float (or a float pair)", "double_precision"),
    _r(r"\bprintf\s*\(", "cuda-in-metal", "printf does not exist in MSL kernels (os_log needs Metal 3.2)", "printf"),
]

# Metal-isms that do not exist in CUDA (errors in MLX-CUDA bodies).
METAL_IN_CUDA: list[Rule] = [
    _r(r"\bthreadgroup_barrier\s*\(", "metal-in-cuda", "threadgroup_barrier(...) -> __syncthreads()", "syncthreads"),
    _r(r"\bsimdgroup_barrier\s*\(", "metal-in-cuda", "simdgroup_barrier(...) -> __syncwarp()", "syncwarp"),
    _r(r"\bsimd_(sum|max|min|product|and|or|xor)\s*\(", "metal-in-cuda",
       "simd_sum/max/min -> a __shfl_xor_sync butterfly (or cg::reduce over a tiled_partition<32>)", "warp_reduce"),
    _r(r"\bsimd_shuffle(_xor|_down|_up|_rotate_down|_rotate_up|_and_fill_up|_and_fill_down)?\s*\(|\bsimd_broadcast",
       "metal-in-cuda", "simd_shuffle*(v, x) -> __shfl*_sync(0xffffffff, v, x)", "warp_shuffle"),
    _r(r"\bsimd_prefix_(in|ex)clusive_(sum|product)\s*\(", "metal-in-cuda",
       "simd_prefix_*_sum -> a __shfl_up_sync Hillis-Steele loop over the warp", "warp_scan"),
    _r(r"\bsimd_(ballot|all|any|active_threads_mask|is_first)\s*\(", "metal-in-cuda",
       "simd votes -> __ballot_sync / __all_sync / __any_sync / __activemask", "warp_vote"),
    _r(r"\b(thread_position_in_grid|thread_position_in_threadgroup|threadgroup_position_in_grid|"
       r"threads_per_threadgroup|threadgroups_per_grid|thread_index_in_simdgroup|simdgroup_index_in_threadgroup|"
       r"thread_index_in_threadgroup|threads_per_simdgroup|thread_execution_width|threads_per_grid)\b",
       "metal-in-cuda", "Metal attributes are not parameters of an MLX-CUDA kernel: use threadIdx/blockIdx/blockDim "
       "(or cg::this_grid().thread_rank())", "global_thread_id"),
    _r(r"\bthreadgroup\s+(?!_)[A-Za-z_][\w:<>, ]*[\s*&]+\w+\s*[\[;=]", "metal-in-cuda",
       "`threadgroup T buf[N]` -> `__shared__ T buf[N]`", "shared_memory"),
    _r(r"\b(const\s+)?(device|constant)\s+[A-Za-z_][\w:<>]*\s*[*&]", "metal-in-cuda",
       "address-space qualifiers (device/constant) do not exist in CUDA: use plain `T*` / `const T*`",
       "unified_memory"),
    _r(r"\bmetal::|\bmem_flags::|\bmemory_order_relaxed\b", "metal-in-cuda",
       "the metal:: namespace does not exist in CUDA: expf/__expf, fmaxf, rsqrtf, __syncthreads", "fast_exp"),
    _r(r"\bsimdgroup_(matrix|load|store|multiply|multiply_accumulate)\b|\bsimdgroup_(float|half)8x8\b",
       "metal-in-cuda", "simdgroup_matrix -> mma.sync through inline PTX (wmma's <mma.h> is not on NVRTC's path)",
       "mma_sync"),
    _r(r"\bas_type\s*<", "metal-in-cuda", "as_type<float>(i) -> __int_as_float(i) / __uint_as_float", "type_punning"),
    _r(r"\batomic_fetch_\w+_explicit\s*\(", "metal-in-cuda", "atomic_fetch_add_explicit -> atomicAdd",
       "atomic_add"),
    _r(r"\[\[\s*(kernel|buffer|host_name)\b", "metal-in-cuda", "Metal attributes do not exist in CUDA", "kernel_launch"),
    _r(r"#\s*include\s*<(cub/|mma\.h|cute/)", "cuda-include",
       "this header is not on NVRTC's include path in MLX-CUDA (cub, wmma's mma.h, cute fail): write warp shuffles / "
       "inline PTX mma.sync by hand", "library_calls"),
    # A signature, not the `#define __global__` that gives MLX's generated signature launch bounds
    _r(r"\b__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\b", "cuda-signature",
       "MLX writes the __global__ signature itself: give only the body in source= (helpers: __device__ in header=)",
       "kernel_launch"),
    _r(r"\bthis_grid\s*\(\s*\)\s*\.\s*sync\s*\(|\bgrid\.sync\s*\(", "grid-sync",
       "grid-wide sync needs a cooperative launch, which MLX does not do: split into two kernels", "grid_sync"),
]

# Warnings shared by both dialects.
COMMON_WARNINGS: list[Rule] = [
    _r(r"\bprintf\s*\(", "printf", "printf in a kernel slows it down and floods logs; remove it before timing",
       "printf"),
]

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def strip_comments(text: str) -> str:
    """Comments replaced by spaces (newlines kept, so line numbers survive)."""
    return _COMMENTS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1
