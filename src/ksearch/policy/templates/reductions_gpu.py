"""Custom-kernel template families for row reductions (softmax, rmsnorm) on mlx-cuda and mlx-metal.

One threadgroup per row (block_per_row) or one SIMD group per row (multi_row_per_block), values reduced in registers
with shuffles and then across SIMD groups through threadgroup memory, optional vector loads, optional single-pass online
softmax, optional exp2 with log2(e) folded into the scale.
"""

from __future__ import annotations

from typing import Any

from ksearch.policy.templates.base import TemplateFamily

LOG2E = "1.4426950408889634f"

# ---------------------------------------------------------------------------------------------------- CUDA pieces
_CUDA_REDUCE = """
__device__ __forceinline__ float ks_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float ks_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ void ks_warp_online(float& m, float& s) {
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, m, o);
        float os = __shfl_xor_sync(0xffffffffu, s, o);
        float mn = fmaxf(m, om);
        float a = (m == mn) ? 1.f : KS_EXP(m - mn);
        float b = (om == mn) ? 1.f : KS_EXP(om - mn);
        s = s * a + os * b;
        m = mn;
    }
}
"""


def _cuda_exp(p: dict[str, Any]) -> str:
    # With exp2 the inputs are pre-scaled by log2(e), so KS_EXP is a bare exp2.
    return "#define KS_EXP(v) exp2f(v)\n" if p["exp2"] else "#define KS_EXP(v) __expf(v)\n"


def _cuda_loop(p: dict[str, Any], body: str) -> str:
    """Iterate this thread's elements of the row: vectorised when VEC > 1 (the wrapper guarantees cols % VEC == 0)."""
    unroll = f"#pragma unroll {p['unroll']}\n" if p["unroll"] > 1 else ""
    return f"""
    {{
        const KsVec* xv = reinterpret_cast<const KsVec*>(xr);
        int nvec = cols / VEC;
        {unroll}for (int i = lane; i < nvec; i += STRIDE) {{
            KsVec pack = xv[i];
            #pragma unroll
            for (int j = 0; j < VEC; ++j) {{
                int c = i * VEC + j;
                float v = (float)pack.v[j];
                {body}
            }}
        }}
    }}"""


def _cuda_prologue(p: dict[str, Any]) -> str:
    if p["layout"] == "block_per_row":
        return """
    constexpr int NT = THREADS;
    constexpr int STRIDE = THREADS;
    int row = blockIdx.x;
    int lane = threadIdx.x;
    int rows = x_shape[0], cols = x_shape[1];
    if (row >= rows) return;
"""
    return """
    constexpr int NT = 32;
    constexpr int STRIDE = 32;
    int row = blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    int rows = x_shape[0], cols = x_shape[1];
    if (row >= rows) return;
"""


def _cuda_block_reduce(kind: str, layout: str) -> str:
    """Reduce across the warps of a block when one block owns a row; a warp-per-row layout needs nothing more."""
    if layout != "block_per_row":
        return ""
    if kind == "online":
        return """
    {
        __shared__ float sm_m[NT / 32], sm_s[NT / 32];
        if ((lane & 31) == 0) { sm_m[lane >> 5] = m; sm_s[lane >> 5] = s; }
        __syncthreads();
        if (lane < 32) {
            m = lane < NT / 32 ? sm_m[lane] : __int_as_float(0xff800000);
            s = lane < NT / 32 ? sm_s[lane] : 0.f;
            ks_warp_online(m, s);
            if (lane == 0) { sm_m[0] = m; sm_s[0] = s; }
        }
        __syncthreads();
        m = sm_m[0]; s = sm_s[0];
    }"""
    op, ident = ("ks_warp_max", "__int_as_float(0xff800000)") if kind == "max" else ("ks_warp_sum", "0.f")
    var = "m" if kind == "max" else "s"
    return f"""
    {{
        __shared__ float sm_{var}[NT / 32];
        if ((lane & 31) == 0) sm_{var}[lane >> 5] = {var};
        __syncthreads();
        if (lane < 32) {{
            {var} = lane < NT / 32 ? sm_{var}[lane] : {ident};
            {var} = {op}({var});
            if (lane == 0) sm_{var}[0] = {var};
        }}
        __syncthreads();
        {var} = sm_{var}[0];
    }}"""


def _cuda_wrapper(name: str, inputs: list[str], source_var: str, header_var: str, p: dict[str, Any]) -> str:
    args = ", ".join(inputs)
    rows_per_block = 1 if p["layout"] == "block_per_row" else p["threads"] // 32
    return f'''
_kernel = mx.fast.cuda_kernel(name="{name}", input_names={inputs!r}, output_names=["out"], source={source_var},
                              header={header_var})


def run({args}):
    rows, cols = x.shape
    vec = {p["vec"]} if cols % {p["vec"]} == 0 else 1
    blocks = (rows + {rows_per_block} - 1) // {rows_per_block}
    return _kernel(
        inputs=[{args}], template=[("T", x.dtype), ("THREADS", {p["threads"]}), ("VEC", vec)],
        grid=(blocks * {p["threads"]}, 1, 1), threadgroup=({p["threads"]}, 1, 1),
        output_shapes=[x.shape], output_dtypes=[x.dtype],
    )[0]
'''


_VEC_STRUCT = "struct alignas(sizeof(T) * VEC) KsVec { T v[VEC]; };\n"


def _softmax_cuda(p: dict[str, Any]) -> str:
    scale = LOG2E if p["exp2"] else "1.f"
    if p["online"]:
        passes = "    float m = __int_as_float(0xff800000), s = 0.f;" + _cuda_loop(p, f"""float t = v * {scale};
                if (t > m) {{ s = s * KS_EXP(m - t) + 1.f; m = t; }} else {{ s += KS_EXP(t - m); }}""")
        passes += "\n    ks_warp_online(m, s);" + _cuda_block_reduce("online", p["layout"])
    else:
        passes = "    float m = __int_as_float(0xff800000);" + _cuda_loop(p, f"m = fmaxf(m, v * {scale});")
        passes += "\n    m = ks_warp_max(m);" + _cuda_block_reduce("max", p["layout"])
        passes += "\n    float s = 0.f;" + _cuda_loop(p, f"s += KS_EXP(v * {scale} - m);")
        passes += "\n    s = ks_warp_sum(s);" + _cuda_block_reduce("sum", p["layout"])
    write = _cuda_loop(p, f"orow[c] = (T)(KS_EXP(v * {scale} - m) * inv);")
    body = (_cuda_prologue(p) + "    const T* xr = x + (size_t)row * cols;\n    T* orow = out + (size_t)row * cols;\n"
            + passes + "\n    float inv = 1.f / s;" + write + "\n")
    header = _cuda_exp(p) + _CUDA_REDUCE
    return ("# Rendered by ksearch's offline proposer: softmax.cuda.rowreduce\nimport mlx.core as mx\n\n"
            f"_HEADER = {header!r}\n\n_SOURCE = {(_VEC_STRUCT + body)!r}\n"
            + _cuda_wrapper("ks_softmax", ["x"], "_SOURCE", "_HEADER", p))


def _rmsnorm_cuda(p: dict[str, Any]) -> str:
    body = (_cuda_prologue(p) + "    const T* xr = x + (size_t)row * cols;\n    T* orow = out + (size_t)row * cols;\n"
            "    float s = 0.f;" + _cuda_loop(p, "s += v * v;")
            + "\n    s = ks_warp_sum(s);" + _cuda_block_reduce("sum", p["layout"])
            + "\n    float r = rsqrtf(s / cols + 1e-5f);"
            + _cuda_loop(p, "orow[c] = (T)(v * r * (float)weight[c]);") + "\n")
    header = "#define KS_EXP(v) __expf(v)\n" + _CUDA_REDUCE
    return ("# Rendered by ksearch's offline proposer: rmsnorm.cuda.rowreduce\nimport mlx.core as mx\n\n"
            f"_HEADER = {header!r}\n\n_SOURCE = {(_VEC_STRUCT + body)!r}\n"
            + _cuda_wrapper("ks_rmsnorm", ["x", "weight"], "_SOURCE", "_HEADER", p))


_CUDA_PARAMS = {
    "layout": ("block_per_row", "multi_row_per_block"),
    "threads": (128, 256, 512, 1024, 64),
    "vec": (1, 2, 4, 8),
    "unroll": (1, 2, 4),
}


def _cuda_valid(p: dict[str, Any]) -> bool:
    return p["threads"] >= 32 and (p["layout"] == "block_per_row" or p["threads"] <= 512)


FAMILIES = [
    TemplateFamily(
        id="softmax.cuda.rowreduce",
        tasks=("softmax",),
        backends=("mlx-cuda",),
        patterns=("block_per_row", "simd_register_reduction", "multi_row_per_block", "vectorized_loads",
                  "online_softmax", "exp2_trick", "loop_unrolling"),
        params={**_CUDA_PARAMS, "online": (False, True), "exp2": (False, True)},
        render=_softmax_cuda,
        valid=_cuda_valid,
        description="a block (or a warp) per row, warp-shuffle reductions, vector loads, optional online softmax",
        pattern_params={"online_softmax": {"online": (True,)}, "exp2_trick": {"exp2": (True,)},
                        "vectorized_loads": {"vec": (2, 4, 8)}, "multi_row_per_block": {"layout": ("multi_row_per_block",)},
                        "loop_unrolling": {"unroll": (2, 4)}},
        descriptors=("layout", "threads", "vec"),
    ),
    TemplateFamily(
        id="rmsnorm.cuda.rowreduce",
        tasks=("rmsnorm",),
        backends=("mlx-cuda",),
        patterns=("block_per_row", "simd_register_reduction", "multi_row_per_block", "vectorized_loads",
                  "loop_unrolling"),
        params=dict(_CUDA_PARAMS),
        render=_rmsnorm_cuda,
        valid=_cuda_valid,
        description="a block (or a warp) per row, warp-shuffle sum of squares, vector loads",
        pattern_params={"vectorized_loads": {"vec": (2, 4, 8)}, "multi_row_per_block": {"layout": ("multi_row_per_block",)},
                        "loop_unrolling": {"unroll": (2, 4)}},
        descriptors=("layout", "threads", "vec"),
    ),
]

from ksearch.policy.templates.reductions_metal import FAMILIES as _METAL  # noqa: E402

FAMILIES.extend(_METAL)
