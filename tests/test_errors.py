"""One exception tree: every error ksearch raises on purpose is a KSearchError, bad input is a UsageError (one line,
exit 2 through the CLI), and the builtin bases that callers catch are kept."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch import errors
from ksearch.cli import app
from ksearch.errors import KSearchError, UsageError

SRC = Path(errors.__file__).parent

USAGE = {"ConfigError": ValueError, "TaskNotFound": LookupError, "BackendUnavailable": RuntimeError,
         "LLMConfigError": ValueError, "RunError": ValueError, "RunNotFound": LookupError, "RunUnreadable": None,
         "ReplayMismatch": RuntimeError, "ExportError": None, "IntegrationError": RuntimeError}
OTHER = {"PolicyError": RuntimeError, "CallFailed": RuntimeError, "BudgetExhausted": RuntimeError,
         "WorldModelError": ValueError, "EditRejected": ValueError, "ProtocolError": RuntimeError,
         "Deadline": RuntimeError, "WorkerDied": RuntimeError, "ForbiddenAPIError": RuntimeError,
         "AnswerTooLarge": RuntimeError, "ContextTooSmall": RuntimeError, "MetalEmuError": RuntimeError}


def _classes() -> dict[str, type[BaseException]]:
    return {n: c for n, c in vars(errors).items() if inspect.isclass(c) and issubclass(c, BaseException)}


def test_the_tree() -> None:
    classes = _classes()
    assert set(classes) == {"KSearchError", "UsageError", *USAGE, *OTHER}
    for name, builtin in USAGE.items():
        assert issubclass(classes[name], UsageError), name
        assert builtin is None or issubclass(classes[name], builtin), name
    for name, builtin in OTHER.items():
        assert issubclass(classes[name], KSearchError) and not issubclass(classes[name], UsageError), name
        assert issubclass(classes[name], builtin), name
    # A proposer failure is survived, a diverged replay is not; a rejected edit is not a broken model.
    assert not issubclass(errors.ReplayMismatch, errors.PolicyError)
    assert not issubclass(errors.EditRejected, errors.WorldModelError)


def test_errors_are_defined_once() -> None:
    """Outside errors.py, an exception class is private to its module (a signal or a carrier, not a shared error)."""
    public = []
    for path in SRC.rglob("*.py"):
        if path.name == "errors.py" or "starters" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & {"Exception", "BaseException", "ValueError", "RuntimeError", "LookupError",
                            *_classes()}:
                    public.append(f"{path.relative_to(SRC)}:{node.name}")
    # Signals, not errors: the end of the budget, SIGTERM, an expression the static evaluator cannot reduce, and the
    # LLM transport's own signals (a late, malformed or oversized answer), each turned into CallFailed in client.py.
    # A candidate's verdict other than passed travels as harness.measure.Fail from where it is found to the result.
    assert sorted(public) == ["harness/measure.py:Fail", "knowledge/extract.py:Unresolved", "policy/llm/answers.py:Malformed",
                              "policy/llm/answers.py:TooLarge", "policy/llm/deadline.py:DeadlineExceeded",
                              "search/bookkeeping.py:StopSearch", "search/start.py:Terminated"]


def test_one_replay_mismatch() -> None:
    from ksearch.policy.llm import replay as llm_replay
    from ksearch.search import replay as search_replay

    assert llm_replay.ReplayMismatch is search_replay.ReplayMismatch is errors.ReplayMismatch


@pytest.mark.parametrize("args,line", [
    (["spec", "nope"], "error: unknown task 'nope'"),
    (["report", "no-such-run", "--runs-dir", "."], "error: no run 'no-such-run'"),
    (["llm", "ping", "--preset", "nope"], "error: unknown LLM preset 'nope'"),
])
def test_a_usage_error_from_the_core_is_one_line_and_exit_2(args: list[str], line: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(line), res.output
