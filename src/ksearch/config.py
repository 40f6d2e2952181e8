"""Run configuration: defaults < config file (TOML) < environment (KSEARCH_*) < command-line flags."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, get_args, get_type_hints

from ksearch.errors import ConfigError, RunError
from ksearch.files import read_text

SELECTION_RULES = ("weighted", "published")
#: The `profile` setting: profile each refinement cycle's best candidate, every passed candidate, or none.
PROFILE_MODES = ("best", "all", "off")


@dataclass
class SelectionWeights:
    """How the next action is chosen from the frontier (see worldmodel/model.py): `rule` "weighted", the priority V
    with these weights, or "published", the published K-Search ordering (a difficulty cut-off, then score,
    difficulty, rating; the weights unused)."""

    score: float = 1.0
    rating: float = 0.6
    confidence: float = 0.3
    difficulty: float = 0.25
    exploration: float = 0.5
    rule: str = "weighted"


@dataclass
class LLMConfig:
    preset: str = "openai"
    model: str | None = None
    coder_model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float = 0.7
    reasoning_effort: str | None = None
    max_output_tokens: int = 8192
    request_timeout_s: float = 300.0
    max_retries: int = 5
    max_usd: float | None = None
    max_tokens_total: int | None = None
    max_answer_kb: int = 256  # an answer's body past this is refused unread (a proposer error)
    context_tokens: int | None = None  # the model's context window; None: ask the server (llama.cpp, vLLM, Ollama)
    structured_output: bool = True  # JSON-schema response formats for the world-model calls, where supported


@dataclass
class RunConfig:
    task: str = "softmax"
    backend: str = "auto"
    policy: str = "offline"
    strategy: str = "ksearch"
    budget: int = 120
    wall_time_s: float | None = None
    seed: int = 0
    stagnation_window: int = 5
    baseline: str | None = None
    timeout_s: float | None = None
    memory_limit_gb: float = 16.0
    runs_dir: str = "runs"
    from_cuda: str | None = None
    #: This many proposer errors in a row (an endpoint refusing every prompt, a model whose every answer is
    #: unusable) end the run as failed.
    max_consecutive_errors: int = 5
    #: Evaluators judging candidates at once (1: the single-process search, no Ray). More than 1, or ray_address,
    #: spreads evaluations over Ray actors (search/ray_pool.py), on this machine or on a running cluster.
    workers: int = 1
    #: A running Ray cluster to evaluate on: "auto" (the one `ray start` made here) or HOST:PORT.
    ray_address: str | None = None
    #: Hardware counters after the verdict (Nsight Compute on MLX-CUDA, see harness/profile.py): "best", "all", "off".
    profile: str = "best"
    #: At the end of a finished run, its best `confirm_top` candidates timed again `confirm_times` times each, in
    #: turns, by the run's judge (with several evaluators, on one of its workers); the pick, the highest median, is
    #: the run's result (search/confirm.py, search/run_end.py). 0: not at all.
    confirm_top: int = 3
    confirm_times: int = 2
    weights: SelectionWeights = field(default_factory=SelectionWeights)
    llm: LLMConfig = field(default_factory=LLMConfig)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: What a setting of each type takes, in words for the error line that refuses another.
_EXPECTED = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
#: Environment values are text: the words read as true or false.
_TRUTHY = ("1", "true", "yes", "on")
_FALSY = ("0", "false", "no", "off")


def env_switch(name: str, default: bool) -> bool:
    """An on/off environment variable outside the run configuration (KSEARCH_MAMBA_COMPILE, ...): unset or empty
    -> default; the words a boolean setting takes (1/true/yes/on, 0/false/no/off, any case); anything else a
    ConfigError naming the variable, rather than a typo read as on."""
    raw = os.environ.get(name, "")
    word = raw.strip().lower()
    if not word:
        return default
    if word in _TRUTHY or word in _FALSY:
        return word in _TRUTHY
    raise ConfigError(f"{name}={raw!r} is not on or off: set it to 1 or 0 (or unset it for the default, "
                      f"{'1' if default else '0'})")


def _kind(typ: Any) -> Any:
    """A field's type without its `| None`: bool, int, float, str or a settings dataclass."""
    args = [a for a in get_args(typ) if a is not type(None)]
    return args[0] if args else typ


def _shown(value: Any) -> str:
    """A value as its TOML spelling (true, "text", a table), for an error line."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return json.dumps(value) if isinstance(value, bool | str) else repr(value)


def _from_text(value: str, kind: Any) -> Any:
    """An environment value read as the setting's type; the text itself where it does not read as one (refused by
    the type check that follows)."""
    if kind is bool:
        word = value.strip().lower()
        return True if word in _TRUTHY else False if word in _FALSY else value
    try:
        return kind(value) if kind in (int, float) else value
    except ValueError:
        return value


def _is_a(value: Any, kind: Any) -> bool:
    # bool is an int to Python, not to a setting: `budget = true` is a mistake, not 1 evaluation. An int is a
    # number (1 for 1.0); a float is not a whole number (`budget = 3.5` would be cut to 3).
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def _apply(obj: Any, data: dict[str, Any], where: str, prefix: str = "", text: bool = False) -> set[str]:
    """Set obj's settings from data (a TOML table, the environment or flags), each checked against its field's type;
    the keys set. `text`: the values are environment strings, read as their settings' types."""
    known = {f.name for f in fields(obj)}
    types = get_type_hints(type(obj))
    for key, value in data.items():
        path = prefix + key
        name = f"KSEARCH_{path.upper().replace('.', '_')}" if text else path
        if key not in known:
            raise ConfigError(f"{where}: unknown config key {path!r}; known: {', '.join(sorted(known))}")
        kind = _kind(types[key])
        if is_dataclass(kind):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: {name} is {_shown(value)}; expected a table of settings ([{path}] on "
                                  "a line of its own, its keys below it)")
            _apply(getattr(obj, key), value, where, f"{path}.", text)
            continue
        if text and isinstance(value, str):
            value = _from_text(value, kind)
        if value is not None and not _is_a(value, kind):
            raise ConfigError(f"{where}: {name} is {_shown(value)}; expected {_EXPECTED[kind]}")
        setattr(obj, key, float(value) if kind is float and value is not None else value)
    return set(data)


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                environ: dict[str, str] | None = None, need_task: bool = False) -> RunConfig:
    """The run configuration from its layers. need_task: a new run's task must come from one of them (the flag,
    KSEARCH_TASK or `task` in the file); the default task is for code that builds a RunConfig, not for a user."""
    cfg = RunConfig()
    given: set[str] = set()
    if path:
        p = Path(path)
        if p.is_dir():  # read_text's line says "name a file"; this one names the kind
            raise ConfigError(f"config file {p} is a directory; pass a TOML file")
        try:
            given |= _apply(cfg, tomllib.loads(read_text(p, "config file", ConfigError)), str(p))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p} is not valid TOML: {exc}") from exc
    env = os.environ if environ is None else environ
    from_env: dict[str, Any] = {}
    for f in fields(cfg):
        key = f"KSEARCH_{f.name.upper()}"
        if key in env and not is_dataclass(getattr(cfg, f.name)):
            from_env[f.name] = env[key]
    # [llm] settings from KSEARCH_LLM_<NAME> (e.g. KSEARCH_LLM_CONTEXT_TOKENS=8192)
    from_env_llm = {f.name: env[f"KSEARCH_LLM_{f.name.upper()}"] for f in fields(cfg.llm)
                    if f"KSEARCH_LLM_{f.name.upper()}" in env}
    if from_env_llm:
        from_env["llm"] = from_env_llm
    given |= _apply(cfg, from_env, "environment", text=True)
    given |= _apply(cfg, {k: v for k, v in (overrides or {}).items() if v is not None}, "flags")
    if need_task and "task" not in given:
        raise ConfigError("name a task (see `ksearch tasks`): TASK, `task = ...` in --config or KSEARCH_TASK; or pass "
                          "--resume RUN / --replay RUN")
    if cfg.budget < 1:
        raise ConfigError("budget must be at least 1 evaluation")
    if cfg.workers < 1:
        if (overrides or {}).get("workers") is not None:
            named = f"--workers {cfg.workers}"
        elif "KSEARCH_WORKERS" in env:
            named = f"KSEARCH_WORKERS={env['KSEARCH_WORKERS']}"
        else:
            named = f"workers = {cfg.workers} (--config)"
        raise ConfigError(f"{named}: a search needs at least 1 evaluator; set 1 or more")
    if cfg.confirm_top < 0 or cfg.confirm_times < 1:
        raise ConfigError(f"confirm_top {cfg.confirm_top} / confirm_times {cfg.confirm_times}: the best 0 or more "
                          "candidates, timed again 1 or more times (confirm_top 0 leaves it out)")
    if cfg.max_consecutive_errors < 1:
        raise ConfigError("max_consecutive_errors must be at least 1")
    _check_ranges(cfg)
    if cfg.profile not in PROFILE_MODES:
        raise ConfigError(f"profile {cfg.profile!r} is not a profile setting; use one of {', '.join(PROFILE_MODES)}")
    if cfg.weights.rule not in SELECTION_RULES:
        raise ConfigError(f"weights.rule {cfg.weights.rule!r} is not a selection rule; use one of "
                          f"{', '.join(SELECTION_RULES)}")
    return cfg


#: No prompt of ours fits a smaller context window.
MIN_CONTEXT_TOKENS = 512
#: The temperatures OpenAI-compatible endpoints take (OpenAI and Gemini refuse a request outside 0-2).
MAX_TEMPERATURE = 2.0

# Settings that must be above a floor: (where it is read, its name as a flag or key, the floor, whether the floor
# itself is allowed, its unit). A zero or negative limit would end a run before its first evaluation, or time out
# every one.
_FLOORS: tuple[tuple[Any, str, float, bool, str], ...] = (
    (lambda c: c.wall_time_s, "--wall-time (wall_time_s)", 0.0, False, "seconds; leave it out for no limit"),
    (lambda c: c.timeout_s, "--timeout (timeout_s)", 0.0, False, "seconds; leave it out for the backend's default"),
    (lambda c: c.memory_limit_gb, "memory_limit_gb", 0.0, False, "GiB"),
    (lambda c: c.stagnation_window, "stagnation_window", 1, True, "cycles without improvement"),
)
# The same for the [llm] settings, read from an LLMConfig: a policy made from one checks them too.
_LLM_FLOORS: tuple[tuple[Any, str, float, bool, str], ...] = (
    (lambda c: c.max_usd, "--max-usd (llm.max_usd)", 0.0, False, "US dollars; leave it out for no cap"),
    (lambda c: c.max_tokens_total, "llm.max_tokens_total", 1, True, "tokens; leave it out for no cap"),
    (lambda c: c.temperature, "llm.temperature", 0.0, True, ""),
    (lambda c: c.max_output_tokens, "llm.max_output_tokens", 1, True, "tokens"),
    (lambda c: c.request_timeout_s, "llm.request_timeout_s", 0.0, False, "seconds, connect to last byte"),
    (lambda c: c.max_retries, "llm.max_retries", 0, True, "retries of a failed request; 0: none"),
    (lambda c: c.max_answer_kb, "llm.max_answer_kb", 1, True, "KB"),
    (lambda c: c.context_tokens, "llm.context_tokens", MIN_CONTEXT_TOKENS, True,
     "tokens, the model's context window; leave it out to ask the server"),
)


def _check_floors(obj: Any, floors: tuple[tuple[Any, str, float, bool, str], ...]) -> None:
    for read, name, floor, inclusive, unit in floors:
        value = read(obj)
        if value is None or value > floor or (inclusive and value == floor):
            continue
        bound = f"at least {floor:g}" if inclusive else f"above {floor:g}"
        raise ConfigError(f"{name} {value:g}: must be {bound}" + (f" ({unit})" if unit else ""))


def check_llm_settings(llm: LLMConfig) -> None:
    """A ConfigError naming the first [llm] number out of its range, with its value."""
    _check_floors(llm, _LLM_FLOORS)
    if llm.temperature > MAX_TEMPERATURE:
        raise ConfigError(f"llm.temperature {llm.temperature:g}: must be at most {MAX_TEMPERATURE:g} (the range "
                          "OpenAI-compatible endpoints take)")


def _check_ranges(cfg: RunConfig) -> None:
    _check_floors(cfg, _FLOORS)
    check_llm_settings(cfg.llm)


def config_from_json(config: dict[str, Any] | None) -> RunConfig:
    """A run's configuration as its meta stores it (`RunConfig.to_json`), for --resume, --replay and its judge."""
    if not isinstance(config, dict):
        raise RunError("the run has no stored configuration to start from")
    data = dict(config)
    weights = SelectionWeights(**data.pop("weights", {}))
    llm = LLMConfig(**data.pop("llm", {}))
    return RunConfig(**data, weights=weights, llm=llm)
