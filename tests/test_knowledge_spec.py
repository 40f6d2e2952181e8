"""The spec renderer: every built-in task on every backend, whether or not the backend is present here."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksearch.knowledge.analyzer import analyze_cuda
from ksearch.knowledge.spec import render_spec
from ksearch.tasks import all_tasks, get_task

BACKENDS = ("mlx-cuda", "mlx-metal", "mlx-cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_spec_for_every_builtin_task(backend: str) -> None:
    for task in all_tasks():
        text = render_spec(task, backend)
        assert text.startswith(f"# Kernel spec: {task.name} on {backend}")
        for heading in ("## Task:", f"## Dialect: {backend}", "## Hardware:", "## Optimisation patterns",
                        "## Properties a correct kernel keeps", "## Known pitfalls"):
            assert heading in text, (task.name, heading)
        assert "run(" in text
        for f in task.forbidden:
            assert f in text


def test_dialect_specific_content() -> None:
    task = get_task("attention")
    cuda, metal, cpu = (render_spec(task, b) for b in BACKENDS)
    assert "__grid_constant__ Shape" in cuda and "ceil(grid / threadgroup)" in cuda and "H200" in cuda
    assert "constexpr int" in cuda and "init_value" in cuda
    assert "threadgroup_barrier" in metal and "32 KB" in metal and "M3 Max" in metal
    assert "```metal" in metal and "```cuda" in cuda
    assert "NO custom kernels" in cpu and "blocked_attention_ops" in cpu and "```cuda" not in cpu
    assert "causal_lower_right" in cuda


def test_port_context_is_rendered_and_its_patterns_come_first() -> None:
    task = get_task("attention")
    port = analyze_cuda((Path(__file__).parent / "data" / "cuda" / "flash_attention.cu").read_text(), "mlx-metal")
    port["file"] = "flash_attention.cu"
    text = render_spec(task, "mlx-metal", port)
    assert "## Porting context (from a CUDA kernel)" in text and "flash_attention.cu" in text
    first = text.index("### ")
    assert "[named by the CUDA port context]" in text[first:text.index("\n", first)]


def test_unknown_backend_raises() -> None:
    with pytest.raises(ValueError):
        render_spec(get_task("softmax"), "mlx-rocm")
