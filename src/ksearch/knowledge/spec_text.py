"""Fixed text of the spec: how each MLX dialect wraps and launches a kernel, and the pitfalls that bite most.

Facts from shared/reference/mlx-custom-kernels.md (MLX 0.32, checked on an H200) and msl-checking.md.
"""

from __future__ import annotations

API = {
    "mlx-cuda": """\
Build the kernel ONCE at import, call it in `run`:

```python
_kernel = mx.fast.cuda_kernel(name="k", input_names=["x"], output_names=["out"], source=BODY,
                              header="", ensure_row_contiguous=True, shared_memory=0)
out, = _kernel(inputs=[x], grid=(threads_x, threads_y, threads_z), threadgroup=(tx, ty, tz),
               template=[("T", x.dtype), ("BLOCK", 256), ("CAUSAL", True)],
               output_shapes=[x.shape], output_dtypes=[x.dtype], init_value=None)
```

What MLX generates around `source` (the BODY only; no `__global__`, no signature):

```cuda
#include <cuda_fp16.h> / <cuda_bf16.h> / <cooperative_groups.h>   // plus MLX device utils
#define inf cuda::std::numeric_limits<float>::infinity()
<header>
namespace mlx::core::cu {
namespace cg = cooperative_groups;
__global__ void custom_kernel_k(const T_x* x, const __grid_constant__ Shape x_shape, T_out* out) {
  using T = __half;            // each template arg: dtype -> using, int -> constexpr int, bool -> constexpr bool
  constexpr int BLOCK = 256;
  constexpr bool CAUSAL = true;
  <source>
}
}
```

- Inputs are `const T*` (float16 -> `__half`, bfloat16 -> `__nv_bfloat16`, float32 -> `float`); 0-d inputs are pointers too
  (read `n[0]`). `x_shape` (`cuda::std::array<int32_t, 10>`), `x_strides` (int64), `x_ndim` are passed only for inputs
  whose names appear with that suffix in the body. Outputs are `T*`, row-contiguous, UNINITIALISED unless `init_value`.
- `grid` counts THREADS. MLX launches `ceil(grid / threadgroup)` blocks of `min(threadgroup, grid)` threads, so the
  last block's extra threads run: ALWAYS bounds-check. One block per row: `grid=(rows * T, 1, 1), threadgroup=(T, 1, 1)`.
- No `thread_position_in_grid`: use `blockIdx.x * blockDim.x + threadIdx.x` or `cg::this_grid().thread_rank()`.
  `WARP_SIZE` is 32.
- Dynamic shared memory: `extern __shared__ float smem[];` plus `shared_memory=<bytes>` (MLX raises the limit above
  48,000 bytes; up to 227 KB on Hopper). Static `__shared__` arrays must stay within 48 KB.
- Compiled by NVRTC for the device's arch (sm_90a on H100/H200), no fast-math flag. Works: inline PTX (`mma.sync`,
  `ldmatrix`, `cp.async`, `wgmma` with 128-thread warpgroups). Fails: `#include <cub/...>`, `<mma.h>` (wmma), `cute/`.
- Each new source or template value JIT-compiles (~1.7 s): keep template values few. A call costs ~8 us chained,
  ~27 us with `mx.eval`: launch-bound workloads must fuse.
- An illegal instruction or fault poisons the process's CUDA context (the harness isolates candidates).
""",
    "mlx-metal": """\
Build the kernel ONCE at import, call it in `run`:

```python
_kernel = mx.fast.metal_kernel(name="k", input_names=["x"], output_names=["out"], source=BODY,
                               header="", ensure_row_contiguous=True, atomic_outputs=False)
out, = _kernel(inputs=[x], grid=(threads_x, threads_y, threads_z), threadgroup=(tx, ty, tz),
               template=[("T", x.dtype), ("BLOCK", 256)], output_shapes=[x.shape], output_dtypes=[x.dtype])
```

What MLX generates around `source` (the BODY only):

```metal
template <typename T, int BLOCK>
[[kernel]] void custom_kernel_k(
  const device float16_t* x [[buffer(0)]],        // < 8 elements: const constant T*; 0-d: const constant T&
  const constant int* x_shape [[buffer(1)]],      // only if the body mentions x_shape (x_strides, x_ndim alike)
  device float16_t* out [[buffer(2)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {   // every attribute NAMED in the body
  <source>
}
```

- Attributes become parameters when their name appears anywhere in the body (substring test, comments included):
  `thread_position_in_grid`, `thread_position_in_threadgroup`, `threadgroup_position_in_grid`, `threads_per_threadgroup`
  (uint3); `thread_index_in_simdgroup`, `simdgroup_index_in_threadgroup`, `threads_per_simdgroup` (uint). Use `.x` on
  the uint3 ones. Never mention both `threads_per_simdgroup` and `thread_execution_width`.
- `grid` counts THREADS (`dispatchThreads`); the last threadgroup may be partial, so guard with `if (i >= n) return;`
  when no barrier follows. One threadgroup per row: `grid=(rows * T, 1, 1), threadgroup=(T, 1, 1)`.
- Threadgroup memory: `threadgroup float buf[N];` inside the body, N a compile-time constant (template int); no dynamic
  threadgroup memory; 32 KB per threadgroup on Apple GPUs.
- Helpers, structs and constant tables go in `header=`; `#include <metal_stdlib>` names (metal::, simd_*) are available.
- Math: `metal::exp`, `metal::fast::exp2`, `metal::max(a, b)` with both operands the same type; no double.
  `compile_options={"math_mode": "fast"}` enables fast math (default "safe" keeps exp(-inf) == 0).
- Outputs are uninitialised unless `init_value`; `atomic_outputs=True` declares them `device atomic<T>*`.
""",
    "mlx-cpu": """\
MLX has NO custom kernels on the CPU backend (`mx.fast.metal_kernel` / `cuda_kernel` raise there). A candidate is MLX
ops only:

- `mx.compile` fuses chains of elementwise ops into one loop (fewer passes, no temporaries); keep shapes stable.
- Reduce passes algebraically (one reduction for mean of squares; fold per-row factors before broadcasting).
- Avoid materialising repeats/broadcasts (reshape query heads into groups instead of repeating K/V).
- Long recurrences: chunk them (cumsum/cumprod within a chunk, carry the state), not one op per token.
- Long attention: process query blocks so the score block stays cache-sized.
- Evaluation is lazy: the harness evaluates outputs; do not call `mx.eval` inside hot loops.
""",
}

PITFALLS = {
    "mlx-cuda": [
        "grid counts threads: a CUDA-style grid of num_blocks launches num_blocks / threadgroup blocks",
        "missing bounds check: the last block's extra threads read and write out of range",
        "`return` before `__syncthreads()`: threads that left never arrive (hang or garbage)",
        "outputs are uninitialised: write every element or pass init_value",
        "fp16 accumulation loses digits: accumulate in float, cast once on store",
        "`#include <cub/...>` / `<mma.h>` do not compile under MLX's NVRTC: hand-write scans, use inline PTX mma.sync",
        "wgmma with fewer than 128 threads is an illegal instruction that poisons the CUDA context",
        "a new template value per call shape recompiles (~1.7 s each): bucket the values",
        "MLX runs fp32 matmuls as TF32 on CUDA by default; tasks compare against an fp32 reference",
    ],
    "mlx-metal": [
        "CUDA spellings (__syncthreads, threadIdx, __shfl_xor_sync, atomicAdd, expf) do not exist in MSL",
        "simd_sum reduces one SIMD-group (32 lanes), not the threadgroup",
        "threadgroup memory is 32 KB per threadgroup: tiles sized for NVIDIA must shrink",
        "thread_position_in_grid is a uint3 in MLX bodies: use .x",
        "implicit vector conversions are errors (float4 f = half4_v): convert explicitly",
        "max(x, 0) with float x is ambiguous: write max(x, 0.0f)",
        "no double on Apple GPUs; bfloat arithmetic is emulated on M1/M2",
        "a barrier inside divergent control flow or after an early return hangs or corrupts",
    ],
    "mlx-cpu": [
        "custom kernels do not run on the CPU backend",
        "per-token Python loops of MLX ops build huge graphs: chunk the recurrence",
        "forbidden APIs are detected through aliases and getattr strings too",
    ],
}

# Representative profiles when the backend is not present on this machine (the spec is documentation).
REPRESENTATIVE = {"mlx-cuda": "nvidia-h200", "mlx-metal": "apple-m3-max"}

# Concept rows always shown for a GPU dialect, whatever the patterns name.
CORE_CONCEPTS = ["kernel_launch", "grid_semantics", "bounds_check", "template_kernels", "shared_memory",
                 "syncthreads", "global_thread_id", "lane_and_warp_id", "warp_reduce", "warp_shuffle_xor",
                 "fp32_accumulation", "init_value"]
