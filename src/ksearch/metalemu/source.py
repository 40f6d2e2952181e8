"""The token view the translation passes share: significant tokens, matching brackets, small parsers."""

from __future__ import annotations

from ksearch.errors import MetalEmuError
from ksearch.metalemu.lexer import Token, brackets, significant, tokenize

BUILTIN_TYPE_WORDS = {"unsigned", "signed", "short", "long", "int", "char", "float", "bool", "void"}


def fail(msg: str, line: int | None, kernel: str = "") -> MetalEmuError:
    where = f"line {line}: " if line else ""
    return MetalEmuError(f"{where}{msg}", status="compile_error", kernel=kernel, line=line)


class Unit:
    """The token stream of one source, with the significant-token view the passes share."""

    def __init__(self, src: str) -> None:
        self.toks = tokenize(src)
        self.sig = significant(self.toks)
        self.match = brackets(self.toks, self.sig)

    def t(self, k: int) -> Token:
        """The k-th significant token (a dummy past the end)."""
        return self.toks[self.sig[k]] if 0 <= k < len(self.sig) else Token("eof", "", 0)

    def s(self, k: int) -> str:
        return self.t(k).orig

    def is_attr_open(self, k: int) -> bool:
        return self.s(k) == "[" and self.s(k + 1) == "["

    def attr_end(self, k: int) -> int:
        """Position of the second `]` closing the attribute opened at k."""
        inner = self.match.get(k + 1, -1)
        if inner < 0 or self.s(inner + 1) != "]":
            raise fail("unbalanced [[ ]] attribute", self.t(k).line)
        return inner + 1

    def text(self, a: int, b: int) -> str:
        """The current text of significant tokens a..b (inclusive), on one line."""
        return " ".join(self.t(k).emit().replace("\n", " ") for k in range(a, b + 1) if not self.t(k).dead or
                        self.t(k).emit().strip())

    def kill(self, a: int, b: int) -> None:
        """Blank every token (whitespace too) from significant position a to b."""
        for i in range(self.sig[a], self.sig[b] + 1):
            self.toks[i].kill()

    def angle_end(self, k: int) -> int:
        """Position of the `>` closing the template argument list opened by `<` at k (-1 if none)."""
        depth = 0
        j = k
        while j < len(self.sig):
            s = self.s(j)
            if s in ("(", "[", "{"):
                j = self.match.get(j, j)
            elif s == "<":
                depth += 1
            elif s == ">":
                depth -= 1
                if depth == 0:
                    return j
            elif s == ">>":
                depth -= 2
                if depth <= 0:
                    return j
            elif s in (";", "{", "}"):
                return -1
            j += 1
        return -1


def parse_type(u: Unit, k: int) -> int:
    """End position (inclusive) of the type name starting at k: qualified names, template arguments, and builtin
    type words (`unsigned int`); -1 when there is none."""
    j = k
    if u.s(j) in BUILTIN_TYPE_WORDS:
        while u.s(j + 1) in BUILTIN_TYPE_WORDS:
            j += 1
        return j
    if u.s(j) == "::":
        j += 1
    if u.t(j).kind != "id":
        return -1
    while True:
        if u.s(j + 1) == "<":
            e = u.angle_end(j + 1)
            if e < 0:
                return -1
            j = e
        if u.s(j + 1) == "::" and u.t(j + 2).kind == "id":
            j += 2
            continue
        return j
