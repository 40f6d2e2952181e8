"""The HTML report opened in headless Chromium: what a person sees, not what the template meant to write.

Console messages are caught from Chromium's own log (`--enable-logging=stderr`), whose CONSOLE lines carry every
console call and every uncaught exception; a deliberately broken page checks that this channel still works, so a
change in Chromium's log format fails loudly instead of letting errors through.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_report_fakerun import make_fake_run

from ksearch.report.html import write_html
from ksearch.report.rundata import load_run, wm_nodes

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]\s*(.*)")


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("SKIPPED LOUDLY: headless Chromium is not installed (apt-get install -y chromium); "
                    "the rendered HTML report is not checked")
    return exe


def render(page: Path, tmp: Path, *extra: str) -> tuple[str, list[str]]:
    """(DOM after scripts ran, console messages) of a local page."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    proc = subprocess.run(
        [_chromium(), *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *extra,
         page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [m.group(1) for m in map(CONSOLE.search, proc.stderr.splitlines()) if m]
    return proc.stdout, console


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("runs")
    run_dir = make_fake_run(base)
    out = base / "report.html"
    write_html(load_run(run_dir), out)
    return run_dir, out


def test_console_capture_sees_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom-1'); notDefined();</script></body></html>")
    _, console = render(bad, tmp_path, "--dump-dom")
    assert any("boom-1" in m for m in console), console
    assert any("notDefined" in m for m in console), console


def test_rendered_report(report: tuple[Path, Path], tmp_path: Path) -> None:
    run_dir, page = report
    dom, console = render(page, tmp_path, "--dump-dom")
    assert console == [], f"console messages: {console}"
    wm = load_run(run_dir).world_model()
    assert wm is not None
    # One rendered card per world-model node; the inline script counted them after load.
    assert dom.count('class="wm-node ') == len(wm_nodes(wm)) == 7
    assert f'data-ready="{len(wm_nodes(wm))}"' in dom
    assert dom.count("best-path") >= 3 and 'data-node-id="n2"' in dom
    chart = dom[dom.index('id="trajectory-chart"'):]
    assert "<svg" in chart[:500]
    assert "Multiply by the reciprocal of the sum" in dom
    # Text from the world model is escaped, never executed.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert dom.count("<script") == 1
    assert "backtrack" in dom and "too hard" in dom
    for section in ("workloads", "source", "spend", "events", "evaluations"):
        assert f'id="{section}"' in dom
    assert "cpu_100x3000_f32" in dom and "holdout" in dom
    assert "0.0324" in dom  # the spend


def test_report_is_offline(report: tuple[Path, Path]) -> None:
    html = report[1].read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "the page must not fetch anything"
    assert "@import" not in html


def test_screenshot_artifact(report: tuple[Path, Path], tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    shutil.copy(report[1], ARTIFACTS / "report.html")
    _, console = render(report[1], tmp_path, "--window-size=1280,3600", f"--screenshot={shot}")
    assert console == []
    assert shot.is_file() and shot.stat().st_size > 50_000  # a real page, not a blank one


def test_empty_run_renders(tmp_path: Path) -> None:
    """A run that has just started (no evaluation, no world model) still gives a page without errors."""
    from ksearch.store import RunStore

    store = RunStore(tmp_path / "fresh", create=True)
    store.set_meta("task", "softmax")
    store.set_meta("status", "running")
    store.close()
    out = tmp_path / "fresh.html"
    write_html(load_run(tmp_path / "fresh"), out)
    dom, console = render(out, tmp_path, "--dump-dom")
    assert console == []
    assert "No world-model snapshot" in dom and "<svg" in dom
