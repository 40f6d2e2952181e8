"""MLX-CUDA kernels for Mamba-1: chunked parallel selective scan, causal conv prefill, fused decode step.

Each kernel object is built once per process (a `cuda_kernel` factory call JIT-compiles through NVRTC, ~1.7 s) and
cached here. All big tensors are read through their strides (`ensure_row_contiguous=False`), so the model can pass
views of `in_proj` / `x_proj` outputs (the x and z halves, the B and C columns) without a copy per layer.
"""

from __future__ import annotations

import functools
from typing import Any

import mlx.core as mx

from ksearch.kernels.kernel_text import cuda_kernel
from ksearch.kernels.selective_scan.placeholders import placeholder

# Chunked scan. Block = CH channels x NCH chunks of L; thread (channel, chunk) keeps its N states in registers.
# Pass 1: each thread runs its chunk from a zero state (end state H_c) and sums dt (the chunk's decay is
# exp(A * sum dt), so no per-state product has to be kept). The chunk aggregates are combined in order in shared
# memory (the associative (a, b) scan, seeded with h0), leaving each chunk's incoming prefix; pass 2 re-runs the
# chunk from that prefix and fuses y = <h, C> + D u and the z gate. exp(dt A) is exp2(dt * A log2 e).
SCAN_SOURCE = r"""
    constexpr float LOG2E = 1.4426950408889634f;
    // BLD: inputs in the model's (batch, L, channels) layout, else the task's (batch, channels, L).
    const int batch = u_shape[0];
    const int dim = BLD ? u_shape[2] : u_shape[1];
    const int L = BLD ? u_shape[1] : u_shape[2];
    const int tid = threadIdx.x;
    const int dl = tid % CH, c = tid / CH;
    const int groups = (dim + CH - 1) / CH;
    const int b = blockIdx.x / groups;
    const int d0 = (blockIdx.x % groups) * CH;
    const int d = d0 + dl;
    if (b >= batch) return;
    const bool active = d < dim;
    const int Lc = (L + NCH - 1) / NCH;
    const int t0 = min(L, c * Lc), t1 = min(L, t0 + Lc);
    __shared__ float carry[NCH * CH * N];
    __shared__ float dtsum[NCH * CH];
    const int64_t usD = u_strides[BLD ? 2 : 1], usT = u_strides[BLD ? 1 : 2];
    const int64_t dsD = delta_strides[BLD ? 2 : 1], dsT = delta_strides[BLD ? 1 : 2];
    const int64_t zsD = z_strides[BLD ? 2 : 1], zsT = z_strides[BLD ? 1 : 2];
    const int64_t bsN = B_strides[BLD ? 2 : 1], bsT = B_strides[BLD ? 1 : 2];
    const int64_t csN = C_strides[BLD ? 2 : 1], csT = C_strides[BLD ? 1 : 2];
    const int dd = active ? d : 0;
    const T* __restrict__ up = u + b * u_strides[0] + dd * usD;
    const T* __restrict__ dp = delta + b * delta_strides[0] + dd * dsD;
    const T* __restrict__ zp = z + b * z_strides[0] + (Z_OFF + dd) * zsD;
    const T* __restrict__ Bp = B + b * B_strides[0] + B_OFF * bsN;
    const T* __restrict__ Cp = C + b * C_strides[0] + C_OFF * csN;
    float A2[N], h[N];
    #pragma unroll
    for (int n = 0; n < N; ++n) { A2[n] = A[dd * N + n] * LOG2E; h[n] = 0.f; }
    const float bias = delta_bias[dd], Dd = D[dd];
    float s = 0.f;
    if (active) {
        #pragma unroll 2
        for (int t = t0; t < t1; ++t) {
            float dv = (float)dp[t * dsT] + bias;
            float dt = dv > 20.f ? dv : log1pf(expf(dv));
            float du = dt * (float)up[t * usT];
            s += dt;
            #pragma unroll
            for (int n = 0; n < N; ++n) h[n] = exp2f(dt * A2[n]) * h[n] + du * (float)Bp[n * bsN + t * bsT];
        }
    }
    #pragma unroll
    for (int n = 0; n < N; ++n) carry[(c * CH + dl) * N + n] = h[n];
    dtsum[c * CH + dl] = s;
    __syncthreads();
    for (int j = tid; j < CH * N; j += CH * NCH) {
        const int jd = j / N, jn = j % N, dj = d0 + jd;
        const bool ok = dj < dim;
        const float a2 = ok ? A[dj * N + jn] * LOG2E : 0.f;
        float run = 0.f;
        if (HAS_H0 && ok) run = h0[((int64_t)b * dim + dj) * N + jn];
        for (int k = 0; k < NCH; ++k) {
            const int idx = (k * CH + jd) * N + jn;
            const float hk = carry[idx];
            carry[idx] = run;
            run = exp2f(a2 * dtsum[k * CH + jd]) * run + hk;
        }
        if (ok) last_state[((int64_t)b * dim + dj) * N + jn] = run;
    }
    __syncthreads();
    if (!active) return;
    #pragma unroll
    for (int n = 0; n < N; ++n) h[n] = carry[(c * CH + dl) * N + n];
    T* __restrict__ yp = y_out + (Y_BLD ? (int64_t)b * L * dim + d : ((int64_t)b * dim + d) * L);
    const int64_t ysT = Y_BLD ? dim : 1;
    #pragma unroll 2
    for (int t = t0; t < t1; ++t) {
        float dv = (float)dp[t * dsT] + bias;
        float dt = dv > 20.f ? dv : log1pf(expf(dv));
        float uv = (float)up[t * usT];
        float du = dt * uv;
        float y = 0.f;
        #pragma unroll
        for (int n = 0; n < N; ++n) {
            h[n] = exp2f(dt * A2[n]) * h[n] + du * (float)Bp[n * bsN + t * bsT];
            y += h[n] * (float)Cp[n * csN + t * csT];
        }
        y += Dd * uv;
        float zv = (float)zp[t * zsT];
        y *= zv / (1.f + expf(-zv));
        yp[t * ysT] = (T)y;
    }
"""

# Causal depthwise conv over time + bias + SiLU for a prefill, with the previous K-1 inputs from conv_state (or zeros),
# one thread per (batch, t, channel): channel-fastest so warps read x rows coalesced. x may be wider than the conv
# (the model passes in_proj's whole output; channels [0, dim) are the conv's), dim = conv_weight's rows.
CONV_SOURCE = r"""
    const int batch = x_shape[0], L = x_shape[1], dim = conv_weight_shape[0];
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)batch * L * dim) return;
    const int d = idx % dim;
    const int t = (idx / dim) % L;
    const int b = idx / ((int64_t)dim * L);
    const int64_t xs0 = x_strides[0], xs1 = x_strides[1], xs2 = x_strides[2];
    float acc = HAS_BIAS ? (float)conv_bias[d] : 0.f;
    #pragma unroll
    for (int k = 0; k < K; ++k) {
        const int tt = t - (K - 1) + k;
        float v = 0.f;
        if (tt >= 0) v = (float)x[b * xs0 + tt * xs1 + d * xs2];
        else if (HAS_STATE) v = (float)conv_state[((int64_t)b * (K - 1) + (K - 1 + tt)) * dim + d];
        acc += (float)conv_weight[d * K + k] * v;
    }
    y_out[idx] = (T)(acc / (1.f + expf(-acc)));
    if (t >= L - (K - 1)) {
        new_state[((int64_t)b * (K - 1) + t - (L - (K - 1))) * dim + d] = x[b * xs0 + t * xs1 + d * xs2];
    }
"""

# Fused decode step of one Mamba-1 mixer after in_proj: conv-state update + conv + SiLU, x_proj, dt_proj + softplus,
# the SSM step, D skip and z gate, in ONE launch. Block = (batch row, group of CPB channels). The x_proj GEMV needs
# every channel of the conv output, so each block recomputes the (cheap) conv for all channels and the full x_proj
# (weights come from L2 after the first block); only its own channels get dt and the SSM step. Decode is latency-
# bound: the GEMVs use 16-byte loads, unrolled, so that several loads per lane are in flight.
# x / z: (batch, ..., channels) with the channel stride last; z's channels start at Z_OFF (the model passes in_proj's
# output as both); dim = conv_weight's rows.
STEP_SOURCE = r"""
    constexpr int NP = R + 2 * N;
    constexpr int VEC = 16 / sizeof(T);
    const int batch = x_shape[0], dim = conv_weight_shape[0];
    const int groups = (dim + CPB - 1) / CPB;
    const int b = blockIdx.x / groups, g = blockIdx.x % groups;
    if (b >= batch) return;
    const int tid = threadIdx.x, nt = blockDim.x;
    __shared__ float xc[MAXD];
    __shared__ float dbl[NP];
    const int64_t xs0 = x_strides[0], xsD = x_strides[x_ndim - 1];
    const int64_t zs0 = z_strides[0], zsD = z_strides[z_ndim - 1];
    #pragma unroll 4
    for (int d = tid; d < dim; d += nt) {
        float acc = HAS_BIAS ? (float)conv_bias[d] : 0.f;
        #pragma unroll
        for (int k = 0; k < K - 1; ++k)
            acc += (float)conv_weight[d * K + k] * (float)conv_state[((int64_t)b * (K - 1) + k) * dim + d];
        const T xv = x[b * xs0 + d * xsD];
        acc += (float)conv_weight[d * K + K - 1] * (float)xv;
        xc[d] = acc / (1.f + expf(-acc));
        if (d / CPB == g) {
            #pragma unroll
            for (int k = 0; k < K - 2; ++k)
                new_conv_state[((int64_t)b * (K - 1) + k) * dim + d] =
                    conv_state[((int64_t)b * (K - 1) + k + 1) * dim + d];
            new_conv_state[((int64_t)b * (K - 1) + K - 2) * dim + d] = xv;
        }
    }
    __syncthreads();
    const int warp = tid / 32, lane = tid % 32, nwarps = nt / 32;
    const bool vec_x = dim % (32 * VEC) == 0 && ((size_t)x_proj_weight & 15) == 0;
    for (int j = warp; j < NP; j += nwarps) {
        const T* w = x_proj_weight + (int64_t)j * dim;
        float acc = 0.f;
        if (vec_x) {
            #pragma unroll 8
            for (int d = lane * VEC; d < dim; d += 32 * VEC) {
                const uint4 raw = *reinterpret_cast<const uint4*>(w + d);
                const T* v = reinterpret_cast<const T*>(&raw);
                #pragma unroll
                for (int e = 0; e < VEC; ++e) acc += (float)v[e] * xc[d + e];
            }
        } else {
            for (int d = lane; d < dim; d += 32) acc += (float)w[d] * xc[d];
        }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) dbl[j] = acc;
    }
    __syncthreads();
    const bool vec_dt = R % VEC == 0 && ((size_t)dt_proj_weight & 15) == 0;
    for (int dl = tid; dl < CPB; dl += nt) {
        const int d = g * CPB + dl;
        if (d >= dim) break;
        float acc = dt_bias[d];
        const T* w = dt_proj_weight + (int64_t)d * R;
        if (vec_dt) {
            #pragma unroll
            for (int r = 0; r < R; r += VEC) {
                const uint4 raw = *reinterpret_cast<const uint4*>(w + r);
                const T* v = reinterpret_cast<const T*>(&raw);
                #pragma unroll
                for (int e = 0; e < VEC; ++e) acc += (float)v[e] * dbl[r + e];
            }
        } else {
            for (int r = 0; r < R; ++r) acc += (float)w[r] * dbl[r];
        }
        const float dt = acc > 20.f ? acc : log1pf(expf(acc));
        const float xv = xc[d];
        const float du = dt * xv;
        float y = 0.f;
        const int64_t base = ((int64_t)b * dim + d) * N;
        #pragma unroll
        for (int n = 0; n < N; ++n) {
            float hs = expf(dt * A[d * N + n]) * ssm_state[base + n] + du * dbl[R + n];
            new_ssm_state[base + n] = hs;
            y += hs * dbl[R + N + n];
        }
        y += D[d] * xv;
        const float zv = (float)z[b * zs0 + (Z_OFF + d) * zsD];
        y *= zv / (1.f + expf(-zv));
        y_out[(int64_t)b * dim + d] = (T)y;
    }
"""


@functools.cache
def scan_kernel() -> Any:
    return cuda_kernel(
        name="ksearch_selective_scan_chunked",
        input_names=["u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0"],
        output_names=["y_out", "last_state"],
        source=SCAN_SOURCE,
        ensure_row_contiguous=False,
    )


@functools.cache
def conv_kernel() -> Any:
    return cuda_kernel(
        name="ksearch_causal_conv_silu",
        input_names=["x", "conv_weight", "conv_bias", "conv_state"],
        output_names=["y_out", "new_state"],
        source=CONV_SOURCE,
        ensure_row_contiguous=False,
    )


@functools.cache
def step_kernel() -> Any:
    return cuda_kernel(
        name="ksearch_mamba_step",
        input_names=["x", "z", "conv_state", "conv_weight", "conv_bias", "x_proj_weight", "dt_proj_weight",
                     "dt_bias", "A", "D", "ssm_state"],
        output_names=["y_out", "new_conv_state", "new_ssm_state"],
        source=STEP_SOURCE,
        ensure_row_contiguous=False,
    )


def scan_config(length: int) -> tuple[int, int]:
    """(channels per block, chunks per block): 512 threads; long sequences get more chunks (more parallelism over L)."""
    if length >= 256:
        return 16, 32
    if length >= 32:
        return 64, 8
    return 256, 2


def _f32(a: mx.array) -> mx.array:
    # Only convert when needed: every extra graph node costs ~10 us of dispatch per call on MLX-CUDA.
    return a if a.dtype == mx.float32 else a.astype(mx.float32)


def _as(a: mx.array, dtype: mx.Dtype) -> mx.array:
    return a if a.dtype == dtype else a.astype(dtype)


def scan(u: mx.array, delta: mx.array, A: mx.array, B: mx.array, C: mx.array, D: mx.array, z: mx.array,
         delta_bias: mx.array, h0: mx.array | None = None, y_bld: bool = False, bld: bool = False,
         z_off: int = 0, b_off: int = 0, c_off: int = 0) -> tuple[mx.array, mx.array]:
    """u, delta, z: (batch, dim, L) arrays of any strides, or (batch, L, dim) with `bld`; B, C: (batch, N, L), or
    (batch, L, >= N) with `bld`. z's channels start at z_off, B's / C's states at b_off / c_off (so the model passes
    in_proj's and x_proj's outputs whole). A (dim, N), D, delta_bias (dim,) row-contiguous.
    y: (batch, dim, L), or (batch, L, dim) with `y_bld`; last_state (batch, dim, N) float32."""
    batch = u.shape[0]
    dim, length = (u.shape[2], u.shape[1]) if bld else (u.shape[1], u.shape[2])
    n = A.shape[1]
    ch, nch = scan_config(length)
    groups = (dim + ch - 1) // ch
    f32 = mx.float32
    A, D, delta_bias = _f32(A), _f32(D), _f32(delta_bias)
    y_shape = (batch, length, dim) if y_bld else (batch, dim, length)
    return tuple(scan_kernel()(  # type: ignore[return-value]
        inputs=[u, delta, A, B, C, D, z, delta_bias, _f32(h0) if h0 is not None else placeholder("h0")],
        template=[("T", u.dtype), ("N", n), ("CH", ch), ("NCH", nch), ("HAS_H0", h0 is not None),
                  ("Y_BLD", y_bld), ("BLD", bld), ("Z_OFF", z_off), ("B_OFF", b_off), ("C_OFF", c_off)],
        grid=(batch * groups * ch * nch, 1, 1), threadgroup=(ch * nch, 1, 1),
        output_shapes=[y_shape, (batch, dim, n)], output_dtypes=[u.dtype, f32],
    ))


def conv_silu(x: mx.array, weight: mx.array, bias: mx.array | None,
              state: mx.array | None) -> tuple[mx.array, mx.array]:
    """x: (batch, L, >= dim) with L >= K-1, channels [0, dim) convolved; weight (dim, K) and bias row-contiguous;
    state (batch, K-1, dim) or None (zeros). Returns silu(conv(x) + bias) (batch, L, dim), new state."""
    batch, length = x.shape[0], x.shape[1]
    dim, k = weight.shape
    return tuple(conv_kernel()(  # type: ignore[return-value]
        inputs=[x, weight, bias if bias is not None else placeholder("conv_bias"),
                state if state is not None else placeholder("conv_state")],
        template=[("T", x.dtype), ("K", k), ("HAS_BIAS", bias is not None), ("HAS_STATE", state is not None)],
        grid=(batch * length * dim, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(batch, length, dim), (batch, k - 1, dim)], output_dtypes=[x.dtype, x.dtype],
    ))


def step_channels_per_block(batch: int, dim: int) -> int:
    # Enough blocks to spread the per-channel work at batch 1, few enough that the redundant x_proj stays cheap.
    return 128 if batch <= 2 else 256 if batch <= 8 else 512


def mixer_step(x: mx.array, z: mx.array, conv_state: mx.array, conv_weight: mx.array, conv_bias: mx.array | None,
               x_proj_weight: mx.array, dt_proj_weight: mx.array, dt_bias: mx.array, A: mx.array, D: mx.array,
               ssm_state: mx.array, z_off: int = 0,
               y_shape: tuple[int, ...] | None = None) -> tuple[mx.array, mx.array, mx.array]:
    """One decode token. x, z: (batch, [1,] >= dim) with the channel stride last (z's channels from z_off);
    conv_state (batch, K-1, dim); conv_weight (dim, K); x_proj_weight (R + 2N, dim); dt_proj_weight (dim, R);
    A (dim, N); ssm_state (batch, dim, N) float32; all but x and z row-contiguous."""
    batch = x.shape[0]
    dim, k = conv_weight.shape
    n = A.shape[1]
    r = dt_proj_weight.shape[1]
    cpb = step_channels_per_block(batch, dim)
    groups = (dim + cpb - 1) // cpb
    threads = 256  # 128 registers a thread: 512 threads would be at the SM's limit
    maxd = max(256, 1 << (dim - 1).bit_length())  # static shared memory; few distinct instantiations
    f32 = mx.float32
    dt = x.dtype
    return tuple(step_kernel()(  # type: ignore[return-value]
        inputs=[x, _as(z, dt), _as(conv_state, dt), _as(conv_weight, dt),
                _as(conv_bias, dt) if conv_bias is not None else placeholder("conv_bias"), _as(x_proj_weight, dt), _as(dt_proj_weight, dt),
                _f32(dt_bias), _f32(A), _f32(D), _f32(ssm_state)],
        template=[("T", dt), ("N", n), ("K", k), ("R", r), ("CPB", cpb), ("MAXD", maxd),
                  ("HAS_BIAS", conv_bias is not None), ("Z_OFF", z_off)],
        grid=(batch * groups * threads, 1, 1), threadgroup=(threads, 1, 1),
        output_shapes=[y_shape or (batch, dim), (batch, k - 1, dim), (batch, dim, n)],
        output_dtypes=[dt, dt, f32],
    ))
