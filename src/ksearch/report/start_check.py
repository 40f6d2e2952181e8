"""The starting kernel timed against itself: the task's default baseline ("naive") is its starting kernel, so a run
scored against it opens with the same code timed twice, and the start's distance from 1.0x is how far this machine's
timings wandered during the run (every score of the run divides by the one baseline timing)."""

from __future__ import annotations

from ksearch.report.rundata import RunData

#: A start outside [1 / SPREAD, SPREAD] is said. On the 2-core CPU the starter against itself was seen at 0.89x-1.50x
#: in turns of `ksearch eval`, and a search's start at 1.99x while its next runs' baselines took half the time.
SPREAD = 1.25


def start_check(run: RunData) -> str | None:
    """One line when the run's starting kernel, scored against itself, lands far from 1.0x; None otherwise (a start
    near 1.0x, another baseline, or no passed start)."""
    start = next((c for c in run.candidates if c.params.get("family") == "start"), None)
    result = run.search_result(start.id) if start is not None else None
    if start is None or result is None or not result.passed:
        return None
    return start_line(start.id, result.score, result.baseline)


def start_line(candidate: str | None, score: float, baseline: str | None) -> str | None:
    """start_check's line from the start's candidate, score (0 where it did not pass) and baseline."""
    if candidate is None or baseline != "naive" or score <= 0 or 1 / SPREAD <= score <= SPREAD:
        return None
    return (f"{candidate}, the starting kernel, is the naive baseline's own code, yet scored {score:.3f}x against "
            f"it: the same code timed twice came out that far apart, and every score of this run divides by that "
            f"baseline timing (run again on a quieter machine)")
