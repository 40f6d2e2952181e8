"""Every error ksearch raises on purpose, in one tree.

    KSearchError
    ├── UsageError           bad input from a user: the CLI prints `error: <first line>` and exits 2
    │   ├── ConfigError, TaskNotFound, BackendUnavailable, LLMConfigError
    │   ├── RunError, RunNotFound, RunUnreadable, ReplayMismatch
    │   └── ExportError, IntegrationError
    ├── PolicyError          a proposer failure the search counts and survives
    │   └── CallFailed
    ├── BudgetExhausted      the proposer's spending cap: the search stops cleanly
    ├── WorldModelError, EditRejected
    ├── ProtocolError, Deadline, WorkerDied, ForbiddenAPIError   (the harness and its workers)
    └── MetalEmuError        a Metal kernel the emulation rejects or catches failing (compile_error / runtime_error)

Several classes also derive from the builtin they were before (ValueError, LookupError, RuntimeError), so that an
`except ValueError` written against them keeps working. The messages are written for the reader of one line: what
went wrong and what to do next.

Not here, on purpose: signals that steer control flow without being errors (search.bookkeeping.StopSearch,
search.start.Terminated, which must pass `except Exception` like KeyboardInterrupt) and exceptions private to one
module (harness.measure.Fail carries a candidate's verdict, knowledge.extract.Unresolved marks an expression that
is not a constant).

This module imports nothing from ksearch: every room may import it.
"""

from __future__ import annotations


class KSearchError(Exception):
    """The base of every error ksearch raises on purpose; anything else escaping is a bug."""


class UsageError(KSearchError):
    """Bad input from a user (a flag, a file, a name, a run that cannot do what was asked). The message is one line
    that says what to do; the CLI prints it as `error: ...` and exits 2."""


# -- usage errors ------------------------------------------------------------------------------------------------------


class ConfigError(UsageError, ValueError):
    """A run configuration (file, environment or flag) that cannot be used."""


class TaskNotFound(UsageError, LookupError):
    """No built-in task by that name, or a task file that does not load."""


class BackendUnavailable(UsageError, RuntimeError):
    """An unknown backend name, or one that this machine does not have."""


class LLMConfigError(UsageError, ValueError):
    """The LLM settings cannot work (unknown preset, unset key variable, bad price table)."""


class RunError(UsageError, ValueError):
    """A run cannot start or continue as asked (unknown strategy, a resume with no room left, ...)."""


class RunNotFound(UsageError, LookupError):
    """No run by that id or path."""


class RunUnreadable(UsageError):
    """The run directory exists but its database cannot be read (corrupt, locked, wrong schema)."""


class ReplayMismatch(UsageError, RuntimeError):
    """A replayed run asked for something its recording cannot answer: a proposer call (a prompt differs, or the
    recording ran out) or an evaluation (the candidate differs from the recorded one).

    Not a PolicyError on purpose: the search must stop here, not count it and carry on with a diverged replay.
    """


class ExportError(UsageError):
    """Nothing to export, or the run's task cannot be loaded."""


class IntegrationError(UsageError, RuntimeError):
    """A library an integration patches is missing or too old (mlx-lm for the Mamba patch)."""


# -- the proposer ------------------------------------------------------------------------------------------------------


class PolicyError(KSearchError, RuntimeError):
    """A proposer failure the search counts, logs and survives (an LLM that times out, an unusable answer)."""


class CallFailed(PolicyError):
    """One LLM call failed for good (retries exhausted, or an error that retrying cannot fix)."""

    def __init__(self, message: str, retries: int = 0, latency_s: float = 0.0) -> None:
        super().__init__(message)
        self.retries = retries
        self.latency_s = latency_s


class AnswerTooLarge(CallFailed):
    """The answer's body passed the size cap ([llm] max_answer_kb): refused unread past the cap, never parsed
    or stored; the message gives its size and its first bytes."""

    def __init__(self, message: str, retries: int = 0, latency_s: float = 0.0, size: int = 0) -> None:
        super().__init__(message, retries, latency_s)
        self.size = size


class ContextTooSmall(CallFailed):
    """The server refused the prompt as longer than the model's context; the message is one line saying what
    to do (and, where the server named it, the context size, which later prompts are fitted to)."""


class BudgetExhausted(KSearchError, RuntimeError):
    """The proposer's own spending cap (tokens / USD) is reached: the run stops cleanly. `cap` names which one
    ("tokens" or "usd")."""

    def __init__(self, message: str, cap: str = "usd") -> None:
        super().__init__(message)
        self.cap = cap


# -- the world model ---------------------------------------------------------------------------------------------------


class WorldModelError(KSearchError, ValueError):
    """The world-model JSON is invalid (not JSON, wrong structure, not a tree). The message is one line."""


class EditRejected(KSearchError, ValueError):
    """A world-model edit violates a rule. The message is written for the proposer, who may try again.

    Not a WorldModelError: code that checks a model catches WorldModelError and must not swallow a rejected edit.
    """


# -- the harness -------------------------------------------------------------------------------------------------------


class ProtocolError(KSearchError, RuntimeError):
    """A worker sent something that is not a valid frame (or went away)."""


class Deadline(KSearchError, RuntimeError):
    """No complete frame arrived from a worker before the deadline."""


class WorkerDied(KSearchError, RuntimeError):
    """A worker process ended or was killed before it answered."""

    def __init__(self, message: str, kind: str = "crash") -> None:
        super().__init__(message)
        self.kind = kind  # crash | memory | timeout | protocol


class ForbiddenAPIError(KSearchError, RuntimeError):
    """Raised inside a candidate's worker when the candidate calls an API its task forbids."""


# -- the Metal emulation -----------------------------------------------------------------------------------------------


class MetalEmuError(KSearchError, RuntimeError):
    """A Metal kernel the emulation (ksearch.metalemu) cannot compile, or caught failing while it ran: an MSL
    construct it does not support, threadgroup memory past the limit, an out-of-bounds access, a race on
    threadgroup memory, a barrier not every thread reaches, a shuffle from outside the simdgroup.

    `status` is the harness status it maps to ('compile_error' or 'runtime_error'); `kernel` names the kernel (its
    host name when known); `line` is the 1-based line in the MSL source handed to the emulation (None when unknown);
    `body_line` the same line counted from the first line of the kernel's body (None outside a body); `kind` a short
    machine-readable name of the check ('out_of_bounds', 'threadgroup_race', 'barrier_divergence', ...).
    """

    def __init__(self, message: str, status: str = "runtime_error", kernel: str = "", line: int | None = None,
                 body_line: int | None = None, kind: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.kernel = kernel
        self.line = line
        self.body_line = body_line
        self.kind = kind
