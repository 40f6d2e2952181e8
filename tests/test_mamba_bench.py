"""The Mamba benchmark's plumbing on mlx-cpu (tiny model): every contender timed, the summary's keys present."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm.models.mamba")

from ksearch.bench.mamba import run_bench  # noqa: E402
from ksearch.models import mamba as M  # noqa: E402


def test_run_bench_times_every_contender() -> None:
    mx.set_default_device(mx.cpu)
    args = M.ModelArgs(vocab_size=64, d_model=32, n_layer=2, dt_rank=4)
    res = run_bench("tiny", lengths=(8, 16), decode_tokens=3, reps=2, baseline_max_length=8, log=lambda _m: None,
                    args=args, dtype="float32")
    seen = {(f["phase"], f["contender"], f.get("length")) for f in res["figures"]}
    for name in ("ksearch", "ksearch_eager", "mlx_lm", "mlx_lm_patched"):
        assert ("decode", name, None) in seen
        assert ("prefill", name, 8) in seen
    assert ("prefill", "mlx_lm", 16) not in seen  # past baseline_max_length
    assert all(f["tok_per_s"] > 0 and f["reps"] == 2 for f in res["figures"])
    s = res["summary"]
    for name in ("ksearch", "ksearch_eager", "mlx_lm_patched"):
        assert s[f"max_abs_diff_{name}_vs_mlx_lm_L8"] < 1e-4 * max(1.0, s["max_abs_logit_mlx_lm_L8"])
    assert {"decode_tok_per_s", "decode_eager_tok_per_s", "decode_ratio_vs_mlx_lm", "prefill_tok_per_s_L16"} <= set(s)
