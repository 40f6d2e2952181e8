"""Building one translation unit out of many kernels for the deep checks.

MLX compiles every kernel alone (its header, then its generated function). The checkers put many kernels into one
file because compiler start-up dominates: to stay faithful, kernels that share a header text share ONE copy of it
(so include guards and helper names behave as in a single MLX compile), different headers live in different
namespaces (so their helpers cannot clash), and the macros a header defines are undefined after its kernels (so the
next header's guard or constants start fresh). `#include` lines are hoisted: they cannot sit inside a namespace.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ksearch.knowledge.extract import KernelUse

# render(kernel, index, header_namespace) -> source text of the kernel function
KernelRenderer = Callable[[KernelUse, int, str], str]


def split_includes(header: str) -> tuple[list[str], str]:
    """`#include` lines hoisted out of a header; blank lines keep the line numbering of the rest."""
    includes, rest = [], []
    for line in header.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("#include") or stripped.startswith("#pragma once"):
            includes.append(line.strip())
            rest.append("")
        else:
            rest.append(line)
    return includes, "\n".join(rest)


def translation_unit(units: list[tuple[int, KernelUse]], render: KernelRenderer,
                     header_text: Callable[[str], str] = lambda h: h,
                     keep_include: Callable[[str], bool] = lambda _i: True) -> str:
    groups: dict[str, list[tuple[int, KernelUse]]] = {}
    for i, k in units:
        groups.setdefault(header_text(k.header), []).append((i, k))
    includes: list[str] = []
    parts: list[str] = []
    for j, (header, members) in enumerate(groups.items()):
        incs, rest = split_includes(header)
        includes += [i for i in incs if keep_include(i) and "pragma once" not in i and i not in includes]
        first, k0 = members[0]
        parts += [f"namespace ks_hdr{j} {{", f'#line 1 "kernel{first}_{k0.name}.header"', rest, "}"]
        parts += [render(k, i, f"ks_hdr{j}") for i, k in members]
        macros = list(dict.fromkeys(re.findall(r"^\s*#\s*define\s+(\w+)", rest, flags=re.M)))
        parts += [f"#undef {m}" for m in macros]
        if "__global__" in macros:
            # a header that gave its kernel launch bounds redefined the qualifier: the next kernels get the plain one
            parts.append("#define __global__ __attribute__((global))")
    return "\n".join(includes + parts) + "\n"
