"""Charts as SVG text (for the HTML report) or files (PNG/SVG for `compare`), drawn with matplotlib's Agg backend.

matplotlib is imported lazily: the terminal summary and `watch` must not pay for it.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from ksearch.report.rundata import Attempt

#: One colour per evaluation status; failures share warm colours so that the eye groups them.
STATUS_COLORS = {
    "passed": "#2e7d32",
    "wrong_answer": "#c62828",
    "wrong_shape": "#ad1457",
    "runtime_error": "#e65100",
    "compile_error": "#f9a825",
    "timeout": "#6d4c41",
    "forbidden": "#4a148c",
}
SERIES = ["#1565c0", "#e65100", "#2e7d32", "#6a1b9a", "#00838f", "#c62828", "#5d4037", "#455a64"]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    # Text stays text in the SVG (smaller, selectable); a fixed salt keeps ids stable between two reports of one run.
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "ksearch", "font.size": 9,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _int_ticks() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)  # evaluations are counted, never fractional


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    # Inline SVG in HTML must not carry an XML prolog or a DOCTYPE.
    text = re.sub(r"^<\?xml[^>]*>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    # The RDF metadata (creator, date) changes on every call and says nothing to a reader.
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)


def trajectory_svg(attempts: list[Attempt], title: str = "score per evaluation") -> str:
    """Every search evaluation as a dot (coloured by status, failures at 0) and the best-so-far step line."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.0, 3.2))
    try:
        if attempts:
            xs = [a.n for a in attempts]
            ax.step(xs, [a.best_so_far for a in attempts], where="post", color="#1565c0", lw=2, label="best so far")
            for status in dict.fromkeys(a.status for a in attempts):
                pts = [a for a in attempts if a.status == status]
                # Failures score 0: crosses on the axis line stay visible where dots would vanish into it.
                ax.scatter([a.n for a in pts], [a.score for a in pts], s=22 if status == "passed" else 36,
                           marker="o" if status == "passed" else "x", zorder=3, clip_on=False,
                           color=STATUS_COLORS.get(status, "#757575"), label=status.replace("_", " "))
            ax.axhline(1.0, color="#9e9e9e", lw=0.8, ls="--")
            # Below the axes: inside, the legend hid the early points of short runs.
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, frameon=False, ncol=7)
        else:
            ax.text(0.5, 0.5, "no evaluations yet", ha="center", va="center", transform=ax.transAxes)
        ax.xaxis.set_major_locator(_int_ticks())
        ax.set_xlabel("evaluation (budget used)")
        ax.set_ylabel("score (geomean speedup)")
        ax.set_title(title, loc="left", fontsize=10)
        ax.set_ylim(bottom=0)
        return _svg(fig)
    finally:
        plt.close(fig)


def compare_figure(curves: list[tuple[str, list[float]]], title: str) -> Any:
    """Best-so-far curves of several runs on one chart (x: evaluations, y: best score)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.0, 4.0))
    for i, (label, ys) in enumerate(curves):
        if ys:
            ax.step(range(1, len(ys) + 1), ys, where="post", lw=2, color=SERIES[i % len(SERIES)], label=label)
    ax.axhline(1.0, color="#9e9e9e", lw=0.8, ls="--")
    ax.xaxis.set_major_locator(_int_ticks())
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best score so far (geomean speedup)")
    ax.set_title(title, loc="left", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    return fig


def compare_svg(curves: list[tuple[str, list[float]]], title: str) -> str:
    plt = _plt()
    fig = compare_figure(curves, title)
    try:
        return _svg(fig)
    finally:
        plt.close(fig)


def save_compare(curves: list[tuple[str, list[float]]], title: str, out: Path) -> None:
    plt = _plt()
    fig = compare_figure(curves, title)
    try:
        fig.savefig(out, format=out.suffix.lstrip(".").lower(), bbox_inches="tight", dpi=150)
    finally:
        plt.close(fig)
