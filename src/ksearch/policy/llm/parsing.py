"""Getting code and JSON out of a model's answer.

Code is returned exactly as the model wrote it between the fences: no reformatting, no literal rewriting. (A
published K-Search cleaning step turned the hex float 0x1.715476p+0, log2(e), into 2.718 and silently broke
kernels.) Every failure comes with a reason phrased for the model, because the reason becomes the repair
prompt; it depends only on the answer's text, so a replayed run builds the same repair prompt.

Every function here runs in time linear in the answer's length and refuses JSON nested deeper than
MAX_DEPTH, whatever the answer holds: a hostile or runaway answer (a megabyte of '{', ten thousand nested
arrays, a flood of unclosed fences) costs a fraction of a second and gives a problem string, never a
RecursionError or minutes of CPU.
"""

from __future__ import annotations

import ast
import json
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

#: Deepest JSON nesting accepted ({ and [ both count). A world model or an edit needs about 8.
MAX_DEPTH = 32
#: JSON objects parsed per answer at most, so that a flood of small objects stays cheap.
MAX_CANDIDATES = 64
#: JSON objects (nested ones included) located per answer at most; a world model holds about a hundred.
MAX_SPANS = 4096

# Reasoning models served locally (DeepSeek-R1, Qwen3) often think aloud inside these tags before answering.
_THINK_TAG = re.compile(r"<(/?)think>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*")
_FENCE_CLOSE = re.compile(r"[ \t]*```[ \t]*")
_OPEN_PYTHON_FENCE = re.compile(r"^[ \t]*```[ \t]*(python|py)\b", re.MULTILINE | re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
# Outside strings only these characters matter to the JSON scanner; a string is skipped in one regex step.
_SIGNIFICANT = re.compile(r'[{}\[\]"]')
_STRING_BODY = re.compile(r'[^"\\\n]*(?:\\.[^"\\\n]*)*')


@dataclass
class Parsed:
    value: Any  # str for code, dict for JSON; None when `problem` says why not
    problem: str | None = None


def strip_thinking(text: str) -> str:
    """The answer without <think>...</think> blocks; an unclosed <think> (cut off while thinking) leaves
    nothing usable after it."""
    out: list[str] = []
    pos = 0
    opened: int | None = None
    for m in _THINK_TAG.finditer(text):
        closing = m.group(1) == "/"
        if opened is None and not closing:
            out.append(text[pos : m.start()])
            opened = m.start()
        elif opened is not None and closing:
            opened = None
            pos = m.end()
    if opened is None:
        out.append(text[pos:])
    return "".join(out)


def fenced_blocks(text: str) -> list[tuple[str, str, int, int]]:
    """The ```-fenced blocks of `text`: (language, body, body start, body end), in order.

    A block opens at a line starting with ``` (optionally a language) and closes at the next line that is only
    ```; an unclosed block is not a block. Only lines holding ``` are looked at, each once.
    """
    blocks: list[tuple[str, str, int, int]] = []
    lang: str | None = None
    body_start = 0
    pos = 0  # always the start of a line
    n = len(text)
    while True:
        k = text.find("```", pos)
        if k < 0:
            break
        line_start = text.rfind("\n", pos, k) + 1 or pos
        nl = text.find("\n", k)
        line_end = n if nl < 0 else nl
        if lang is None:
            m = _FENCE_OPEN.fullmatch(text, line_start, line_end)
            if m is not None and nl >= 0:
                lang = m.group(1)
                body_start = nl + 1
        elif _FENCE_CLOSE.fullmatch(text, line_start, line_end):
            blocks.append((lang, text[body_start:line_start], body_start, line_start))
            lang = None
        if nl < 0:
            break
        pos = nl + 1
    return blocks


def extract_code(text: str, entry: str = "run") -> Parsed:
    """The candidate's source: the last ```python block that defines `entry` (else the last python block)."""
    text = strip_thinking(text)
    blocks = [(lang.lower(), body) for lang, body, _s, _e in fenced_blocks(text)]
    python = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    unlabeled = [b for lang, b in blocks if lang == ""]
    defines = re.compile(rf"^[ \t]*def[ \t]+{re.escape(entry)}[ \t]*\(", re.MULTILINE)
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
    if _OPEN_PYTHON_FENCE.search(text):
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
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
    return Parsed(None, "there is no ```python code block in the answer")


@dataclass
class _Scan:
    """Where the JSON objects of an answer are: one pass, aware of strings, depth-bounded."""

    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, depth) of closed objects
    too_deep_at: int | None = None  # where nesting passed MAX_DEPTH (the scan stopped there)
    crowded: bool = False  # more than MAX_SPANS objects (the scan stopped there)
    unclosed: bool = False  # the answer ends inside an object


def _scan(text: str) -> _Scan:
    scan = _Scan()
    stack: list[int] = []  # positions of the open brackets
    n = len(text)
    i = 0
    while True:
        if not stack:
            # Between objects only '{' matters (quotes and brackets in prose do not); a '[' starts something
            # only as the very first character of the answer.
            j = 0 if i == 0 and text.startswith("[") else text.find("{", i)
            if j < 0:
                break
            stack.append(j)
            i = j + 1
            continue
        m = _SIGNIFICANT.search(text, i)
        if m is None:
            break
        i = m.start()
        c = text[i]
        if c == '"':
            j = _STRING_BODY.match(text, i + 1).end()  # type: ignore[union-attr]
            if j < n and text[j] == '"':
                i = j + 1
            elif j >= n:  # the answer ends inside a string: cut off
                break
            else:  # a raw newline inside a string: whatever was open is not JSON
                stack.clear()
                i = j + 1
            continue
        if c in "{[":
            if len(stack) >= MAX_DEPTH:
                scan.too_deep_at = i
                return scan
            stack.append(i)
        else:
            start = stack.pop()
            if (text[start] == "{") != (c == "}"):
                stack.clear()  # mismatched brackets: not JSON
            elif c == "}" or start == 0:
                scan.spans.append((start, i + 1, len(stack)))
                if len(scan.spans) >= MAX_SPANS:
                    scan.crowded = True
                    return scan
        i += 1
    scan.unclosed = bool(stack)
    return scan


def extract_json(text: str, required: tuple[str, ...] = ()) -> Parsed:
    """The first JSON object in the answer that has every key in `required` (one in a ```json block first)."""
    text = strip_thinking(text).strip()
    if "{" not in text and not text.startswith("["):
        return Parsed(None, "there is no JSON object in the answer")
    scan = _scan(text)
    fences = [(s, e) for lang, _b, s, e in fenced_blocks(text) if lang.lower() in ("json", "")]
    starts = [s for s, _e in fences]

    def in_fence(span: tuple[int, int, int]) -> bool:
        k = bisect_right(starts, span[0]) - 1
        return k >= 0 and span[1] <= fences[k][1]

    # Spans are appended when they close (inner before outer); try them by start, outer first, fenced first.
    spans = sorted(scan.spans, key=lambda sp: sp[0])
    ordered = [sp for sp in spans if in_fence(sp)] + [sp for sp in spans if not in_fence(sp)]
    parse_error: str | None = None
    shape_problem: str | None = None  # an object parsed but is not what was asked: the more useful complaint
    attempts = 0
    covered_until = -1  # the end of the last object that parsed: the objects inside it are its parts
    previous_fenced = True
    for start, end, depth in ordered:
        fenced = in_fence((start, end, depth))
        if fenced != previous_fenced:
            covered_until = -1
            previous_fenced = fenced
        if start < covered_until:
            continue
        if attempts >= MAX_CANDIDATES:
            return Parsed(None, shape_problem or f"no usable JSON object among the first {MAX_CANDIDATES} in the "
                          "answer; send ONE object")
        attempts += 1
        obj, error = _loads(text, start, end)
        if error is not None:
            parse_error = parse_error or error
            continue  # the objects inside a broken whole are tried next
        covered_until = end
        found = _check(obj, required)
        if found.problem is None:
            return found
        if depth == 0:  # an inner object of a broken whole says nothing about what is wrong with the whole
            shape_problem = shape_problem or found.problem
    if scan.crowded:
        return Parsed(None, f"the answer holds more than {MAX_SPANS} JSON objects; send ONE object shaped as asked")
    if scan.too_deep_at is not None:
        return Parsed(
            None,
            f"the JSON is nested more than {MAX_DEPTH} levels deep (from character {scan.too_deep_at}); "
            "send one object shaped as asked",
        )
    if shape_problem:
        return Parsed(None, shape_problem)
    if scan.unclosed:
        return Parsed(
            None,
            "the JSON does not parse or is incomplete (the answer ends inside an object: it was probably cut "
            "off; send the complete object, shorter if need be)",
        )
    return Parsed(None, f"the JSON does not parse or is incomplete ({parse_error or 'no object is closed'})")


def _loads(text: str, start: int, end: int) -> tuple[Any, str | None]:
    src = text[start:end]
    first: str | None = None
    for attempt in (src, _TRAILING_COMMA.sub(r"\1", src)):
        try:
            return json.loads(attempt), None
        except json.JSONDecodeError as exc:
            if first is None:
                at = start + exc.pos
                line = text.count("\n", 0, at) + 1
                col = at - (text.rfind("\n", 0, at) + 1) + 1
                first = f"{exc.msg} at line {line} column {col}"
        except (ValueError, RecursionError) as exc:  # depth is bounded by the scan; this is the safety net
            first = first or f"{type(exc).__name__}"
    return None, first


def _check(obj: Any, required: tuple[str, ...]) -> Parsed:
    if not isinstance(obj, dict):
        return Parsed(None, f"the answer is a JSON {type(obj).__name__}, not an object")
    missing = [k for k in required if k not in obj]
    if missing:
        return Parsed(None, f"the JSON object lacks the key(s) {', '.join(missing)}")
    return Parsed(obj)


def excerpt(text: str, limit: int = 600) -> str:
    """At most about `limit` characters of `text`: its head and tail around a note of what was left out."""
    if len(text) <= limit:
        return text
    head = max(limit * 3 // 4, 1)
    tail = max(limit - head, 0)
    omitted = len(text) - head - tail
    end = text[len(text) - tail :] if tail else ""
    return f"{text[:head]}\n[... {omitted:,} characters left out ...]\n{end}"
