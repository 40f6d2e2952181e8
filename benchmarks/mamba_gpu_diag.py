"""Stage-by-stage check of the Mamba mixer on MLX-CUDA against the ops path (the test model of tests/test_gpu_mamba.py
and the 370m bench model): which kernel, on which input layout, disagrees. Prints one line per check.

    python benchmarks/mamba_gpu_diag.py
"""

from __future__ import annotations

import os

os.environ.setdefault("MLX_ENABLE_TF32", "0")

import importlib  # noqa: E402

import mlx.core as mx  # noqa: E402

from ksearch.models import mamba as M  # noqa: E402

# The module, not the function that ksearch.kernels re-exports under the same name.
S = importlib.import_module("ksearch.kernels.selective_scan")


def err(a: mx.array, b: mx.array) -> str:
    d = mx.abs(a.astype(mx.float32) - b.astype(mx.float32))
    return f"max_err={float(mx.max(d)):.3g} nan={bool(mx.any(mx.isnan(a)))}"


def stages(model: M.Model, tokens: mx.array, tag: str) -> None:
    layer = model.backbone.layers[0]
    mixer = layer.mixer
    p = mixer.params()
    dim = mixer.args.d_inner
    r = p["dt_proj_w"].shape[1]
    n = p["A"].shape[1]
    x = layer.norm(model.backbone.embeddings(tokens))
    xz = x @ mixer.in_proj.weight.T
    mx.eval(xz)
    xs = xz[..., :dim]
    xs_c = mx.contiguous(xs)
    ref_c, _ = S.causal_conv_silu(xs_c, p["conv_w"], p["conv_b"], None, backend="ops")
    for label, inp in (("view", xs), ("contiguous", xs_c)):
        got, st = S.causal_conv_silu(inp, p["conv_w"], p["conv_b"], None, backend="cuda")
        print(tag, "conv", label, err(got, ref_c), flush=True)
    xc = ref_c
    dbl = xc @ p["x_proj_wT"]
    dbl_ref = xc @ mx.contiguous(p["x_proj_w"].T)
    print(tag, "x_proj matmul (cached .T view vs contiguous)", err(dbl, dbl_ref), flush=True)
    dt = dbl[..., :r] @ p["dt_proj_w"].T
    dt_ref = mx.contiguous(dbl[..., :r]) @ mx.contiguous(p["dt_proj_w"].T)
    print(tag, "dt_proj matmul on a column slice", err(dt, dt_ref), flush=True)
    t = (0, 2, 1)
    z = xz[..., dim:]
    views = (xc.transpose(t), dt_ref.transpose(t), p["A"], dbl_ref[..., r:r + n].transpose(t),
             dbl_ref[..., r + n:].transpose(t), p["D"], z.transpose(t), p["dt_bias"])
    conts = tuple(mx.contiguous(v) for v in views)
    yr, hr = S.scan_views(*conts, backend="ops")
    for label, args in (("views", views), ("contiguous", conts)):
        y, h = S.scan_views(*args, backend="cuda")
        print(tag, "scan", label, "y", err(y, yr), "state", err(h, hr), flush=True)
        y, h = S.scan_views(*args, backend="cuda", y_bld=True)
        print(tag, "scan y_bld", label, "y", err(y.transpose(t), yr), flush=True)
    os.environ["KSEARCH_SCAN_BACKEND"] = "ops"
    ref = model(tokens)
    os.environ["KSEARCH_SCAN_BACKEND"] = "cuda"
    got = model(tokens)
    print(tag, "model prefill logits", err(got, ref), flush=True)
    bad = mx.isnan(got).any(axis=(0, 2))
    print(tag, "first positions with NaN", [i for i, b in enumerate(bad.tolist()) if b][:5], flush=True)
    os.environ.pop("KSEARCH_SCAN_BACKEND")


def main() -> None:
    small = M.random_model(M.ModelArgs(vocab_size=256, d_model=128, n_layer=3), seed=2)
    stages(small, mx.random.randint(0, 256, (2, 37), key=mx.random.key(5)), "small-f32-b2")
    stages(small, mx.random.randint(0, 256, (1, 37), key=mx.random.key(5)), "small-f32-b1")
    big = M.random_model(M.config("370m"), seed=0, dtype=mx.float16)
    tokens = mx.random.randint(0, 50280, (1, 64), key=mx.random.key(1))
    stages(big, tokens, "370m-f16-b1")
    from ksearch.models.mamba_compiled import CompiledMamba

    os.environ["KSEARCH_SCAN_BACKEND"] = "ops"
    cache = big.make_cache()
    refs = [big(tokens, cache)[:, -1]]
    for _ in range(4):
        refs.append(big(mx.argmax(refs[-1], axis=-1)[:, None], cache)[:, -1])
    os.environ.pop("KSEARCH_SCAN_BACKEND")
    run = CompiledMamba(big)
    outs = [run(tokens)]
    for r in refs[:-1]:
        outs.append(run(mx.argmax(r, axis=-1)[:, None]))
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        print("370m compiled step", i, err(o, r), flush=True)


if __name__ == "__main__":
    main()
