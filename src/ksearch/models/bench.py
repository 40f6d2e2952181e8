"""Side-by-side Mamba benchmark: ksearch.models.mamba vs mlx-lm's Mamba (and mlx-lm patched with our kernels),
identical random weights, one process, contenders interleaved within every repetition; medians and spread."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from ksearch.models import mamba as M
from ksearch.models.mamba_compiled import CompiledMamba

Step = Callable[[], Any]


def _time(fn: Step) -> float:
    mx.synchronize()
    t0 = time.perf_counter()
    mx.eval(fn())
    mx.synchronize()
    return time.perf_counter() - t0


def _stats(times: list[float], tokens: int) -> dict[str, float]:
    med = statistics.median(times)
    return {"latency_s": med, "latency_min_s": min(times), "latency_max_s": max(times),
            "tok_per_s": tokens / med, "reps": len(times)}


def _prefill(model: Any, tokens: mx.array) -> Step:
    if isinstance(model, CompiledMamba):
        def run_compiled() -> Any:
            model.reset()
            return [model(tokens), *model.states]

        return run_compiled

    def run() -> Any:
        cache = model.make_cache()
        logits = model(tokens, cache)
        return [logits[:, -1]] + [c for layer in cache for c in (layer[0], layer[1]) if c is not None]

    return run


def _decode(model: Any, prompt: mx.array, n_tokens: int, elapsed: list[float]) -> Step:
    """n_tokens greedy steps after a 16-token prefill; appends the decode time (prefill excluded) to `elapsed`."""
    def run() -> Any:
        if isinstance(model, CompiledMamba):
            model.reset()
            step: Callable[[mx.array], mx.array] = model
        else:
            cache = model.make_cache()

            def step(t: mx.array) -> mx.array:
                return model(t, cache)[:, -1]  # type: ignore[no-any-return]
        tok = mx.argmax(step(prompt), axis=-1)
        mx.eval(tok)
        mx.synchronize()
        t0 = time.perf_counter()
        for _ in range(n_tokens):
            tok = mx.argmax(step(tok[:, None]), axis=-1)
            mx.async_eval(tok)  # like mlx-lm's generate: queue the step, read it at the next one
        mx.eval(tok)
        elapsed.append(time.perf_counter() - t0)
        return tok

    return run


def run_bench(model_config: str = "370m", lengths: tuple[int, ...] = (512, 1024, 2048, 4096), decode_tokens: int = 64,
              batch: int = 1, dtype: str = "float16", reps: int = 3, baseline_max_length: int = 512,
              compare: bool = True, log: Callable[[str], None] = print,
              args: M.ModelArgs | None = None) -> dict[str, Any]:
    from ksearch.integrations import mlx_lm as integ
    from ksearch.kernels.selective_scan import kernel_backend

    args = args or M.config(model_config)
    ours = M.random_model(args, seed=0, dtype=getattr(mx, dtype))
    # "ksearch" is what generate() runs (the compiled step); "ksearch_eager" the same model op by op.
    contenders: dict[str, Any] = {"ksearch": CompiledMamba(ours, batch=batch), "ksearch_eager": ours}
    if compare:
        theirs = integ.mlx_lm_model(ours)
        contenders["mlx_lm"] = theirs
        contenders["mlx_lm_patched"] = theirs

    def set_patch(name: str) -> None:
        (integ.patch if name == "mlx_lm_patched" else integ.unpatch)()

    figures: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    for length in lengths:
        tokens = mx.random.randint(0, args.vocab_size, (batch, length), key=mx.random.key(length))
        names = [n for n in contenders if n != "mlx_lm" or length <= baseline_max_length]
        times: dict[str, list[float]] = {n: [] for n in names}
        for name in names:  # warm-up: JIT compiles, allocations
            set_patch(name)
            _time(_prefill(contenders[name], tokens))
        for _ in range(reps):
            for name in names:
                set_patch(name)
                times[name].append(_time(_prefill(contenders[name], tokens)))
        if "mlx_lm" in names and "agreement" not in checks:
            # The numbers only count if the outputs agree: last-position logits of every contender vs mlx-lm's own.
            lasts = {}
            for name in names:
                set_patch(name)
                lasts[name] = _prefill(contenders[name], tokens)()[0]
                lasts[name] = (lasts[name][:, -1] if lasts[name].ndim == 3 else lasts[name]).astype(mx.float32)
            ref = lasts["mlx_lm"]
            checks["agreement"] = {f"max_abs_diff_{n}_vs_mlx_lm_L{length}": float(mx.max(mx.abs(v - ref)))
                                   for n, v in lasts.items() if n != "mlx_lm"}
            checks["agreement"][f"max_abs_logit_mlx_lm_L{length}"] = float(mx.max(mx.abs(ref)))
            log(f"agreement: {checks['agreement']}")
        for name in names:
            row: dict[str, Any] = {"phase": "prefill", "contender": name, "batch": batch, "length": length,
                   **_stats(times[name], batch * length)}
            figures.append(row)
            log(f"prefill L={length:5d} {name:15s} {row['tok_per_s']:12.1f} tok/s  "
                f"({row['latency_min_s'] * 1e3:.2f}-{row['latency_max_s'] * 1e3:.2f} ms)")
    prompt = mx.random.randint(0, args.vocab_size, (batch, 16), key=mx.random.key(1))
    dec: dict[str, list[float]] = {n: [] for n in contenders}
    for name in contenders:
        set_patch(name)
        _decode(contenders[name], prompt, 4, [])()
    for _ in range(reps):
        for name in contenders:
            set_patch(name)
            _decode(contenders[name], prompt, decode_tokens, dec[name])()
    integ.unpatch()
    for name in contenders:
        row = {"phase": "decode", "contender": name, "batch": batch, "tokens": decode_tokens,
               **_stats(dec[name], batch * decode_tokens)}
        figures.append(row)
        log(f"decode {decode_tokens} tokens {name:15s} {row['tok_per_s']:10.1f} tok/s")
    summary: dict[str, Any] = {"scan_backend": kernel_backend(), **checks.get("agreement", {})}
    by = {(f["phase"], f["contender"], f.get("length")): f for f in figures}
    for length in lengths:
        ours_f = by.get(("prefill", "ksearch", length))
        if ours_f:
            summary[f"prefill_tok_per_s_L{length}"] = ours_f["tok_per_s"]
        base = by.get(("prefill", "mlx_lm", length))
        if ours_f and base:
            summary[f"prefill_ratio_vs_mlx_lm_L{length}"] = base["latency_s"] / ours_f["latency_s"]
    d_eager = by.get(("decode", "ksearch_eager", None))
    if d_eager:
        summary["decode_eager_tok_per_s"] = d_eager["tok_per_s"]
    d_ours = by.get(("decode", "ksearch", None))
    d_base = by.get(("decode", "mlx_lm", None))
    if d_ours:
        summary["decode_tok_per_s"] = d_ours["tok_per_s"]
    if d_ours and d_base:
        summary["decode_ratio_vs_mlx_lm"] = d_base["latency_s"] / d_ours["latency_s"]
    shapes = [{"model": model_config, "d_model": args.d_model, "n_layer": args.n_layer, "d_inner": args.d_inner,
               "d_state": args.d_state, "batch": batch, "lengths": list(lengths), "decode_tokens": decode_tokens}]
    return {"figures": figures, "summary": summary, "shapes": shapes, "dtypes": [dtype]}
