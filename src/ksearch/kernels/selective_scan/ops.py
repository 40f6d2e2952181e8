"""Mamba-1 selective scan, causal conv and decode step from MLX ops only (mlx-cpu, and any device without kernels).

Two scan methods, both chunked over L with the state carried from chunk to chunk:
- "logcumsumexp": inside a chunk, h_t = sum_{s<=t} exp(A (S_t - S_s)) v_s + exp(A S_t) h_in with S the cumulative dt;
  the sum is taken in log space (positive and negative v_s separately, mx.logcumsumexp), so nothing overflows however
  long the chunk; a handful of ops per chunk instead of a few per token.
- "sequential": the per-token recurrence on precomputed exp(dt A) and dt B u (the step is one fused compiled op).
Everything is computed in float32 and cast back to u's dtype at the end, like the reference.
"""

from __future__ import annotations

import mlx.core as mx

F32 = mx.float32


def softplus(x: mx.array) -> mx.array:
    # Identity above 20 like mamba_ssm's CUDA kernel; the minimum keeps exp finite on the branch not taken.
    return mx.where(x > 20.0, x, mx.log1p(mx.exp(mx.minimum(x, 20.0))))


def _chunk_logcumsumexp(dt: mx.array, v: mx.array, C: mx.array, A: mx.array,
                        h_in: mx.array) -> tuple[mx.array, mx.array]:
    """dt (b, d, T); v = dt B u (b, d, T, n); C (b, T, n); A (d, n); h_in (b, d, n) -> y (b, d, T), h_out."""
    S = mx.cumsum(dt, axis=-1)
    AS = S[..., None] * A[None, :, None, :]  # (b, d, T, n), <= 0
    logv = mx.log(mx.abs(v)) - AS
    ninf = mx.array(-mx.inf, dtype=F32)
    lp = mx.logcumsumexp(mx.where(v > 0, logv, ninf), axis=2)
    ln = mx.logcumsumexp(mx.where(v < 0, logv, ninf), axis=2)
    h = mx.exp(AS + lp) - mx.exp(AS + ln) + mx.exp(AS) * h_in[:, :, None, :]
    y = mx.sum(h * C[:, None], axis=-1)
    return y, h[:, :, -1]


@mx.compile
def _step(dA: mx.array, v: mx.array, h: mx.array) -> mx.array:
    return dA * h + v


def _chunk_sequential(dt: mx.array, v: mx.array, C: mx.array, A: mx.array,
                      h_in: mx.array) -> tuple[mx.array, mx.array]:
    dA = mx.exp(dt[..., None] * A[None, :, None, :])
    h = h_in
    hs = []
    for t in range(dt.shape[-1]):
        h = _step(dA[:, :, t], v[:, :, t], h)
        hs.append(h)
    y = mx.sum(mx.stack(hs, axis=2) * C[:, None], axis=-1)
    return y, h


_COMPILED = {"logcumsumexp": mx.compile(_chunk_logcumsumexp), "sequential": _chunk_sequential}


def scan(u: mx.array, delta: mx.array, A: mx.array, B: mx.array, C: mx.array, D: mx.array, z: mx.array,
         delta_bias: mx.array, h0: mx.array | None = None, y_bld: bool = False, chunk: int = 64,
         method: str = "sequential") -> tuple[mx.array, mx.array]:
    """Same contract as the kernels: u, delta, z (b, d, L) views; B, C (b, N, L) views; A (d, N)."""
    batch, dim, length = u.shape
    n = A.shape[1]
    uf, zf, Af = u.astype(F32), z.astype(F32), A.astype(F32)
    dt = softplus(delta.astype(F32) + delta_bias.astype(F32)[None, :, None])
    Bt = B.astype(F32).transpose(0, 2, 1)  # (b, L, n)
    Ct = C.astype(F32).transpose(0, 2, 1)
    h = h0.astype(F32) if h0 is not None else mx.zeros((batch, dim, n), dtype=F32)
    fn = _COMPILED[method]
    ys = []
    for s in range(0, length, chunk):
        e = min(length, s + chunk)
        v = (dt[:, :, s:e] * uf[:, :, s:e])[..., None] * Bt[:, None, s:e, :]
        y, h = fn(dt[:, :, s:e], v, Ct[:, s:e], Af, h)
        ys.append(y)
    y = mx.concatenate(ys, axis=-1) if len(ys) > 1 else ys[0]
    y = (y + D.astype(F32)[None, :, None] * uf) * (zf * mx.sigmoid(zf))
    y = y.astype(u.dtype)
    return (y.transpose(0, 2, 1) if y_bld else y), h


def conv_silu(x: mx.array, weight: mx.array, bias: mx.array | None,
              state: mx.array | None) -> tuple[mx.array, mx.array]:
    """x (b, L, d); weight (d, K); state (b, K-1, d) or None -> silu(conv + bias) (b, L, d), new state (b, K-1, d)."""
    batch, length, dim = x.shape
    k = weight.shape[1]
    if state is None:
        state = mx.zeros((batch, k - 1, dim), dtype=x.dtype)
    full = mx.concatenate([state.astype(x.dtype), x], axis=1)
    out = mx.conv1d(full, weight.astype(x.dtype)[:, :, None], groups=dim)
    if bias is not None:
        out = out + bias.astype(x.dtype)
    return out * mx.sigmoid(out), full[:, -(k - 1):]


def _mixer_step(x: mx.array, z: mx.array, conv_state: mx.array, conv_weight: mx.array, conv_bias: mx.array,
                x_proj_weight: mx.array, dt_proj_weight: mx.array, dt_bias: mx.array, A: mx.array, D: mx.array,
                ssm_state: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    n = A.shape[1]
    r = dt_proj_weight.shape[1]
    full = mx.concatenate([conv_state, x[:, None]], axis=1)  # (b, K, d)
    xc = mx.sum(full.astype(F32) * conv_weight.astype(F32).T[None], axis=1) + conv_bias.astype(F32)
    xc = xc * mx.sigmoid(xc)
    dbl = xc @ x_proj_weight.astype(F32).T
    dt = softplus(dbl[:, :r] @ dt_proj_weight.astype(F32).T + dt_bias.astype(F32))
    Bm, Cm = dbl[:, r:r + n], dbl[:, r + n:]
    h = mx.exp(dt[..., None] * A.astype(F32)) * ssm_state.astype(F32) + (dt * xc)[..., None] * Bm[:, None, :]
    y = mx.sum(h * Cm[:, None, :], axis=-1) + D.astype(F32) * xc
    zf = z.astype(F32)
    y = y * zf * mx.sigmoid(zf)
    return y.astype(x.dtype), full[:, 1:], h


_compiled_step = mx.compile(_mixer_step)


def mixer_step(x: mx.array, z: mx.array, conv_state: mx.array, conv_weight: mx.array, conv_bias: mx.array | None,
               x_proj_weight: mx.array, dt_proj_weight: mx.array, dt_bias: mx.array, A: mx.array, D: mx.array,
               ssm_state: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    if conv_bias is None:
        conv_bias = mx.zeros((x.shape[1],), dtype=x.dtype)
    return _compiled_step(x, z, conv_state.astype(x.dtype), conv_weight, conv_bias, x_proj_weight, dt_proj_weight,
                          dt_bias, A, D, ssm_state)

