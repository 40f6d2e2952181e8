"""Threadgroup variables declared in a kernel body.

    threadgroup float tile[32][33], part[8];
becomes, on the same line,
    constexpr unsigned long ks_tg_end_1 = ::ks::tg_end<float[32][33]>(<previous end or 0>);
    (void)::ks::tg_fits<ks_tg_end_1, KS_TG_LIMIT>{};
    ::ks::tg_decay_t<float[32][33]> tile = ::ks::tg_decl<float[32][33]>(ks_tg_end_1, "tile");  ... and for part
Each variable sits at a compile-time offset after the previous declaration visible in its scope (sibling scopes may
share memory, since their variables never live at the same time); the static check makes a kernel whose threadgroup
memory passes the limit fail to compile, with the amount in clang's message (compile.py reads it).
"""

from __future__ import annotations

from ksearch.metalemu.source import Unit, fail, parse_type


def rewrite_threadgroup_decls(u: Unit, decls: list[int], spans: list[tuple[int, int]]) -> None:
    if not decls:
        return
    counter = 0
    for body, end in spans:
        inside = [d for d in decls if body < d < end]
        if not inside:
            continue
        visible: list[tuple[int, str]] = []  # (brace depth, end symbol) of declarations whose scope is open
        depth = 0
        k = body
        todo = set(inside)
        while k <= end:
            s = u.s(k)
            if s == "{" and not u.t(k).dead:
                depth += 1
            elif s == "}" and not u.t(k).dead:
                visible = [v for v in visible if v[0] < depth]
                depth -= 1
            elif k in todo:
                line = u.t(k).line
                j = k
                while u.s(j) in ("const", "volatile", "threadgroup"):
                    j += 1
                tend = parse_type(u, j)
                if tend < 0:
                    raise fail("cannot read the type of this threadgroup variable", line)
                ctype = u.text(j, tend)
                j = tend + 1
                pieces: list[str] = []
                stop = j
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
                    prev = visible[-1][1] if visible else "0UL"
                    ty = f"{ctype}{dims}"
                    pieces.append(
                        f"constexpr unsigned long {sym} = ::ks::tg_end<{ty}>({prev}); "
                        f"(void)::ks::tg_fits<{sym}, KS_TG_LIMIT>{{}}; "
                        f'::ks::tg_decay_t<{ty}> {name} = ::ks::tg_decl<{ty}>({sym}, "{name}");')
                    visible.append((depth, sym))
                    if u.s(j) == ",":
                        j += 1
                        continue
                    if u.s(j) != ";":
                        raise fail(f"unexpected `{u.s(j)}` in the declaration of threadgroup variable `{name}`",
                                    line)
                    stop = j
                    break
                u.kill(k, stop)
                u.t(k).text = " ".join(pieces)
                k = stop
            k += 1
