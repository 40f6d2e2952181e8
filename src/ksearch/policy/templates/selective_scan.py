"""Template families for the `selective_scan` task (Mamba-1), one per backend.

- selective_scan.cpu.chunked_ops: MLX ops, chunked over L with the state carried between chunks; inside a chunk
  either the sequential recurrence (one compiled fused step per token) or the closed form in log space
  (mx.logcumsumexp of the positive and negative parts); mx.compile on or off.
- selective_scan.cuda.chunked: block = channels x chunks of L; pass 1 runs every chunk from a zero state, the chunk
  aggregates (exp(A sum dt), end state) are combined either sequentially in shared memory or by a warp-shuffle
  Hillis-Steele scan over the 32 chunks of a channel (lanes = chunks), pass 2 re-runs each chunk from its prefix
  with y, D, z gate fused.
- selective_scan.metal.chunked: the shared-memory variant in MSL.
"""

from __future__ import annotations

from typing import Any

from ksearch.policy.templates.base import TemplateFamily

_CPU = '''# selective_scan on MLX ops: chunk={chunk}, method={method}, compile={compile}, readout={readout}
import mlx.core as mx

F32 = mx.float32


def _chunk_seq(dt, v, C, A, h):
    dA = mx.exp(dt[..., None] * A[None, :, None, :])
    hs = []
    for t in range(dt.shape[-1]):
        h = dA[:, :, t] * h + v[:, :, t]
        hs.append(h)
    return _readout(mx.stack(hs, axis=2), C), h


def _chunk_log(dt, v, C, A, h):
    AS = mx.cumsum(dt, axis=-1)[..., None] * A[None, :, None, :]
    logv = mx.log(mx.abs(v)) - AS
    ninf = mx.array(-mx.inf, dtype=F32)
    lp = mx.logcumsumexp(mx.where(v > 0, logv, ninf), axis=2)
    ln = mx.logcumsumexp(mx.where(v < 0, logv, ninf), axis=2)
    hs = mx.exp(AS + lp) - mx.exp(AS + ln) + mx.exp(AS) * h[:, :, None, :]
    return _readout(hs, C), hs[:, :, -1]


def _readout_sum(hs, C):
    return mx.sum(hs * C[:, None], axis=-1)


def _readout_einsum(hs, C):
    return mx.einsum("bdtn,btn->bdt", hs, C)


_readout = _readout_{readout}
_chunk = {fn}


def run(u, delta, A, B, C, D, z, delta_bias):
    batch, dim, length = u.shape
    uf, zf = u.astype(F32), z.astype(F32)
    d = delta.astype(F32) + delta_bias[None, :, None]
    dt = mx.where(d > 20.0, d, mx.log1p(mx.exp(mx.minimum(d, 20.0))))
    Bt, Ct = B.astype(F32).transpose(0, 2, 1), C.astype(F32).transpose(0, 2, 1)
    h = mx.zeros((batch, dim, A.shape[1]), dtype=F32)
    ys = []
    for s in range(0, length, {chunk}):
        e = min(length, s + {chunk})
        v = (dt[:, :, s:e] * uf[:, :, s:e])[..., None] * Bt[:, None, s:e, :]
        y, h = _chunk(dt[:, :, s:e], v, Ct[:, s:e], A, h)
        ys.append(y)
    y = mx.concatenate(ys, axis=-1) + D[None, :, None] * uf
    return (y * zf * mx.sigmoid(zf)).astype(u.dtype), h
'''


def _render_cpu(p: dict[str, Any]) -> str:
    base = "_chunk_seq" if p["method"] == "sequential" else "_chunk_log"
    fn = f"mx.compile({base})" if p["compile"] else base
    return _CPU.format(chunk=p["chunk"], method=p["method"], compile=p["compile"], fn=fn, readout=p["readout"])


CPU_FAMILY = TemplateFamily(
    id="selective_scan.cpu.chunked_ops",
    tasks=("selective_scan",),
    backends=("mlx-cpu",),
    patterns=("chunked_scan_ops", "mx_compile_fusion", "chunked_scan_carried_prefix"),
    params={"chunk": (64, 16, 32, 128, 256, 8), "method": ("sequential", "logcumsumexp"), "compile": (True, False),
            "readout": ("sum", "einsum")},
    render=_render_cpu,
    # The log-space form loses ~1e-5 per unit of |A| * sum(dt) in a chunk: keep its chunks short.
    valid=lambda p: p["method"] == "sequential" or p["chunk"] <= 16,
    description="MLX-ops chunked scan, sequential or log-space cumsum inside chunks",
    # What switching each pattern on means here: a fused (compiled) chunk step; the sequential recurrence inside
    # chunks; chunks short enough that the carried prefix matters (the log-space form needs them).
    pattern_params={"mx_compile_fusion": {"compile": (True,)}, "chunked_scan_ops": {"method": ("sequential",)},
                    "chunked_scan_carried_prefix": {"chunk": (8, 16, 32)}},
    descriptors=("chunk", "method", "readout"),
)

# --------------------------------------------------------------------------------------------------------------
_EXP = {True: ("A[d * N + n] * 1.4426950408889634f", "exp2f"), False: ("A[d * N + n]", "expf")}

_CUDA_HEAD = r'''
    const int dim = u_shape[1], L = u_shape[2];
    const int tid = threadIdx.x;
    const int groups = (dim + CH - 1) / CH;
    const int b = blockIdx.x / groups;
    const int d0 = (blockIdx.x % groups) * CH;
    const int Lc = (L + NCH - 1) / NCH;
'''

_CUDA_PASS = r'''
    for (int t = t0; t < t1; ++t) {{
        float dv = (float)delta[row + t] + bias;
        float dt = dv > 20.f ? dv : log1pf(expf(dv));
        float uv = (float)u[row + t];
        float du = dt * uv;
        {sum_dt}
        {y_init}
        {unroll}
        for (int n = 0; n < N; ++n) {{
            h[n] = {expf}(dt * A2[n]) * h[n] + du * (float)B[((size_t)b * N + n) * L + t];
            {y_acc}
        }}
        {epilogue}
    }}
'''

_EPILOGUE = r'''y += Dd * uv;
        float zv = (float)z[row + t];
        y *= zv / (1.f + expf(-zv));
        y_out[row + t] = (T)y;'''


def _pass(p: dict[str, Any], final: bool) -> str:
    return _CUDA_PASS.format(
        sum_dt="" if final else "s += dt;", y_init="float y = 0.f;" if final else "",
        unroll="#pragma unroll" if p["unroll"] else "#pragma unroll 1", expf=_EXP[p["exp2"]][1],
        y_acc="y += h[n] * (float)C[((size_t)b * N + n) * L + t];" if final else "",
        epilogue=_EPILOGUE if final else "")


def _render_cuda(p: dict[str, Any]) -> str:
    a_expr, expf = _EXP[p["exp2"]]
    warp = p["carry"] == "warp_shuffle"
    ch, nch = (p["channels"], 32) if warp else (p["channels"], p["chunks"])
    if warp:
        ids = "const int dl = tid / 32, c = tid % 32;"
        carry = rf'''
    #pragma unroll
    for (int n = 0; n < N; ++n) {{
        float a = {expf}(A2[n] * s), bb = h[n];
        #pragma unroll
        for (int off = 1; off < 32; off <<= 1) {{
            float ap = __shfl_up_sync(0xffffffffu, a, off), bp = __shfl_up_sync(0xffffffffu, bb, off);
            if (c >= off) {{ bb = a * bp + bb; a = a * ap; }}
        }}
        float ex = __shfl_up_sync(0xffffffffu, bb, 1);
        if (c == 31 && active) last_state[((size_t)b * dim + d) * N + n] = bb;
        h[n] = c == 0 ? 0.f : ex;
    }}
    if (!active) return;'''
    else:
        ids = "const int dl = tid % CH, c = tid / CH;"
        carry = rf'''
    constexpr int NMAX = 16;  // shared memory sized for up to 16 states (run() checks N)
    __shared__ float carry[NCH * CH * NMAX];
    __shared__ float dtsum[NCH * CH];
    #pragma unroll
    for (int n = 0; n < N; ++n) carry[(c * CH + dl) * N + n] = h[n];
    dtsum[c * CH + dl] = s;
    __syncthreads();
    for (int j = tid; j < CH * N; j += CH * NCH) {{
        const int jd = j / N, jn = j % N, dj = d0 + jd;
        const float a2 = dj < dim ? A[dj * N + jn]{" * 1.4426950408889634f" if p["exp2"] else ""} : 0.f;
        float run = 0.f;
        for (int k = 0; k < NCH; ++k) {{
            const int idx = (k * CH + jd) * N + jn;
            const float hk = carry[idx];
            carry[idx] = run;
            run = {expf}(a2 * dtsum[k * CH + jd]) * run + hk;
        }}
        if (dj < dim) last_state[((size_t)b * dim + dj) * N + jn] = run;
    }}
    __syncthreads();
    if (!active) return;
    #pragma unroll
    for (int n = 0; n < N; ++n) h[n] = carry[(c * CH + dl) * N + n];'''
    body = (_CUDA_HEAD + f"    {ids}\n" + r'''
    const int d = d0 + dl;
    const bool active = d < dim;
    const int t0 = min(L, c * Lc), t1 = active ? min(L, t0 + Lc) : t0;
    const size_t row = ((size_t)b * dim + (active ? d : 0)) * L;
    float A2[N], h[N];
    #pragma unroll
    for (int n = 0; n < N; ++n) { A2[n] = active ? ''' + a_expr + r''' : 0.f; h[n] = 0.f; }
    const float bias = active ? delta_bias[d] : 0.f, Dd = active ? D[d] : 0.f;
    float s = 0.f;
''' + _pass(p, False) + carry + _pass(p, True))
    return f'''# selective_scan, MLX-CUDA chunked parallel scan: {p}
import mlx.core as mx

CH, NCH = {ch}, {nch}
_SOURCE = r"""{body}
"""

_kernel = mx.fast.cuda_kernel(
    name="selective_scan_chunked",
    input_names=["u", "delta", "A", "B", "C", "D", "z", "delta_bias"],
    output_names=["y_out", "last_state"],
    source=_SOURCE,
)


def run(u, delta, A, B, C, D, z, delta_bias):
    batch, dim, length = u.shape
    n = A.shape[1]
    if n > 16:
        raise ValueError("this kernel keeps at most 16 states per channel")
    groups = (dim + CH - 1) // CH
    return tuple(_kernel(
        inputs=[u, delta, A, B, C, D, z, delta_bias],
        template=[("T", u.dtype), ("N", n), ("CH", {ch}), ("NCH", {nch})],
        grid=(batch * groups * {ch} * {nch}, 1, 1), threadgroup=({ch} * {nch}, 1, 1),
        output_shapes=[u.shape, (batch, dim, n)], output_dtypes=[u.dtype, mx.float32],
    ))
'''


def _cuda_valid(p: dict[str, Any]) -> bool:
    threads = p["channels"] * (32 if p["carry"] == "warp_shuffle" else p["chunks"])
    # 48 KB of static shared memory for the (N + 1) floats per thread of the shared-memory carry (N = 16).
    return 64 <= threads <= 1024 and (p["carry"] == "warp_shuffle" or threads * 17 * 4 <= 48 * 1024)


CUDA_FAMILY = TemplateFamily(
    id="selective_scan.cuda.chunked",
    tasks=("selective_scan",),
    backends=("mlx-cuda",),
    patterns=("chunked_scan_carried_prefix", "warp_level_scan", "hillis_steele_scan", "exp2_trick",
              "fused_epilogue", "loop_unrolling"),
    params={"carry": ("smem_sequential", "warp_shuffle"), "channels": (16, 4, 8, 32, 64),
            "chunks": (32, 8, 16, 64), "exp2": (True, False), "unroll": (True, False)},
    render=_render_cuda,
    valid=_cuda_valid,
    description="two-pass chunked scan over L and channels, chunk prefixes carried in shared memory or by shuffles",
)


def _render_metal(p: dict[str, Any]) -> str:
    src = _render_cuda({**p, "carry": "smem_sequential"})
    # The kernel body is plain C++ arithmetic; only ids, barriers, shared memory and math names differ.
    for old, new in (("threadIdx.x", "thread_position_in_threadgroup.x"), ("blockIdx.x", "threadgroup_position_in_grid.x"),
                     ("__shared__", "threadgroup"), ("__syncthreads()", "threadgroup_barrier(metal::mem_flags::mem_threadgroup)"),
                     ("exp2f(", "metal::exp2("), ("log1pf(expf(dv))", "metal::log(1.f + metal::exp(dv))"),
                     ("expf(", "metal::exp("), ("mx.fast.cuda_kernel", "mx.fast.metal_kernel"), ("MLX-CUDA", "MLX-Metal"),
                     ("const int tid = thread_position_in_threadgroup.x", "const int tid = (int)thread_position_in_threadgroup.x"),
                     ("const int b = threadgroup_position_in_grid.x", "const int b = (int)threadgroup_position_in_grid.x"),
                     ("(blockIdx.x % groups)", "((int)threadgroup_position_in_grid.x % groups)"),
                     ("(threadgroup_position_in_grid.x % groups)", "((int)threadgroup_position_in_grid.x % groups)")):
        src = src.replace(old, new)
    return src.replace("#pragma unroll 1", "").replace("#pragma unroll", "")


METAL_FAMILY = TemplateFamily(
    id="selective_scan.metal.chunked",
    tasks=("selective_scan",),
    backends=("mlx-metal",),
    patterns=("chunked_scan_carried_prefix", "exp2_trick", "fused_epilogue"),
    params={"channels": (8, 4, 16, 32), "chunks": (32, 8, 16, 64), "exp2": (True, False), "unroll": (True,)},
    render=_render_metal,
    # Apple GPUs: 32 KB of threadgroup memory, 1024 threads.
    valid=lambda p: 64 <= p["channels"] * p["chunks"] <= 1024 and p["channels"] * p["chunks"] * 17 * 4 <= 32 * 1024,
    description="the shared-memory chunked scan in MSL (not yet measured on Apple hardware)",
)

FAMILIES: list[TemplateFamily] = [CPU_FAMILY, CUDA_FAMILY, METAL_FAMILY]
