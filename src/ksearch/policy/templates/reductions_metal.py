"""Metal (MSL) row-reduction families for softmax and rmsnorm: the same algorithms as the CUDA ones, in SIMD-group
functions (simd_max / simd_sum / simd_shuffle_xor) and threadgroup memory. Run and judged on the Metal emulation
(backend mlx-metal-emu, tests/test_metalemu_acceptance_eval.py); not yet measured on Apple hardware."""

from __future__ import annotations

from typing import Any

from ksearch.policy.templates.base import TemplateFamily

LOG2E = "1.4426950408889634f"


def _prologue(p: dict[str, Any]) -> str:
    if p["layout"] == "block_per_row":
        return """
    constexpr int NT = THREADS;
    int row = (int)threadgroup_position_in_grid.x;
    int lane = (int)thread_position_in_threadgroup.x;
    int rows = x_shape[0], cols = x_shape[1];
    if (row >= rows) return;
"""
    return """
    constexpr int NT = 32;
    int row = (int)threadgroup_position_in_grid.x * (THREADS / 32) + (int)simdgroup_index_in_threadgroup;
    int lane = (int)thread_index_in_simdgroup;
    int rows = x_shape[0], cols = x_shape[1];
    if (row >= rows) return;
"""


def _block(kind: str, layout: str) -> str:
    if layout != "block_per_row":
        return ""
    # The threadgroup arrays are declared at the kernel's scope, not in the block: arrays of sibling blocks may share
    # storage (their lifetimes do not overlap), and then a fast SIMD-group's write in the next block would race with
    # a slow one's read in this block.
    if kind == "online":
        return """
    threadgroup float sm_m[32];
    threadgroup float sm_s[32];
    {
        uint sg = simdgroup_index_in_threadgroup;
        if (thread_index_in_simdgroup == 0) { sm_m[sg] = m; sm_s[sg] = s; }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (sg == 0) {
            uint l = thread_index_in_simdgroup;
            m = l < NT / 32 ? sm_m[l] : -INFINITY;
            s = l < NT / 32 ? sm_s[l] : 0.0f;
            float mn = simd_max(m);
            s = simd_sum(m == -INFINITY ? 0.0f : s * KS_EXP(m - mn));
            m = mn;
            if (l == 0) { sm_m[0] = m; sm_s[0] = s; }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        m = sm_m[0]; s = sm_s[0];
    }"""
    fn, ident, var = ("simd_max", "-INFINITY", "m") if kind == "max" else ("simd_sum", "0.0f", "s")
    return f"""
    threadgroup float sm_{var}[32];
    {{
        uint sg = simdgroup_index_in_threadgroup;
        if (thread_index_in_simdgroup == 0) sm_{var}[sg] = {var};
        threadgroup_barrier(mem_flags::mem_threadgroup);
        {var} = thread_index_in_simdgroup < NT / 32 ? sm_{var}[thread_index_in_simdgroup] : {ident};
        {var} = {fn}({var});
    }}"""


def _loop(body: str) -> str:
    return f"""
    for (int c = lane; c < cols; c += NT) {{
        float v = (float)x[(size_t)row * cols + c];
        {body}
    }}"""


def _exp(p: dict[str, Any]) -> str:
    return "#define KS_EXP(v) metal::fast::exp2(v)\n" if p["exp2"] else "#define KS_EXP(v) metal::fast::exp(v)\n"


def _wrapper(name: str, inputs: list[str], p: dict[str, Any]) -> str:
    args = ", ".join(inputs)
    per = 1 if p["layout"] == "block_per_row" else p["threads"] // 32
    return f'''
_kernel = mx.fast.metal_kernel(name="{name}", input_names={inputs!r}, output_names=["out"], source=_SOURCE,
                               header=_HEADER)


def run({args}):
    rows, cols = x.shape
    groups = (rows + {per} - 1) // {per}
    return _kernel(
        inputs=[{args}], template=[("T", x.dtype), ("THREADS", {p["threads"]})],
        grid=(groups * {p["threads"]}, 1, 1), threadgroup=({p["threads"]}, 1, 1),
        output_shapes=[x.shape], output_dtypes=[x.dtype],
    )[0]
'''


def _softmax(p: dict[str, Any]) -> str:
    scale = LOG2E if p["exp2"] else "1.0f"
    if p["online"]:
        passes = "    float m = -INFINITY, s = 0.0f;" + _loop(
            f"float t = v * {scale}; if (t > m) {{ s = s * KS_EXP(m - t) + 1.0f; m = t; }} else {{ s += KS_EXP(t - m); }}")
        passes += """
    { float mn = simd_max(m); s = simd_sum(m == -INFINITY ? 0.0f : s * KS_EXP(m - mn)); m = mn; }"""
        passes += _block("online", p["layout"])
    else:
        passes = "    float m = -INFINITY;" + _loop(f"m = metal::max(m, v * {scale});")
        passes += "\n    m = simd_max(m);" + _block("max", p["layout"])
        passes += "\n    float s = 0.0f;" + _loop(f"s += KS_EXP(v * {scale} - m);")
        passes += "\n    s = simd_sum(s);" + _block("sum", p["layout"])
    body = (_prologue(p) + passes + "\n    float inv = 1.0f / s;"
            + _loop(f"out[(size_t)row * cols + c] = (T)(KS_EXP(v * {scale} - m) * inv);") + "\n")
    return ("# Rendered by ksearch's offline proposer: softmax.metal.rowreduce\nimport mlx.core as mx\n\n"
            f"_HEADER = {_exp(p)!r}\n\n_SOURCE = {body!r}\n" + _wrapper("ks_softmax", ["x"], p))


def _rmsnorm(p: dict[str, Any]) -> str:
    body = (_prologue(p) + "    float s = 0.0f;" + _loop("s += v * v;")
            + "\n    s = simd_sum(s);" + _block("sum", p["layout"])
            + "\n    float r = metal::rsqrt(s / cols + 1e-5f);"
            + _loop("out[(size_t)row * cols + c] = (T)(v * r * (float)weight[c]);") + "\n")
    return ("# Rendered by ksearch's offline proposer: rmsnorm.metal.rowreduce\nimport mlx.core as mx\n\n"
            f"_HEADER = {''!r}\n\n_SOURCE = {body!r}\n" + _wrapper("ks_rmsnorm", ["x", "weight"], p))


_PARAMS = {"layout": ("block_per_row", "multi_row_per_block"), "threads": (256, 128, 512, 1024, 64)}


def _valid(p: dict[str, Any]) -> bool:
    return p["layout"] == "block_per_row" or p["threads"] <= 512


FAMILIES = [
    TemplateFamily(
        id="softmax.metal.rowreduce", tasks=("softmax",), backends=("mlx-metal",),
        patterns=("block_per_row", "simd_register_reduction", "multi_row_per_block", "online_softmax", "exp2_trick"),
        params={**_PARAMS, "online": (False, True), "exp2": (False, True)}, render=_softmax, valid=_valid,
        pattern_params={"online_softmax": {"online": (True,)}, "exp2_trick": {"exp2": (True,)},
                        "multi_row_per_block": {"layout": ("multi_row_per_block",)}},
        descriptors=("layout", "threads"),
        description="a threadgroup (or a SIMD group) per row, simd_max/simd_sum reductions, optional online softmax",
    ),
    TemplateFamily(
        id="rmsnorm.metal.rowreduce", tasks=("rmsnorm",), backends=("mlx-metal",),
        patterns=("block_per_row", "simd_register_reduction", "multi_row_per_block"),
        params=dict(_PARAMS), render=_rmsnorm, valid=_valid,
        pattern_params={"multi_row_per_block": {"layout": ("multi_row_per_block",)}},
        descriptors=("layout", "threads"),
        description="a threadgroup (or a SIMD group) per row, simd_sum of squares",
    ),
]
