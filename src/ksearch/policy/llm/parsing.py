"""Getting code and JSON out of a model's answer.

Code is returned exactly as the model wrote it between the fences: no reformatting, no literal rewriting. (A
published K-Search cleaning step turned the hex float 0x1.715476p+0, log2(e), into 2.718 and silently broke
kernels.) Every failure comes with a reason phrased for the model, because the reason becomes the repair
prompt; it depends only on the answer's text, so a replayed run builds the same repair prompt.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

# Reasoning models served locally (DeepSeek-R1, Qwen3) often think aloud inside these tags before answering.
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(
    r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE
)
_OPEN_FENCE = re.compile(r"^[ \t]*```[ \t]*(python|py)\b", re.MULTILINE | re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


@dataclass
class Parsed:
    value: Any  # str for code, dict for JSON; None when `problem` says why not
    problem: str | None = None


def strip_thinking(text: str) -> str:
    text = _THINK.sub("", text)
    # An unclosed <think> (cut off while thinking) leaves nothing usable after it.
    low = text.lower()
    return text[: low.index("<think>")] if "<think>" in low else text


def extract_code(text: str, entry: str = "run") -> Parsed:
    """The candidate's source: the last ```python block that defines `entry` (else the last python block)."""
    text = strip_thinking(text)
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    python = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    unlabeled = [b for lang, b in blocks if lang == ""]
    defines = re.compile(rf"^\s*def\s+{re.escape(entry)}\s*\(", re.MULTILINE)
    for pool in (python, unlabeled):
        with_entry = [b for b in pool if defines.search(b)]
        if with_entry:
            return Parsed(with_entry[-1])
    if python:
        return Parsed(
            None,
            f"the ```python block does not define `def {entry}(...)`; the candidate must define "
            f"{entry}(**inputs)",
        )
    if _OPEN_FENCE.search(text):
        return Parsed(
            None,
            "the ```python block is not closed (the answer was probably cut off); send the complete "
            "code, shorter if need be",
        )
    # Small local models sometimes answer with bare code; accept it only if it is valid Python defining the
    # entry.
    bare = text.strip()
    if bare and defines.search(bare):
        try:
            ast.parse(bare)
            return Parsed(bare + "\n")
        except SyntaxError:
            pass
    return Parsed(None, "there is no ```python code block in the answer")


def extract_json(text: str, required: tuple[str, ...] = ()) -> Parsed:
    """The first JSON object in the answer that has every key in `required`."""
    text = strip_thinking(text).strip()
    candidates: list[str] = [text]
    candidates += [body for lang, body in _FENCE.findall(text) if lang.lower() in ("json", "")]
    parse_error: str | None = None
    shape_problem: str | None = None  # an object parsed but is not what was asked: the more useful complaint
    for cand in candidates:
        for attempt in (cand, _TRAILING_COMMA.sub(r"\1", cand)):
            try:
                obj = json.loads(attempt)
            except json.JSONDecodeError as exc:
                parse_error = parse_error or f"{exc.msg} at line {exc.lineno} column {exc.colno}"
                continue
            found = _check(obj, required)
            if found.problem is None:
                return found
            shape_problem = shape_problem or found.problem
    # Prose around the object: try every '{' as the start of one (raw_decode stops at the object's end).
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        for src in (text, _TRAILING_COMMA.sub(r"\1", text)):
            try:
                obj, _ = decoder.raw_decode(src, m.start())
            except json.JSONDecodeError:
                continue
            found = _check(obj, required)
            if found.problem is None:
                return found
            break  # an inner object of a broken whole says nothing about what is wrong with the whole
    if shape_problem:
        return Parsed(None, shape_problem)
    if "{" not in text:
        return Parsed(None, "there is no JSON object in the answer")
    return Parsed(None, f"the JSON does not parse or is incomplete ({parse_error})")


def _check(obj: Any, required: tuple[str, ...]) -> Parsed:
    if not isinstance(obj, dict):
        return Parsed(None, f"the answer is a JSON {type(obj).__name__}, not an object")
    missing = [k for k in required if k not in obj]
    if missing:
        return Parsed(None, f"the JSON object lacks the key(s) {', '.join(missing)}")
    return Parsed(obj)
