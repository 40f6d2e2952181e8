"""The suite behind `ksearch bench mamba`: ksearch.models.mamba vs mlx-lm's Mamba (and mlx-lm patched with our
kernels), identical random weights, one process, contenders interleaved within every repetition (bench.timing);
medians and spread."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

from ksearch.bench.timing import latency_stats, time_rounds
from ksearch.models import mamba as M
from ksearch.models.mamba_compiled import CompiledMamba

Step = Callable[[], Any]


def _stats(times: list[float], tokens: int) -> dict[str, float]:
    lat = latency_stats(times)
    return {**lat, "tok_per_s": tokens / lat["latency_s"], "reps": len(times)}


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


class _Decoder:
    """n_tokens greedy steps of a model after a 16-token prefill: `prefill` (untimed, it starts a new sequence) and
    `steps` (timed: queued like mlx-lm's generate, each step read at the next one)."""

    def __init__(self, model: Any, prompt: mx.array, n_tokens: int) -> None:
        self.model, self.prompt, self.n_tokens = model, prompt, n_tokens
        self.step: Callable[[mx.array], mx.array] = model
        self.tok = prompt

    def prefill(self) -> None:
        model = self.model
        if isinstance(model, CompiledMamba):
            model.reset()
            self.step = model
        else:
            cache = model.make_cache()

            def step(t: mx.array) -> mx.array:
                return model(t, cache)[:, -1]  # type: ignore[no-any-return]

            self.step = step
        self.tok = mx.argmax(self.step(self.prompt), axis=-1)
        mx.eval(self.tok)

    def steps(self) -> mx.array:
        tok = self.tok
        for _ in range(self.n_tokens):
            tok = mx.argmax(self.step(tok[:, None]), axis=-1)
            mx.async_eval(tok)  # like mlx-lm's generate: queue the step, read it at the next one
        return tok


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
        # A warm-up call each (JIT compiles, allocations), then `reps` interleaved rounds of one call each.
        times = time_rounds({n: _prefill(contenders[n], tokens) for n in names}, rounds=reps, warmup=1,
                            before=set_patch)
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
    for name in contenders:  # warm-up: a few steps each
        set_patch(name)
        warm = _Decoder(contenders[name], prompt, 4)
        warm.prefill()
        mx.eval(warm.steps())
    decoders = {n: _Decoder(m, prompt, decode_tokens) for n, m in contenders.items()}

    def start(name: str) -> None:  # outside the clock: the prompt's prefill
        set_patch(name)
        decoders[name].prefill()

    dec = time_rounds({n: d.steps for n, d in decoders.items()}, rounds=reps, warmup=0, before=start)
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


def run_and_write(model_config: str, lengths: tuple[int, ...], decode_tokens: int, batch: int, dtype: str, reps: int,
                  baseline_max_length: int, compare: bool, out: str | Path,
                  log: Callable[[str], None] = print) -> Path:
    """run_bench, then its figures as one JSON result under `out` (its path returned)."""
    from ksearch.backends import best_backend
    from ksearch.bench.results import make_result, write_result

    backend = best_backend()
    res = run_bench(model_config, lengths, decode_tokens, batch, dtype, reps, baseline_max_length, compare, log=log)
    notes = ("Random weights at the published config; one process; contenders interleaved per repetition; "
             "latency_s is the median, min/max the spread. Prefill is the full forward (the head over every "
             "position) with state caches produced; decode is greedy steps after a 16-token prompt. ksearch is "
             "the mx.compile'd runner that generate() uses, ksearch_eager the same model op by op. mlx_lm runs "
             f"prefill only up to L={baseline_max_length} (its per-token loop).")
    data = make_result(f"mamba-{model_config}", backend, res["figures"], res["shapes"], res["dtypes"],
                       res["summary"], notes)
    return write_result(data, out)
