"""Threadgroup variables declared in a kernel body.

    threadgroup float tile[32][33], part[8];
becomes, on the same line,
    constexpr unsigned long ks_tg_end_1 = ::ks::tg_end<float[32][33]>(<previous end or 0>);
    (void)::ks::tg_fits<ks_tg_end_1, KS_TG_LIMIT>{};
    ::ks::tg_decay_t<float[32][33]> tile = ::ks::tg_decl<float[32][33]>(ks_tg_end_1, "tile");  ... and for part
Every threadgroup variable of a kernel has its own storage, as on Metal: each sits after the previous declaration
of the kernel in source order. The offset constants of a declaration inside a nested block are placed before the
body-level statement that holds the block, so that the next declarations see them (the variable's type may then
use only names visible there: template parameters, constants of the body declared before). The static check makes
a kernel whose threadgroup memory passes the limit fail to compile, with the amount in clang's message (compile.py
reads it).
"""

from __future__ import annotations

from ksearch.metalemu.source import Unit, fail, parse_type


def _declaration(u: Unit, k: int, prev: str, counter: int) -> tuple[list[tuple[str, str]], int, int]:
    """[(offset constants, variable declaration)] of the declaration at k, its `;`, and the new counter."""
    line = u.t(k).line
    j = k
    while u.s(j) in ("const", "volatile", "threadgroup"):
        j += 1
    tend = parse_type(u, j)
    if tend < 0:
        raise fail("cannot read the type of this threadgroup variable", line)
    ctype = u.text(j, tend)
    j = tend + 1
    out: list[tuple[str, str]] = []
    while True:
        if u.t(j).kind != "id":
            raise fail("expected the name of the threadgroup variable", line)
        name = u.s(j)
        dims = ""
        j += 1
        while u.s(j) == "[":
            close = u.match[j]
            dims += "[" + u.text(j + 1, close - 1) + "]"
            j = close + 1
        if u.s(j) == "=":
            raise fail(f"threadgroup variable `{name}` cannot have an initializer", line)
        counter += 1
        sym = f"ks_tg_end_{counter}"
        ty = f"{ctype}{dims}"
        out.append((f"constexpr unsigned long {sym} = ::ks::tg_end<{ty}>({prev}); "
                    f"(void)::ks::tg_fits<{sym}, KS_TG_LIMIT>{{}}; ",
                    f'::ks::tg_decay_t<{ty}> {name} = ::ks::tg_decl<{ty}>({sym}, "{name}");'))
        prev = sym
        if u.s(j) == ",":
            j += 1
            continue
        if u.s(j) != ";":
            raise fail(f"unexpected `{u.s(j)}` in the declaration of threadgroup variable `{name}`", line)
        return out, j, counter


def rewrite_threadgroup_decls(u: Unit, decls: list[int], spans: list[tuple[int, int]]) -> None:
    if not decls:
        return
    counter = 0
    for body, end in spans:
        todo = {d for d in decls if body < d < end}
        if not todo:
            continue
        prev = "0UL"
        depth = 0
        stmt = body + 1  # first token of the body-level statement being read
        hoisted: dict[int, list[str]] = {}
        k = body
        while k <= end:
            s = u.s(k)
            dead = u.t(k).dead
            if s == "{" and not dead:
                depth += 1
                if depth == 1:
                    stmt = k + 1
            elif s == "}" and not dead:
                depth -= 1
                if depth == 1:
                    stmt = k + 1
            elif s == ";" and depth == 1:
                stmt = k + 1
            elif k in todo:
                pieces, stop, counter = _declaration(u, k, prev, counter)
                prev = f"ks_tg_end_{counter}"
                if depth == 1:
                    text = " ".join(a + b for a, b in pieces)
                else:
                    hoisted.setdefault(stmt, []).extend(a for a, _ in pieces)
                    text = " ".join(b for _, b in pieces)
                u.kill(k, stop)
                u.t(k).text = text
                if depth == 1:
                    stmt = stop + 1
                k = stop
            k += 1
        for pos, consts in hoisted.items():
            u.t(pos).pre = " ".join(consts) + " " + u.t(pos).pre
