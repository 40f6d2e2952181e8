"""`ksearch run --from-cuda FILE.cu`: the analyzer's port context reaches the policy and raises pattern priors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ksearch.config import RunConfig
from ksearch.errors import RunError
from ksearch.search.start import create_run, execute

sys.path.insert(0, str(Path(__file__).parent))
from test_search_loop import scripted_judge  # noqa: E402

DATA = Path(__file__).parent / "data" / "cuda"


def test_port_context_raises_priors(tmp_path: Path) -> None:
    from ksearch.knowledge import load_patterns
    from ksearch.knowledge.analyzer import analyze_cuda

    cu = DATA / "reduction.cu"
    ported = set(analyze_cuda(cu.read_text(), "mlx-cpu")["patterns"])
    assert ported
    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=1, runs_dir=str(tmp_path), from_cuda=str(cu))
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge)
    initial = store.world_models()[0]["world_model"]
    priors = {p["id"]: p["prior"]["rating_0_to_10"] for p in load_patterns()}
    nodes = [n for n in initial["decision_tree"]["nodes"] if n.get("pattern_id")]
    assert nodes
    for n in nodes:
        expected = min(10.0, priors[n["pattern_id"]] + (2 if n["pattern_id"] in ported else 0))
        assert n["overall_rating_0_to_10"] == pytest.approx(expected)


def test_missing_cuda_file_is_a_clear_error(tmp_path: Path) -> None:
    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=1, runs_dir=str(tmp_path), from_cuda="nope.cu")
    with pytest.raises(RunError, match="does not exist"):
        create_run(cfg)
    assert not any(tmp_path.iterdir()), "a refused run leaves no run directory"
