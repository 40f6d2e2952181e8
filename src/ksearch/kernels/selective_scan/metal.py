"""MLX-Metal versions of the Mamba-1 kernels in cuda.py (same algorithms, MSL dialect).

Opt-in (KSEARCH_METAL_KERNELS=1 or `use_metal=True`) until measured on Apple hardware; they run correctly on the
Metal emulation against the ops path (tests/test_metalemu_acceptance_kernels.py). Differences from the CUDA versions: thread ids come from Metal attributes, shared
memory is `threadgroup` and must have a compile-time size (MAXD for the decode step: the feature dim, <= 7168 for
32 KB), SIMD-group shuffles replace warp shuffles.
"""

from __future__ import annotations

import functools
from typing import Any

import mlx.core as mx

from ksearch.kernels.kernel_text import metal_kernel
from ksearch.kernels.selective_scan.placeholders import placeholder

SCAN_SOURCE = r"""
    constexpr float LOG2E = 1.4426950408889634f;
    const int batch = u_shape[0], dim = u_shape[1], L = u_shape[2];
    const int tid = (int)thread_position_in_threadgroup.x;
    const int bid = (int)threadgroup_position_in_grid.x;
    const int dl = tid % CH, c = tid / CH;
    const int groups = (dim + CH - 1) / CH;
    const int b = bid / groups;
    const int d0 = (bid % groups) * CH;
    const int d = d0 + dl;
    const bool active = d < dim && b < batch;
    const int Lc = (L + NCH - 1) / NCH;
    const int t0 = min(L, c * Lc), t1 = min(L, t0 + Lc);
    threadgroup float carry[NCH * CH * N];
    threadgroup float dtsum[NCH * CH];
    const int64_t us0 = u_strides[0], us1 = u_strides[1], us2 = u_strides[2];
    const int64_t ds0 = delta_strides[0], ds1 = delta_strides[1], ds2 = delta_strides[2];
    const int64_t zs0 = z_strides[0], zs1 = z_strides[1], zs2 = z_strides[2];
    const int64_t bs0 = B_strides[0], bs1 = B_strides[1], bs2 = B_strides[2];
    const int64_t cs0 = C_strides[0], cs1 = C_strides[1], cs2 = C_strides[2];
    const int dd = active ? d : 0;
    const int bb = b < batch ? b : 0;
    float A2[N];
    float h[N];
    for (int n = 0; n < N; ++n) { A2[n] = active ? A[dd * N + n] * LOG2E : 0.0f; h[n] = 0.0f; }
    const float bias = active ? delta_bias[dd] : 0.0f;
    const float Dd = active ? D[dd] : 0.0f;
    float s = 0.0f;
    if (active) {
        for (int t = t0; t < t1; ++t) {
            float dv = (float)delta[bb * ds0 + dd * ds1 + t * ds2] + bias;
            float dt = dv > 20.0f ? dv : metal::log(1.0f + metal::exp(dv));
            float du = dt * (float)u[bb * us0 + dd * us1 + t * us2];
            s += dt;
            for (int n = 0; n < N; ++n)
                h[n] = metal::exp2(dt * A2[n]) * h[n] + du * (float)B[bb * bs0 + n * bs1 + t * bs2];
        }
    }
    for (int n = 0; n < N; ++n) carry[(c * CH + dl) * N + n] = h[n];
    dtsum[c * CH + dl] = s;
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int j = tid; j < CH * N; j += CH * NCH) {
        const int jd = j / N, jn = j % N, dj = d0 + jd;
        const bool ok = dj < dim && b < batch;
        const float a2 = ok ? A[dj * N + jn] * LOG2E : 0.0f;
        float run = 0.0f;
        if (HAS_H0 && ok) run = h0[((int64_t)b * dim + dj) * N + jn];
        for (int k = 0; k < NCH; ++k) {
            const int idx = (k * CH + jd) * N + jn;
            const float hk = carry[idx];
            carry[idx] = run;
            run = metal::exp2(a2 * dtsum[k * CH + jd]) * run + hk;
        }
        if (ok) last_state[((int64_t)b * dim + dj) * N + jn] = run;
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (!active) return;
    for (int n = 0; n < N; ++n) h[n] = carry[(c * CH + dl) * N + n];
    for (int t = t0; t < t1; ++t) {
        float dv = (float)delta[b * ds0 + d * ds1 + t * ds2] + bias;
        float dt = dv > 20.0f ? dv : metal::log(1.0f + metal::exp(dv));
        float uv = (float)u[b * us0 + d * us1 + t * us2];
        float du = dt * uv;
        float y = 0.0f;
        for (int n = 0; n < N; ++n) {
            h[n] = metal::exp2(dt * A2[n]) * h[n] + du * (float)B[b * bs0 + n * bs1 + t * bs2];
            y += h[n] * (float)C[b * cs0 + n * cs1 + t * cs2];
        }
        y += Dd * uv;
        float zv = (float)z[b * zs0 + d * zs1 + t * zs2];
        y *= zv / (1.0f + metal::exp(-zv));
        if (Y_BLD) y_out[((int64_t)b * L + t) * dim + d] = (T)y;
        else y_out[((int64_t)b * dim + d) * L + t] = (T)y;
    }
"""

CONV_SOURCE = r"""
    const int batch = x_shape[0], L = x_shape[1], dim = x_shape[2];
    const int64_t idx = (int64_t)thread_position_in_grid.x;
    if (idx >= (int64_t)batch * L * dim) return;
    const int d = idx % dim;
    const int t = (idx / dim) % L;
    const int b = idx / ((int64_t)dim * L);
    const int64_t xs0 = x_strides[0], xs1 = x_strides[1], xs2 = x_strides[2];
    float acc = HAS_BIAS ? (float)conv_bias[d] : 0.0f;
    for (int k = 0; k < K; ++k) {
        const int tt = t - (K - 1) + k;
        float v = 0.0f;
        if (tt >= 0) v = (float)x[b * xs0 + tt * xs1 + d * xs2];
        else if (HAS_STATE) v = (float)conv_state[((int64_t)b * (K - 1) + (K - 1 + tt)) * dim + d];
        acc += (float)conv_weight[d * K + k] * v;
    }
    y_out[idx] = (T)(acc / (1.0f + metal::exp(-acc)));
    if (t >= L - (K - 1)) {
        new_state[((int64_t)b * (K - 1) + t - (L - (K - 1))) * dim + d] = x[b * xs0 + t * xs1 + d * xs2];
    }
"""

STEP_SOURCE = r"""
    constexpr int NP = R + 2 * N;
    const int batch = x_shape[0], dim = x_shape[1];
    const int groups = (dim + CPB - 1) / CPB;
    const int bid = (int)threadgroup_position_in_grid.x;
    const int b = bid / groups, g = bid % groups;
    const int tid = (int)thread_position_in_threadgroup.x, nt = (int)threads_per_threadgroup.x;
    threadgroup float xc[MAXD];
    threadgroup float dbl[NP];
    const int64_t xs0 = x_strides[0], xs1 = x_strides[1];
    const int64_t zs0 = z_strides[0], zs1 = z_strides[1];
    const int bb = b < batch ? b : 0;
    for (int d = tid; d < dim; d += nt) {
        float acc = HAS_BIAS ? (float)conv_bias[d] : 0.0f;
        for (int k = 0; k < K - 1; ++k)
            acc += (float)conv_weight[d * K + k] * (float)conv_state[((int64_t)bb * (K - 1) + k) * dim + d];
        const T xv = x[bb * xs0 + d * xs1];
        acc += (float)conv_weight[d * K + K - 1] * (float)xv;
        xc[d] = acc / (1.0f + metal::exp(-acc));
        if (d / CPB == g && b < batch) {
            for (int k = 0; k < K - 2; ++k)
                new_conv_state[((int64_t)b * (K - 1) + k) * dim + d] =
                    conv_state[((int64_t)b * (K - 1) + k + 1) * dim + d];
            new_conv_state[((int64_t)b * (K - 1) + K - 2) * dim + d] = xv;
        }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    const int warp = tid / 32, lane = tid % 32, nwarps = nt / 32;
    for (int j = warp; j < NP; j += nwarps) {
        float acc = 0.0f;
        for (int d = lane; d < dim; d += 32) acc += (float)x_proj_weight[(int64_t)j * dim + d] * xc[d];
        acc = metal::simd_sum(acc);
        if (lane == 0) dbl[j] = acc;
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (b >= batch) return;
    for (int dl = tid; dl < CPB; dl += nt) {
        const int d = g * CPB + dl;
        if (d >= dim) break;
        float acc = dt_bias[d];
        for (int r = 0; r < R; ++r) acc += (float)dt_proj_weight[(int64_t)d * R + r] * dbl[r];
        const float dt = acc > 20.0f ? acc : metal::log(1.0f + metal::exp(acc));
        const float xv = xc[d];
        const float du = dt * xv;
        float y = 0.0f;
        const int64_t base = ((int64_t)b * dim + d) * N;
        for (int n = 0; n < N; ++n) {
            float hs = metal::exp(dt * A[d * N + n]) * ssm_state[base + n] + du * dbl[R + n];
            new_ssm_state[base + n] = hs;
            y += hs * dbl[R + N + n];
        }
        y += D[d] * xv;
        const float zv = (float)z[b * zs0 + d * zs1];
        y *= zv / (1.0f + metal::exp(-zv));
        y_out[(int64_t)b * dim + d] = (T)y;
    }
"""


@functools.cache
def scan_kernel() -> Any:
    return metal_kernel(
        name="ksearch_selective_scan_chunked",
        input_names=["u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0"],
        output_names=["y_out", "last_state"], source=SCAN_SOURCE, ensure_row_contiguous=False)


@functools.cache
def conv_kernel() -> Any:
    return metal_kernel(
        name="ksearch_causal_conv_silu", input_names=["x", "conv_weight", "conv_bias", "conv_state"],
        output_names=["y_out", "new_state"], source=CONV_SOURCE, ensure_row_contiguous=False)


@functools.cache
def step_kernel() -> Any:
    return metal_kernel(
        name="ksearch_mamba_step",
        input_names=["x", "z", "conv_state", "conv_weight", "conv_bias", "x_proj_weight", "dt_proj_weight",
                     "dt_bias", "A", "D", "ssm_state"],
        output_names=["y_out", "new_conv_state", "new_ssm_state"], source=STEP_SOURCE, ensure_row_contiguous=False)


def scan(u: mx.array, delta: mx.array, A: mx.array, B: mx.array, C: mx.array, D: mx.array, z: mx.array,
         delta_bias: mx.array, h0: mx.array | None = None, y_bld: bool = False) -> tuple[mx.array, mx.array]:
    batch, dim, length = u.shape
    n = A.shape[1]
    # 32 KB of threadgroup memory: CH * NCH * (N + 1) floats must fit.
    ch, nch = (8, 32) if length >= 256 else (32, 8) if length >= 32 else (128, 2)
    groups = (dim + ch - 1) // ch
    f32 = mx.float32
    A, D, delta_bias = (mx.contiguous(a.astype(f32)) for a in (A, D, delta_bias))
    y_shape = (batch, length, dim) if y_bld else (batch, dim, length)
    return tuple(scan_kernel()(  # type: ignore[return-value]
        inputs=[u, delta, A, B, C, D, z, delta_bias, h0.astype(f32) if h0 is not None else placeholder("h0")],
        template=[("T", u.dtype), ("N", n), ("CH", ch), ("NCH", nch), ("HAS_H0", h0 is not None),
                  ("Y_BLD", y_bld)],
        grid=(batch * groups * ch * nch, 1, 1), threadgroup=(ch * nch, 1, 1),
        output_shapes=[y_shape, (batch, dim, n)], output_dtypes=[u.dtype, f32],
    ))


def conv_silu(x: mx.array, weight: mx.array, bias: mx.array | None,
              state: mx.array | None) -> tuple[mx.array, mx.array]:
    batch, length, dim = x.shape
    k = weight.shape[1]
    return tuple(conv_kernel()(  # type: ignore[return-value]
        inputs=[x, mx.contiguous(weight), mx.contiguous(bias) if bias is not None else placeholder("conv_bias"),
                mx.contiguous(state) if state is not None else placeholder("conv_state")],
        template=[("T", x.dtype), ("K", k), ("HAS_BIAS", bias is not None), ("HAS_STATE", state is not None)],
        grid=(batch * length * dim, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(batch, length, dim), (batch, k - 1, dim)], output_dtypes=[x.dtype, x.dtype],
    ))


def mixer_step(x: mx.array, z: mx.array, conv_state: mx.array, conv_weight: mx.array, conv_bias: mx.array | None,
               x_proj_weight: mx.array, dt_proj_weight: mx.array, dt_bias: mx.array, A: mx.array, D: mx.array,
               ssm_state: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    batch, dim = x.shape
    k, n, r = conv_weight.shape[1], A.shape[1], dt_proj_weight.shape[1]
    cpb = 128 if batch <= 2 else 256
    groups = (dim + cpb - 1) // cpb
    maxd = max(256, 1 << (dim - 1).bit_length())  # few distinct instantiations
    f32 = mx.float32
    A, D, dt_bias = (mx.contiguous(a.astype(f32)) for a in (A, D, dt_bias))
    conv_weight, x_proj_weight, dt_proj_weight = (
        mx.contiguous(w.astype(x.dtype)) for w in (conv_weight, x_proj_weight, dt_proj_weight))
    return tuple(step_kernel()(  # type: ignore[return-value]
        inputs=[x, z, mx.contiguous(conv_state.astype(x.dtype)), conv_weight,
                mx.contiguous(conv_bias) if conv_bias is not None else placeholder("conv_bias"), x_proj_weight, dt_proj_weight, dt_bias,
                A, D, mx.contiguous(ssm_state.astype(f32))],
        template=[("T", x.dtype), ("N", n), ("K", k), ("R", r), ("CPB", cpb), ("MAXD", maxd),
                  ("HAS_BIAS", conv_bias is not None)],
        grid=(batch * groups * 256, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(batch, dim), (batch, k - 1, dim), (batch, dim, n)],
        output_dtypes=[x.dtype, x.dtype, f32],
    ))
