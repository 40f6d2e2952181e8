"""An emulation error in the user's own numbering: lines of the file that called `metal_kernel`, of its source= and
header=, never of the translation unit MLX writes around them (a text the user does not see unless verbose=True).

A kernel's source= and header= are usually string literals of the file that creates it. Found there verbatim (once),
an error's lines become that file's lines, with the line of source= beside them; otherwise lines of source= or
header= themselves. Lines MLX generates (the template line, the signature, the instantiation) are named as such.

The CPU engine's errors count lines of the translation unit (`locate`); the CUDA engine's count lines of source= or
header= already, its `#line` markers keeping NVRTC's in the same numbering (`locate_part`, `part_place`).
"""

from __future__ import annotations

import linecache
import os
import re
import sys
from dataclasses import dataclass
from types import FrameType

from ksearch.errors import MetalEmuError

_HERE = os.path.dirname(os.path.abspath(__file__))
_LEAD = re.compile(r"line (\d+): ")
_ANY = re.compile(r"\bline (\d+)\b")


@dataclass(frozen=True)
class Origin:
    """The file that created a kernel (its base name) and the file lines where its source= and header= start."""

    file: str = ""
    source_line: int | None = None
    header_line: int | None = None


@dataclass(frozen=True)
class Place:
    long: str  # for the head of a message: "line 8 of candidate.py (line 6 of its source=)"
    short: str  # for a line named again inside it: "line 8"
    body_line: int | None  # the line counted in source=, where it lies there


def origin(source: str, header: str) -> Origin:
    """Where source= and header= start in the file of the nearest caller outside the emulation."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _HERE:
        frame = frame.f_back
    if frame is None:
        return Origin()
    path = frame.f_code.co_filename
    text = "".join(linecache.getlines(path))
    return Origin(os.path.basename(path), _first_line(text, source), _first_line(text, header))


def _first_line(text: str, part: str) -> int | None:
    """The file line of `part`'s first line where it occurs exactly once in `text`; else None (ambiguous or built at
    run time)."""
    if not part.strip():
        return None
    at = text.find(part)
    if at < 0 or text.find(part, at + 1) >= 0:
        return None
    return text.count("\n", 0, at) + 1


class Layout:
    """Which lines of one translation unit are the header, which the body (source=), which MLX's own."""

    def __init__(self, unit: str, source: str, header: str, org: Origin) -> None:
        self.unit_lines = unit.count("\n") + 1
        self.header_last = len(header.splitlines())
        at = unit.rfind(source + "\n}\n")
        self.body_first = unit.count("\n", 0, at) + 1 if at >= 0 else 0
        self.body_last = self.body_first + source.count("\n") if at >= 0 else -1
        self.org = org

    def place(self, line: int) -> Place | None:
        """Where line `line` of the translation unit is for the user; None for a number that is no line of it."""
        if self.body_first <= line <= self.body_last:
            return part_place("source=", line - self.body_first + 1, self.org)
        if 1 <= line <= self.header_last:
            return part_place("header=", line, self.org)
        if 1 <= line <= self.unit_lines:
            text = f"line {line} of the source MLX generates around source= (verbose=True prints it)"
            return Place(text, text, None)
        return None


def part_place(part: str, n: int, org: Origin) -> Place:
    """Line `n` of source= or header= (`part`) as the user counts it: a line of the file that created the kernel
    where that is known."""
    first = org.source_line if part == "source=" else org.header_line
    body_line = n if part == "source=" else None
    if first is None:
        return Place(f"line {n} of its {part}", f"line {n} of its {part}", body_line)
    return Place(f"line {first + n - 1} of {org.file} (line {n} of its {part})", f"line {first + n - 1}", body_line)


def locate_part(exc: MetalEmuError, name: str, what: str, part: str | None, org: Origin) -> MetalEmuError:
    """`exc`, whose `line` is counted in source= or header= (`part`; None: no line), led by the kernel's name and
    the place of that line; `what` is what went wrong there."""
    head = f"metal_kernel {name!r}"
    if part is not None and exc.line:
        head += f" at {part_place(part, exc.line, org).long}"
    return MetalEmuError(f"{head}: {what}", status=exc.status, kernel=exc.kernel, line=exc.line,
                         body_line=exc.body_line, kind=exc.kind)


def locate(exc: MetalEmuError, name: str, unit: str, source: str, header: str, org: Origin) -> MetalEmuError:
    """`exc` as the kernel's author reads it: led by the kernel's name and the place of its line, every other line it
    names counted the same way; the quoted source line is left as it is."""
    layout = Layout(unit, source, header, org)
    msg = str(exc)
    if exc.kernel and msg.startswith(exc.kernel + ": "):
        msg = msg[len(exc.kernel) + 2:]
    head, body_line = f"metal_kernel {name!r}", exc.body_line
    lead = _LEAD.match(msg)
    at = layout.place(int(lead.group(1))) if lead else None
    if lead and at is not None:
        head += f" at {at.long}"
        body_line = at.body_line if at.body_line is not None else body_line
        msg = msg[lead.end():]
    quoted = _quoted(unit, exc.line)
    parts = msg.split(quoted, 1) if quoted and quoted in msg else [msg]
    parts = [_ANY.sub(lambda m: _short(layout, m), p) for p in parts]
    return MetalEmuError(f"{head}: {quoted.join(parts)}", status=exc.status, kernel=exc.kernel, line=exc.line,
                         body_line=body_line, kind=exc.kind)


def _quoted(unit: str, line: int | None) -> str:
    """The source line as the engine quotes it (` [text]`), which may itself hold the words `line N`."""
    lines = unit.splitlines()
    if not line or not 0 < line <= len(lines):
        return ""
    text = lines[line - 1].strip()[:160]
    return f" [{text}]" if text else ""


def _short(layout: Layout, m: re.Match[str]) -> str:
    at = layout.place(int(m.group(1)))
    return at.short if at is not None else m.group(0)
