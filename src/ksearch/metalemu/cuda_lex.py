"""A C++ tokenizer for MSL sources, lossless: joining the tokens' texts gives the source back, so a translation that
rewrites tokens in place keeps every line where it was (the CUDA compiler's errors then point at the Metal lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ksearch.errors import MetalEmuError

_TOKEN = re.compile(
    r"""
     (?P<nl>\n)
    |(?P<ws>[ \t\r\f\v]+|\\\n)
    |(?P<comment>//[^\n]*|/\*.*?\*/)
    |(?P<string>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
    |(?P<char>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*')
    |(?P<number>\.?\d(?:[eEpP][+-]|[\w.'])*)
    |(?P<ident>[A-Za-z_]\w*)
    |(?P<punct>\.\.\.|<<=|>>=|->\*|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|\#\#
               |[{}\[\]()<>;:,.?~!%^&*+\-=/|\#])
    """,
    re.S | re.X,
)
TRIVIA = ("ws", "nl", "comment")


def compile_error(what: str, kernel: str, where: str, line: int | None, kind: str) -> MetalEmuError:
    """The error for what the CUDA engine cannot compile: status compile_error, the kernel and the line named (of
    the body, or of the header)."""
    return MetalEmuError(_lead(kernel, where, line) + what, status="compile_error", kernel=kernel, line=line,
                         body_line=line if where == "body" else None, kind=kind)


def _lead(kernel: str, where: str, line: int | None) -> str:
    at = f" ({where} line {line})" if line else ""
    return f"compile error in Metal kernel {kernel!r}{at}: "


def compile_error_part(exc: MetalEmuError) -> tuple[str | None, str]:
    """Of an error `compile_error` made: the part of the kernel its line is counted in ("source=", "header=" or None
    where it names no line) and what went wrong, without the lead that names the kernel and the line."""
    where, part = ("body", "source=") if exc.body_line is not None else ("header", "header=") if exc.line else ("", None)
    return part, str(exc).removeprefix(_lead(exc.kernel, where, exc.line))


@dataclass
class Tok:
    kind: str  # ident, number, string, char, punct, ws, nl, comment
    text: str
    line: int
    directive: bool = False  # part of a preprocessor line
    out: str | None = None  # replacement text (None: unchanged)
    pre: str = ""  # text inserted before the token
    post: str = ""  # text inserted after it

    def render(self) -> str:
        return self.pre + (self.text if self.out is None else self.out) + self.post


def tokenize(text: str, kernel: str = "", where: str = "body") -> list[Tok]:
    """Tokens of `text`; an unterminated comment or literal, or a character C++ does not have, is a compile error."""
    toks: list[Tok] = []
    pos, line, at_line_start, in_directive = 0, 1, True, False
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            ch = text[pos]
            what = "an unterminated comment" if text.startswith("/*", pos) else (
                "an unterminated literal" if ch in "\"'" else f"the character {ch!r}")
            raise compile_error(f"{what} is not valid MSL", kernel, where, line, "syntax")
        kind = m.lastgroup or "punct"
        tok = Tok(kind, m.group(0), line)
        if kind == "punct" and tok.text == "#" and at_line_start:
            in_directive = True
        tok.directive = in_directive and kind != "nl"
        if kind == "nl":
            in_directive, at_line_start = False, True
        elif kind not in ("ws", "comment"):
            at_line_start = False
        line += tok.text.count("\n")
        toks.append(tok)
        pos = m.end()
    return toks


def render(toks: list[Tok]) -> str:
    return "".join(t.render() for t in toks)


def significant(toks: list[Tok]) -> list[int]:
    """Indices of the tokens that are not whitespace or comments."""
    return [i for i, t in enumerate(toks) if t.kind not in TRIVIA]


def strip_code(text: str) -> str:
    """Comments and string/char literals blanked (newlines kept): what regex checks of code should see."""
    return "".join(re.sub(r"[^\n]", " ", t.text) if t.kind in ("comment", "string", "char") else t.text
                   for t in tokenize(text))
