"""Expression rewrites: vector constructors and casts, the conditional operator, `auto` copies.

MSL and a host compiler read these differently:
  - `float4(a, b)` is a constructor in MSL, an error for clang's ext-vectors: -> ks::make<float, 4>(a, b);
  - `static_cast<float4>(i4)` and `(float4)i4` convert each component in MSL, reinterpret the bits in clang:
    -> ks::vcast<float4>(i4);
  - `c ? h : 1.0f` with h a half is a float in MSL, ambiguous for a class type: each branch is converted to MSL's
    common type (ks::tc);
  - `auto v = tile[i]` copies a threadgroup element in MSL; the emulation's element is a reference object, so the
    initializer is wrapped in ks::val, which yields the value.
"""

from __future__ import annotations

from ksearch.metalemu.source import Unit

_BASES = ("float", "half", "bfloat", "int", "uint", "short", "ushort", "char", "uchar", "long", "ulong", "bool")
VECTOR_TYPES: dict[str, tuple[str, int]] = {f"{b}{n}": (b, n) for b in _BASES for n in (2, 3, 4)}
VECTOR_TYPES.update({f"packed_{b}{n}": (b, n) for b in _BASES for n in (2, 3, 4)})
_PREFIX_OPS = {"-", "+", "!", "~", "*", "&", "++", "--"}
_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}


def _vector_type_at(u: Unit, k: int) -> int:
    """End of a vector type name at k (`float4`, `metal::float4`, `vec<T, N>`, `metal::vec<...>`), or -1."""
    j = k + 2 if u.s(k) == "metal" and u.s(k + 1) == "::" else k
    if u.t(j).dead:
        return -1
    if u.s(j) in VECTOR_TYPES:
        return j
    if u.s(j) == "vec" and u.s(j + 1) == "<":
        return u.angle_end(j + 1)
    return -1


def operand_end(u: Unit, j: int) -> int:
    """End of the cast-expression starting at j (prefix operators, a primary expression, postfix operators)."""
    while u.s(j) in _PREFIX_OPS:
        j += 1
    if u.s(j) == "(":
        j = u.match.get(j, -1)
        if j < 0:
            return -1
    elif u.t(j).kind in ("id", "num", "str", "chr") or u.s(j) == "::":
        if u.s(j) == "::":
            j += 1
        while u.s(j + 1) == "::" and u.t(j + 2).kind == "id":
            j += 2
    else:
        return -1
    while True:
        n = u.s(j + 1)
        if n in ("(", "["):
            j = u.match.get(j + 1, j + 1)
        elif n in (".", "->") and u.t(j + 2).kind == "id":
            j += 2
        elif n in ("++", "--"):
            j += 1
        else:
            return j


def rewrite_vectors(u: Unit) -> None:
    for k in range(len(u.sig)):
        t = u.t(k)
        if t.dead or t.kind not in ("id", "punct"):
            continue
        s = t.orig
        if s in VECTOR_TYPES and u.s(k + 1) == "(" and u.s(k - 1) not in (".", "->"):
            if u.s(k - 1) == "::" and u.s(k - 2) != "metal":
                continue
            if u.s(k - 1) == "::":
                u.kill(k - 2, k - 1)
            base, n = VECTOR_TYPES[s]
            t.text = f"::ks::make<{base}, {n}>"
        elif s == "vec" and u.s(k + 1) == "<" and u.s(k - 1) not in (".", "->", "using"):
            e = u.angle_end(k + 1)
            if e > 0 and u.s(e + 1) == "(" and u.s(e) == ">":
                if u.s(k - 1) == "::" and u.s(k - 2) == "metal":
                    u.kill(k - 2, k - 1)
                t.text = "::ks::make"
        elif s == "static_cast" and u.s(k + 1) == "<":
            e = u.angle_end(k + 1)
            if e > 0 and _vector_type_at(u, k + 2) == e - 1:
                t.text = "::ks::vcast"
        elif s == "(":
            e = _vector_type_at(u, k + 1)
            if e < 0 or u.s(e + 1) != ")":
                continue
            prev = u.t(k - 1)
            if prev.kind == "id" or prev.orig in (")", "]", ">"):
                continue  # a call or a template argument list, not a cast
            end = operand_end(u, e + 2)
            if end < 0:
                continue
            type_text = u.text(k + 1, e)
            u.kill(k + 1, e + 1)
            t.text = f"::ks::vcast<{type_text}>("
            u.t(end).post += ")"


def _colon_of(u: Unit, k: int) -> int:
    nested, j = 0, k + 1
    while j < len(u.sig):
        s = u.s(j)
        if s in ("(", "[", "{"):
            j = u.match.get(j, j)
        elif s == "?":
            nested += 1
        elif s == ":":
            if not nested:
                return j
            nested -= 1
        elif s in (";", ")", "]", "}"):
            return -1
        j += 1
    return -1


def _branch_end(u: Unit, colon: int) -> int:
    nested, e = 0, colon + 1
    while e < len(u.sig):
        s = u.s(e)
        if s in ("(", "[", "{"):
            e = u.match.get(e, e) + 1
            continue
        if s == "?":
            nested += 1
        elif s == ":":
            if not nested:
                break
            nested -= 1
        elif s in (",", ";", ")", "]", "}") or s in _ASSIGN:
            break
        e += 1
    return e - 1


def rewrite_ternaries(u: Unit) -> None:
    for k in reversed(range(len(u.sig))):
        if u.s(k) != "?" or u.t(k).dead:
            continue
        colon = _colon_of(u, k)
        if colon < 0 or colon == k + 1:
            continue
        cend = _branch_end(u, colon)
        if cend <= colon:
            continue
        b = u.text(k + 1, colon - 1)
        c = u.text(colon + 1, cend)
        wrap = f"::ks::tc<decltype(({b})), decltype(({c}))>("
        for first, last in ((k + 1, colon - 1), (colon + 1, cend)):
            u.t(first).pre = wrap + u.t(first).pre
            u.t(last).post += ")"


def rewrite_auto(u: Unit) -> None:
    for k in range(len(u.sig)):
        if u.s(k) != "auto" or u.t(k).dead or u.t(k + 1).kind != "id" or u.s(k + 2) != "=":
            continue
        j = k + 3
        while j < len(u.sig) and u.s(j) not in (";", ",", ")", "}"):
            if u.s(j) in ("(", "[", "{"):
                j = u.match.get(j, j)
            j += 1
        if u.s(j) != ";" or j == k + 3:
            continue
        u.t(k + 3).pre = "::ks::val(" + u.t(k + 3).pre
        u.t(j - 1).post += ")"
