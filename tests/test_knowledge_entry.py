"""The linter's entry-point rules: a candidate's `run` exists, is a function, and takes what the harness passes it."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from ksearch.harness.static import check_source
from ksearch.knowledge.diagnostic import Diagnostic
from ksearch.knowledge.entry import check_entry
from ksearch.knowledge.lint import BACKENDS, lint_source
from ksearch.tasks import get_task

OPS = "import mlx.core as mx\n\n\n"


def _errors(source: str, task: str | None = "softmax", backend: str = "mlx-cpu") -> list[tuple[str, int | None]]:
    diags = lint_source(source, backend, get_task(task) if task else None)
    return [(d.code, d.line) for d in diags if d.severity == "error"]


def _messages(source: str, task: str = "softmax") -> list[str]:
    return [d.message for d in lint_source(source, "mlx-cpu", get_task(task))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("source", "expected"), [
    ("", [("no-run", None)]),
    ("def main(x):\n    return x\n", [("no-run", None)]),
    ("def run(y):\n    return y\n", [("run-signature", 1), ("run-signature", 1)]),
    ("run = 5\n", [("run-not-callable", 1)]),
])
def test_every_backend_refuses_a_run_the_harness_cannot_call(backend: str, source: str,
                                                              expected: list[tuple[str, int | None]]) -> None:
    assert _errors(source, backend=backend) == expected


def test_messages_say_what_the_harness_calls() -> None:
    assert "define `def run(x)` at module level" in _messages("def main(x):\n    return x\n")[0]
    assert "define `def run(q, k, v, causal)`" in _messages("", "attention")[0]
    took, required = _messages("def run(y):\n    return y\n")
    assert took.startswith("run() takes no keyword x: the harness calls run(x=...)")
    assert required.startswith("run() requires y, which the harness never passes")
    assert "bound to a constant (5), not a function" in _messages("run = 5\n")[0]


def test_the_workloads_scalar_parameters_are_keywords_too() -> None:
    msg = _messages(OPS + "def run(q, k, v):\n    return q\n", "attention")
    assert len(msg) == 1 and "takes no keyword causal" in msg[0] and "causal=..." in msg[0]
    assert _errors(OPS + "def run(q, k_cache, v_cache):\n    return q\n", "gqa_decode") == [("run-signature", 4)]
    assert _errors(OPS + "def run(q, k_cache, v_cache, length):\n    return q\n", "gqa_decode") == []


@pytest.mark.parametrize("source", [
    "def run(x, **params):\n    return x\n",
    "def run(**inputs):\n    return inputs['x']\n",
    "def run(x, scale=1.0, *, out=None):\n    return x\n",
    "run = lambda x: x\n",
    "def _impl(x):\n    return x\n\n\nrun = _impl\n",
    "def _impl(x):\n    return x\n\n\nrun = mx.compile(_impl)\n",
    "@mx.compile\ndef run(x):\n    return x\n",
    "from functools import partial\n\n\n@partial(mx.compile, shapeless=True)\ndef run(x):\n    return x\n",
    "from ksearch.tasks.starters.softmax_cpu import run\n",
    "run = make_run()\n",  # known only at import time
    "@my_decorator\ndef run(y):\n    return y\n",  # another decorator may change what it accepts
])
def test_what_fits_the_call_or_cannot_be_known_is_accepted(source: str) -> None:
    assert _errors(OPS + source) == []


@pytest.mark.parametrize(("source", "code", "line", "fragment"), [
    ("run = lambda y: y\n", "run-signature", 4, "run (a lambda) takes no keyword x"),
    ("def _impl(y):\n    return y\n\n\nrun = _impl\n", "run-signature", 4, "_impl() (bound to run) takes no keyword x"),
    ("def _impl(y):\n    return y\n\n\nrun = mx.compile(_impl)\n", "run-signature", 4, "_impl()"),
    ("@mx.compile\ndef run(y):\n    return y\n", "run-signature", 5, "run() takes no keyword x"),
    ("def run(x, /):\n    return x\n", "run-signature", 4, "x positional-only: drop the `/`"),
    ("def run(x, *, scale):\n    return x\n", "run-signature", 4, "requires scale, which the harness never passes"),
    ("async def run(x):\n    return x\n", "run-not-callable", 4, "returns a coroutine"),
    ("run = [1, 2]\n", "run-not-callable", 4, "bound to a list ([1, 2])"),
    ("run = 'fast'\n", "run-not-callable", 4, "bound to a constant ('fast')"),
    ("def run(x):\n    return x\n\n\nrun = None\n", "run-not-callable", 8, "bound to a constant (None)"),
])
def test_what_the_harness_cannot_call_is_an_error(source: str, code: str, line: int, fragment: str) -> None:
    diags = [d for d in lint_source(OPS + source, "mlx-cpu", get_task("softmax")) if d.severity == "error"]
    assert [(d.code, d.line) for d in diags][:1] == [(code, line)]
    assert fragment in diags[0].message


def test_without_a_task_only_existence_and_callability_are_checked() -> None:
    assert _errors("def run(y):\n    return y\n", task=None) == []
    assert _errors("run = 5\n", task=None) == [("run-not-callable", 1)]
    (diag,) = lint_source("", "mlx-cpu")
    assert diag.code == "no-run" and "taking the task's inputs and scalar parameters by name" in diag.message


def test_a_parameter_some_workloads_lack_needs_a_default() -> None:
    softmax = get_task("softmax")
    w = softmax.workloads[0]
    task = dataclasses.replace(softmax, workloads=[dataclasses.replace(w, params={"scale": 2.0}),
                                                   dataclasses.replace(w, name="plain")])
    tree = ast.parse("def run(x, scale):\n    return x\n")
    (problem,) = check_entry(tree, task)
    assert problem.code == "run-signature" and "does not pass in workload plain" in problem.message
    assert check_entry(ast.parse("def run(x, scale=1.0):\n    return x\n"), task) == []
    assert "define `def run(x, scale=None)`" in check_entry(ast.parse(""), task)[0].message


def test_a_task_with_its_own_input_generator_leaves_the_parameters_unchecked() -> None:
    task = dataclasses.replace(get_task("softmax"), generator=lambda w, seed: {})
    assert check_entry(ast.parse("def run(y):\n    return y\n"), task) == []
    assert [p.code for p in check_entry(ast.parse("run = 5\n"), task)] == ["run-not-callable"]


def test_the_harness_and_the_linter_agree_on_where_run_is_bound() -> None:
    # Bound only inside an `if` (or a class of that name): the harness refuses it before any worker starts.
    for source in ("if True:\n    def run(x):\n        return x\n", "class run:\n    pass\n"):
        assert check_source(source).status == "compile_error"
        assert _errors(source) == [("no-run", None)]
    # An annotated binding is one too.
    annotated = "from typing import Any\n\nrun: Any = lambda x: x\n"
    assert check_source(annotated).status is None and _errors(annotated) == []


@pytest.mark.parametrize(("source", "fragment"), [
    ("def run(y):\n    return y\n", "lint: error [run-signature] line 1: run() takes no keyword x"),
    ("run = 5\n", "lint: error [run-not-callable] line 1: run is bound to a constant (5)"),
])
def test_the_harness_refuses_such_a_candidate_before_a_worker_starts(source: str, fragment: str) -> None:
    from ksearch.backends import Backend
    from ksearch.harness.evaluator import EvalOptions, EvalResult, Evaluator
    from ksearch.harness.measure import Fail

    evaluator = Evaluator(get_task("softmax"), Backend("mlx-cpu", "cpu"))
    with pytest.raises(Fail) as fail:
        evaluator._static(source, EvalOptions(), EvalResult(status="passed"))
    assert fail.value.status == "compile_error" and fail.value.message.startswith(fragment)


def test_diagnostics_read_like_the_other_rules() -> None:
    (diag,) = lint_source("run = 5\n", "mlx-cuda")
    assert isinstance(diag, Diagnostic)
    assert str(diag).startswith("error [run-not-callable] line 1: ")
    assert diag.to_json()["line"] == 1
