"""The statement structure of an MSL source, read from its tokens: scopes (namespace, class, function), the
declarations a header makes, where functions are (they get `__device__`) and what struct members are called.

A light reading, not a parser: enough to tell a `threadgroup` variable from a pointer, a function from a variable, a
block from a braced initialiser. cuda_translate builds on it.
"""

from __future__ import annotations

import re

from ksearch.errors import MetalEmuError
from ksearch.metalemu.cuda_lex import TRIVIA, Tok, compile_error, tokenize

PAIRS = {"(": ")", "[": "]", "{": "}"}


class Structure:
    """Tokens of one source, the positions of its code tokens, and what the structure pass finds."""

    def __init__(self, text: str, kernel: str, where: str, first_line: int = 1) -> None:
        self.src, self.kernel, self.where = text, kernel, where
        self.toks: list[Tok] = tokenize(text, kernel, where)
        for tok in self.toks:
            tok.line += first_line - 1
        self.code = [i for i, t in enumerate(self.toks) if t.kind not in TRIVIA and not t.directive]
        self.at = {ti: p for p, ti in enumerate(self.code)}
        self.scope: dict[int, str] = {}  # token index -> namespace / class / function
        self.macros: set[str] = set()
        self.functions: set[str] = set()  # functions and classes the source declares at namespace scope
        self.members: set[str] = set()  # names inside class scopes (never swizzles)
        self.top: list[str] = []
        self.depth = 0  # namespaces entered: top names are those of the outermost level

    # ---- helpers ----
    def fail(self, line: int, what: str, kind: str = "unsupported") -> MetalEmuError:
        """A compile error at `line`; `what` names the construct."""
        return compile_error(what, self.kernel, self.where, line, kind)

    def t(self, p: int) -> str:
        return self.toks[self.code[p]].text if 0 <= p < len(self.code) else ""

    def tok(self, p: int) -> Tok:
        return self.toks[self.code[p]]

    def close(self, p: int) -> int:
        """Position just after the group opened at p (same bracket kind counted)."""
        opener = self.t(p)
        closer, level = PAIRS[opener], 0
        while p < len(self.code):
            s = self.t(p)
            if s == opener:
                level += 1
            elif s == closer:
                level -= 1
                if level == 0:
                    return p + 1
            p += 1
        raise self.fail(self.tok(len(self.code) - 1).line, f"`{opener}` is never closed", "syntax")

    def close_angle(self, p: int) -> int | None:
        """Position after the `>` matching the `<` at p, when it reads as a template argument list."""
        level = 0
        while p < len(self.code):
            s = self.t(p)
            if s in ("(", "["):
                p = self.close(p)
                continue
            if s == "<":
                level += 1
            elif s in (">", ">>"):
                level -= len(s)
                if level <= 0:
                    return p + 1
            elif s in (";", "{", "}", "&&", "||"):
                return None
            p += 1
        return None

    # ---- pass 1: structure (scopes, declarations) ----
    def walk(self, p: int, kind: str) -> int:
        while p < len(self.code) and self.t(p) != "}":
            p = self.decl(p, kind) if kind in ("namespace", "class") else self.stmt(p)
        return p

    def mark(self, start: int, end: int, kind: str) -> None:
        for q in range(start, min(end, len(self.code))):
            self.scope.setdefault(self.code[q], kind)

    def decl(self, p: int, kind: str) -> int:
        """One declaration at namespace or class scope; returns the position after it."""
        start = p
        if self.t(p) in ("public", "private", "protected") and self.t(p + 1) == ":":
            self.mark(p, p + 2, kind)
            return p + 2
        while self.t(p) == "template" and self.t(p + 1) == "<":
            p = self.close_angle(p + 1) or p + 2
        head, first = p, self.t(p)
        paren, eq, fname = False, False, ""
        while p < len(self.code):
            s = self.t(p)
            if s == ";":
                self.mark(start, p + 1, kind)
                self.finish(head, first, paren and not eq, fname, kind, p)
                return p + 1
            if s == "}":
                self.mark(start, p, kind)
                return p
            if s in ("(", "["):
                if s == "(" and not paren and not eq:
                    paren, fname = True, self.t(p - 1)
                p = self.close(p)
                continue
            if s == "=":
                eq = True
            if s == ":" and paren and not eq:
                p = self.mem_inits(p + 1)
                continue
            if s == "{":
                self.mark(start, p + 1, kind)
                if first == "namespace":
                    self.depth += 1
                    end = self.walk(p + 1, "namespace")
                    self.depth -= 1
                    return end + 1
                if first in ("struct", "class", "union") and not paren and not eq:
                    name = self.t(head + 1)
                    self.functions.add(name)
                    if kind == "namespace" and self.depth == 0:
                        self.top.append(name)
                    end = self.walk(p + 1, "class")
                    for q in range(p + 1, end):
                        if self.tok(q).kind == "ident" and self.scope.get(self.code[q]) == "class":
                            self.members.add(self.t(q))
                    p = end + 1
                    continue
                if paren and not eq and first != "enum":
                    self.finish(head, first, True, fname, kind, p)
                    return self.walk(p + 1, "function") + 1
                p = self.close(p)
                continue
            p += 1
        self.mark(start, p, kind)
        return p

    def mem_inits(self, p: int) -> int:
        """Skip a constructor's member initialisers; returns the position of the body's `{`."""
        while p < len(self.code):
            while self.tok(p).kind == "ident" or self.t(p) == "::":
                p += 1
            if self.t(p) == "<":
                p = self.close_angle(p) or p + 1
            if self.t(p) in ("(", "{"):
                p = self.close(p)
            if self.t(p) != ",":
                return p
            p += 1
        return p

    def finish(self, head: int, first: str, function: bool, fname: str, kind: str, end: int) -> None:
        if function and first not in ("typedef", "using", "static_assert", "friend", "namespace") \
                and first not in self.macros and kind in ("namespace", "class"):
            tok = self.tok(head)
            tok.pre = "__device__ " + tok.pre
            if re.fullmatch(r"[A-Za-z_]\w*", fname) and kind == "namespace":
                self.functions.add(fname)
                if self.depth == 0:
                    self.top.append(fname)
            return
        if kind == "namespace" and self.depth == 0 and first not in ("static_assert", "namespace", "template") \
                and not (first == "using" and self.t(head + 1) == "namespace"):
            name = self.declared_name(head, end)
            if name:
                self.top.append(name)

    def declared_name(self, head: int, end: int) -> str:
        """The declarator name of a variable, typedef or alias declaration between head and end."""
        if self.t(head) == "using" and self.t(head + 2) == "=":
            return self.t(head + 1)
        p, last = head, ""
        while p < end:
            s = self.t(p)
            if s in ("(", "[", "{") and last:
                break
            if s in ("=", ","):
                break
            if s in ("<",):
                p = self.close_angle(p) or p + 1
                continue
            if self.tok(p).kind == "ident":
                last = s
            p += 1
        return last

    def stmt(self, p: int) -> int:
        """One statement inside a function; returns the position after it."""
        start, first = p, self.t(p)
        if first == "{":
            self.mark(p, p + 1, "function")
            return self.walk(p + 1, "function") + 1
        if first in ("struct", "class", "union"):
            q = p + 1
            while q < len(self.code) and self.t(q) not in ("{", ";", "=", "("):
                q += 1
            if self.t(q) == "{":
                return self.decl(p, "function")
        while p < len(self.code):
            s = self.t(p)
            if s == ";":
                self.mark(start, p + 1, "function")
                return p + 1
            if s == "}":
                self.mark(start, p, "function")
                return p
            if s in ("(", "["):
                p = self.close(p)
                continue
            if s == "{":
                prev = self.t(p - 1)
                self.mark(start, p + 1, "function")
                if prev in ("else", "do", "try", ")", "]"):
                    p = self.walk(p + 1, "function") + 1
                    lam = prev == "]" or (prev == ")" and self.lambda_params(p))
                    if first != "do" and not lam:
                        return p
                    continue
                p = self.close(p)
                continue
            p += 1
        self.mark(start, p, "function")
        return p

    def lambda_params(self, after_block: int) -> bool:
        """Whether the `)` before the block just walked closes a lambda's parameters (not if/for/while/switch)."""
        p = after_block - 1  # the block's `}`
        level = 0
        while p >= 0:  # back to the block's `{`
            s = self.t(p)
            level += s == "}"
            level -= s == "{"
            if level == 0:
                break
            p -= 1
        p -= 1  # the `)`
        level = 0
        while p >= 0:
            s = self.t(p)
            level += s == ")"
            level -= s == "("
            if level == 0:
                break
            p -= 1
        return self.t(p - 1) == "]"

    # ---- pass 2: tokens ----
