"""A C++/MSL tokenizer that keeps every character, so that the translated source keeps the original's lines.

Tokens are whitespace (comments and line splices included), preprocessor directives (a whole logical line),
identifiers, numbers (pp-numbers, suffixes included), string and character literals, and punctuators. Each token
carries its original text and line; the translator edits `text`, `pre` and `post` and emits them in order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PUNCT = sorted([">>=", "<<=", "...", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "##", "{", "}", "[", "]", "(", ")", ";", ":", "?", ",", ".", "+", "-", "*", "/", "%", "^", "&", "|", "~", "!", "=", "<", ">", "#"], key=len, reverse=True)

_TOKEN = re.compile(
    r"(?P<ws>(?:[ \t\r\f\v]+|\\\n|//[^\n]*|/\*.*?\*/)+)"
    r"|(?P<nl>\n)"
    r"|(?P<id>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<num>\.?[0-9](?:[eEpP][+-]|[A-Za-z_0-9.'])*)"
    r"|(?P<str>\"(?:\\.|[^\"\\\n])*\")"
    r"|(?P<chr>'(?:\\.|[^'\\\n])*')"
    r"|(?P<punct>" + "|".join(re.escape(p) for p in _PUNCT) + r")"
    r"|(?P<other>.)",
    re.S,
)
_DIRECTIVE = re.compile(r"[ \t]*#(?:[^\n\\]|\\.)*", re.S)


@dataclass
class Token:
    kind: str  # ws | pp | id | num | str | chr | punct | other
    orig: str
    line: int
    text: str = ""
    pre: str = ""
    post: str = ""
    dead: bool = False  # consumed by a rewrite: later passes leave it alone

    def __post_init__(self) -> None:
        self.text = self.orig

    def emit(self) -> str:
        return self.pre + self.text + self.post

    def kill(self) -> None:
        """Blank the token but keep its line breaks."""
        self.text = "\n" * self.orig.count("\n")
        self.dead = True


def tokenize(src: str, first_line: int = 1) -> list[Token]:
    out: list[Token] = []
    pos, line, at_line_start = 0, first_line, True
    n = len(src)
    while pos < n:
        if at_line_start:
            d = _DIRECTIVE.match(src, pos)
            if d and d.group(0).strip().startswith("#"):
                text = d.group(0)
                out.append(Token("pp", text, line))
                line += text.count("\n")
                pos = d.end()
                at_line_start = False
                continue
        m = _TOKEN.match(src, pos)
        assert m is not None  # the `other` alternative matches any character
        kind = m.lastgroup or "other"
        text = m.group(0)
        if kind == "nl":
            kind = "ws"
            at_line_start = True
        elif kind != "ws":
            at_line_start = False
        out.append(Token(kind, text, line))
        line += text.count("\n")
        pos = m.end()
    return out


def significant(tokens: list[Token]) -> list[int]:
    """Indices of the tokens that are neither whitespace nor directives."""
    return [i for i, t in enumerate(tokens) if t.kind not in ("ws", "pp")]


def brackets(tokens: list[Token], sig: list[int]) -> dict[int, int]:
    """Matching (), [] and {} among the significant tokens, both ways (positions in `sig`)."""
    match: dict[int, int] = {}
    stack: list[tuple[str, int]] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for k, i in enumerate(sig):
        t = tokens[i].orig
        if t in "([{" and tokens[i].kind == "punct":
            stack.append((t, k))
        elif t in pairs and tokens[i].kind == "punct":
            while stack and stack[-1][0] != pairs[t]:
                stack.pop()
            if stack:
                _, o = stack.pop()
                match[o] = k
                match[k] = o
    return match
