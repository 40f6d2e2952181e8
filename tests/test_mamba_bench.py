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


def test_bench_mamba_refuses_an_mlx_lm_too_old_to_patch_before_timing(tmp_path) -> None:
    # an mlx-lm whose MambaBlock has no _process_sequence (0.21.1 and older) shadows the installed one
    import os
    import subprocess
    import sys

    fake = tmp_path / "fake"
    (fake / "mlx_lm" / "models").mkdir(parents=True)
    (fake / "mlx_lm" / "__init__.py").write_text("")
    (fake / "mlx_lm" / "models" / "__init__.py").write_text("")
    (fake / "mlx_lm" / "models" / "mamba.py").write_text("class MambaBlock:\n    pass\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(fake)}
    proc = subprocess.run([sys.executable, "-m", "ksearch.cli", "bench", "mamba", "--model-config", "130m",
                           "--out", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    said = " ".join(proc.stderr.split())
    assert "0.21.2 and later" in said and "--no-compare" in said and "Traceback" not in proc.stderr
    assert not out.exists() or not list(out.iterdir())
