"""MSL source (a kernel body, or the header= text) translated to CUDA C++ for the emulation library.

Token by token, in place (lines keep their numbers), driven by the concept rows' `msl` entries (cuda_rules):
names of the MSL library become `::metal::` names of cuda_msl_*.cuh; `threadgroup` variables become `__shared__`,
program-scope `constant` tables `__constant__`, other address-space qualifiers disappear; swizzles become member
calls; `0.5h` and `1.0bf` become half / bfloat values and unsuffixed floating literals float (MSL has no double);
functions of a header get `__device__`; CUDA-isms (the linter's CUDA_IN_METAL rules) and MSL constructs the rows mark
unsupported are compile errors naming the construct and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ksearch.errors import MetalEmuError
from ksearch.knowledge.lint_rules import CUDA_IN_METAL
from ksearch.metalemu.cuda_lex import TRIVIA, Tok, render, strip_code
from ksearch.metalemu.cuda_rules import STORAGE_KEYWORDS, Rule, Rules, load_rules
from ksearch.metalemu.cuda_structure import Structure

KEEP_ATTRIBUTES = {"maybe_unused", "likely", "unlikely", "fallthrough", "nodiscard", "noreturn", "deprecated"}
RESERVED_OK = {"__attribute__", "__VA_ARGS__", "__LINE__", "__FILE__", "__COUNTER__", "__cplusplus", "__has_include"}
CONTROL = {"if", "for", "while", "switch", "catch"}
WRITES = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--"}
ASSIGN = WRITES - {"++", "--"}
TYPE_END = {"[", ";", "=", ",", "{"}


@dataclass
class Translation:
    text: str
    top_names: list[str] = field(default_factory=list)  # names a header declares at namespace scope
    macros: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)  # functions and classes it declares at namespace scope
    members: set[str] = field(default_factory=set)  # names declared inside its structs


def translate(text: str, *, kernel: str = "", where: str = "body", rules: Rules | None = None,
              context: Translation | None = None) -> Translation:
    """Translate a body (`where="body"`: the inside of the kernel function) or a header (`where="header"`).

    `context`: the header's translation, whose macros, functions and struct members the body sees."""
    tr = _Translator(text, rules or load_rules(), kernel, where)
    if context is not None:
        tr.macros |= context.macros
        tr.functions |= context.functions
        tr.members |= context.members
    return tr.run()


def _fragment(text: str, rules: Rules, kernel: str, where: str, line: int) -> str:
    """A macro's replacement text, translated token by token (no statement structure to read)."""
    tr = _Translator(text, rules, kernel, where, fragment=True, first_line=line)
    return tr.run().text


class _Translator(Structure):
    def __init__(self, text: str, rules: Rules, kernel: str, where: str, fragment: bool = False,
                 first_line: int = 1) -> None:
        super().__init__(text, kernel, where, first_line)
        self.rules, self.fragment = rules, fragment
        self.pdepth: dict[int, int] = {}  # token index -> ( [ nesting
        self.skip: set[int] = set()  # tokens already handled
        self.values: set[str] = set()  # names used as values (variables: they shadow MSL functions)

    def run(self) -> Translation:
        if not self.fragment:
            self.directives()
            self.reject_cuda()
            end = self.walk(0, "namespace" if self.where == "header" else "function")
            if end < len(self.code):
                raise self.fail(self.tok(end).line, "`}` without a matching `{`", "syntax")
        self.attributes()
        depth = 0
        for p, ti in enumerate(self.code):
            s = self.t(p)
            self.pdepth[ti] = depth
            if s in ("(", "["):
                depth += 1
            elif s in (")", "]"):
                depth = max(0, depth - 1)
        for p, ti in enumerate(self.code):
            tok = self.toks[ti]
            if tok.kind == "ident" and self.t(p + 1) != "(" and self.t(p - 1) not in (".", "->", "::") \
                    and not (self.t(p + 1) == "<" and self.call_after_angle(p + 1)):
                self.values.add(tok.text)
        for i, tok in enumerate(self.toks):
            if i in self.skip or tok.directive:
                continue
            if tok.kind == "ident":
                self.ident(i, tok)
            elif tok.kind == "number":
                self.number(tok)
        self.ternaries()
        return Translation(render(self.toks), list(dict.fromkeys(self.top)), self.macros, self.functions,
                           self.members)

    def ternaries(self) -> None:
        """`c ? a : b` with a half (or bfloat) and a float operand is a float in MSL (half and float convert both ways
        in the library, which C++ calls ambiguous): each operand goes through metal::detail::tern<A, B>, which
        converts to MSL's common type and passes every other pair through unchanged."""
        for q in reversed([p for p in range(len(self.code)) if self.t(p) == "?"]):
            colon = self.operand_end(q + 1, stop_at_colon=True)
            if self.t(colon) != ":":
                continue
            end = self.operand_end(colon + 1, stop_at_colon=False)
            if colon == q + 1 or end == colon + 1:
                continue
            a, b = self.flat(q + 1, colon), self.flat(colon + 1, end)
            wrap = f"::metal::detail::tern<decltype({a}), decltype({b})>("
            for lo, hi in ((q + 1, colon), (colon + 1, end)):
                self.tok(lo).pre = wrap + self.tok(lo).pre
                self.tok(hi - 1).post += ")"

    def operand_end(self, p: int, stop_at_colon: bool) -> int:
        """Where a conditional operator's operand that starts at p ends (the `:`, or what ends the expression)."""
        nested = 0
        while p < len(self.code):
            s = self.t(p)
            if s in ("(", "[", "{"):
                p = self.close(p)
                continue
            if s == "?":
                nested += 1
            elif s == ":":
                if nested == 0:
                    return p
                nested -= 1
            elif s in (")", "]", "}", ";", ",") or (s in ASSIGN and not stop_at_colon and nested == 0):
                return p
            p += 1
        return p

    def flat(self, lo: int, hi: int) -> str:
        """The rendered tokens lo..hi-1 on one line (comments and line breaks dropped), for a decltype copy."""
        return " ".join(self.tok(p).render() for p in range(lo, hi))

    def call_after_angle(self, p: int) -> bool:
        end = self.close_angle(p)
        return end is not None and self.t(end) == "("

    def directives(self) -> None:
        i = 0
        while i < len(self.toks):
            if not (self.toks[i].directive and self.toks[i].text == "#"):
                i += 1
                continue
            j = i
            while j < len(self.toks) and self.toks[j].directive:
                j += 1
            line = [k for k in range(i, j) if self.toks[k].kind not in TRIVIA]
            words = [self.toks[k].text for k in line]
            name = words[1] if len(words) > 1 else ""
            if name == "include":
                target = "".join(words[2:])
                if re.fullmatch(r'[<"]metal_\w+[>"]', target):
                    for k in range(i, j):
                        self.toks[k].out = ""
                else:
                    raise self.fail(self.toks[i].line, f"#include {target}: MLX compiles a Metal kernel "
                                    "without an include path; put what it needs into header=", "include")
            elif name == "pragma" and words[2:3] == ["clang"]:
                for k in range(i, j):
                    self.toks[k].out = ""
                self.toks[i].out = "#pragma unroll" if "unroll" in words else ""
            elif name == "define" and len(line) > 2:
                self.macros.add(words[2])
                self.define(line, j)
            i = j

    def define(self, line: list[int], end: int) -> None:
        """Translate a #define's replacement text in place."""
        k = line[2] + 1
        if k < end and self.toks[k].text == "(":  # a function-like macro: its parameter list follows the name
            while k < end and self.toks[k].text != ")":
                k += 1
            k += 1
        body = [m for m in range(k, end)]
        if not any(self.toks[m].kind not in TRIVIA for m in body):
            return
        text = "".join(self.toks[m].text for m in body)
        self.toks[body[0]].out = _fragment(text, self.rules, self.kernel, self.where, self.toks[body[0]].line)
        self.toks[body[0]].pre = ""
        for m in body[1:]:
            self.toks[m].out = ""

    def reject_cuda(self) -> None:
        code = strip_code(self.src)
        for rx, _code, message, concept in CUDA_IN_METAL:
            m = rx.search(code)
            if m:
                line = code.count("\n", 0, m.start()) + 1
                raise self.fail(line, f"`{m.group(0).strip()}` is CUDA, not MSL: {message} "
                                f"(concept {concept})", "cuda_in_metal")

    def attributes(self) -> None:
        """Attribute specifiers `[[...]]`: standard ones stay, Metal's (buffer, kernel, thread_... ) go."""
        p = 0
        while p < len(self.code) - 1:
            if self.t(p) == "[" and self.t(p + 1) == "[":
                end = self.close(p)
                inner = [self.t(q) for q in range(p + 2, end - 1) if self.tok(q).kind == "ident"]
                if not inner or inner[0] not in KEEP_ATTRIBUTES:
                    for ti in range(self.code[p], self.code[end - 1] + 1):
                        self.toks[ti].out = "" if self.toks[ti].kind not in ("nl",) else None
                        self.skip.add(ti)
                p = end
                continue
            p += 1

    def ident(self, i: int, tok: Tok) -> None:
        name = tok.text
        p = self.at[i]
        prev, nxt = self.t(p - 1), self.t(p + 1)
        if prev in (".", "->"):
            self.member(p, tok)
            return
        if name in self.macros:
            return
        if p is not None and name == "using" and nxt == "namespace":
            self.using_namespace(p)
            return
        rule = self.rules.get(name)
        if name.startswith("__") and name not in RESERVED_OK and rule is None:
            raise self.fail(tok.line, f"`{name}` is not MSL (a reserved or CUDA name)", "reserved_name")
        if rule is None or prev == "::":
            return
        if rule.kind == "unsupported":
            raise self.unsupported(rule, tok)
        if rule.kind == "namespace":
            if nxt == "::":
                tok.out = "::metal" if name == "metal" else f"::metal::{name}"
                self.qualified(p + 2, tok.line, name)
            return
        if rule.kind == "qualifier":
            self.qualifier(p, tok, rule)
            return
        if name in self.functions:
            return  # the source's own function or class of this name
        if rule.kind == "function":
            if name in self.values or not (nxt == "(" or (nxt == "<" and self.call_after_angle(p + 1))):
                return
            tok.out = f"::metal::{name}"
        elif rule.kind in ("type", "enum"):
            tok.out = f"::metal::{name}"
            self.value_members(p, rule)

    def unsupported(self, rule: Rule, tok: Tok) -> MetalEmuError:
        hint = rule.alternative or rule.metal
        return self.fail(tok.line, f"unsupported MSL construct `{rule.name}` ({rule.title}): {hint}", "unsupported")

    def qualified(self, p: int, line: int, head: str) -> None:
        """`metal::a::b`: every name after the head must be one the library has."""
        chain = [head]
        while self.tok(p).kind == "ident" if p < len(self.code) else False:
            name = self.t(p)
            chain.append(name)
            self.skip.add(self.code[p])
            rule = self.rules.get(name)
            if rule is None:
                raise self.fail(line, f"`{'::'.join(chain)}` is not an MSL name the emulation "
                                "supports", "unknown_name")
            if rule.kind == "unsupported":
                raise self.unsupported(rule, self.tok(p))
            self.value_members(p, rule)
            if rule.kind != "namespace" or self.t(p + 1) != "::":
                return
            p += 2

    def value_members(self, p: int, rule: Rule) -> None:
        """MLX's `Limits<T>::max` is a value; the library's member is a function: `Limits<T>::max()`."""
        if not rule.value_members or self.t(p + 1) != "<":
            return
        end = self.close_angle(p + 1)
        if end is not None and self.t(end) == "::" and self.t(end + 1) in rule.value_members \
                and self.t(end + 2) != "(":
            member = self.tok(end + 1)
            member.out = member.text + "()"
            self.skip.add(self.code[end + 1])

    def using_namespace(self, p: int) -> None:
        if self.t(p + 2) == "metal" and self.t(p + 3) == ";":
            for q in range(p, p + 4):
                self.tok(q).out = ""
                self.skip.add(self.code[q])
        elif self.t(p + 2) in ("metal", "fast", "precise"):
            raise self.fail(self.tok(p).line,
                            f"`using namespace {self.t(p + 2)}...` is not supported: qualify the names instead", "unsupported")

    def qualifier(self, p: int, tok: Tok, rule: Rule) -> None:
        """An address-space qualifier: a memory space on a variable declaration, erased everywhere else."""
        ti = self.code[p]
        scope = self.scope.get(ti, "function")
        decl = self.pdepth.get(ti, 0) == 0 and self.declares(p + 1)
        keyword = rule.cuda if rule.cuda in STORAGE_KEYWORDS else None
        if keyword == "__shared__" and decl and scope == "function":
            tok.out = "__shared__"
        elif keyword == "__constant__" and decl and scope == "namespace":
            tok.out = "__constant__"
        elif keyword == "__constant__" and decl and scope == "function":
            tok.out = "static" if self.has_const(p + 1) else "static const"
        else:
            tok.out = ""

    def declares(self, p: int) -> bool:
        """Whether the tokens from p read `type name` followed by [ ; = , {: a variable, not a pointer or reference."""
        idents = 0
        while p < len(self.code):
            s = self.t(p)
            if self.tok(p).kind == "ident" or s == "::":
                idents += self.tok(p).kind == "ident" and s not in ("const", "volatile")
                p += 1
            elif s == "<":
                end = self.close_angle(p)
                if end is None:
                    return False
                p = end
            else:
                return idents >= 2 and s in TYPE_END
        return False

    def has_const(self, p: int) -> bool:
        while p < len(self.code) and (self.tok(p).kind == "ident" or self.t(p) == "::"):
            if self.t(p) == "const":
                return True
            p += 1
        return False

    def member(self, p: int, tok: Tok) -> None:
        """`.xy`, `.zyx`, `.rgba`: swizzles of the library's vectors (a name declared in a struct is left alone)."""
        name = tok.text
        letters = self.rules.is_swizzle(name)
        if letters is None or name in self.members:
            return
        idx = [letters.index(c) for c in name]
        if len(name) == 1:
            if letters != "xyzw":
                tok.out = "xyzw"[idx[0]]
            return
        write = self.t(p + 1) in WRITES
        tok.out = f"template swz{'_ref' if write else ''}<{', '.join(map(str, idx))}>()"

    def number(self, tok: Tok) -> None:
        text = tok.text
        if re.fullmatch(r"0[xX][0-9a-fA-F']+[uUlL]*", text):
            return
        m = re.fullmatch(r"((?:\d[\d']*\.?[\d']*|\.\d[\d']*)(?:[eE][+-]?\d+)?|0[xX][\w.]*[pP][+-]?\d+)([A-Za-z]*)",
                         text)
        if m is None:
            raise self.fail(tok.line, f"the number {text!r} is not valid MSL", "syntax")
        digits, suffix = m.group(1), m.group(2)
        floating = bool(re.search(r"[.eEpP]", digits)) and not digits.lower().startswith("0x") or "p" in digits.lower()
        rule = self.rules.suffixes.get(suffix)
        if rule is not None:
            value = digits if floating else digits + ".0"
            tok.out = f"::metal::{rule.type}({value}f)"
        elif floating and suffix == "" and self.rules.float_literal is not None:
            tok.out = digits + "f"
        elif floating and suffix not in ("f", "F"):
            raise self.fail(tok.line, f"the literal suffix {suffix!r} is not MSL", "syntax")
