"""The flash_wgmma family's persistent kernels by call shape, as the library's dispatch picks them
(ksearch.kernels.attention.wgmma_config): `sections`, the heads a section at a time (`_hs`) where a call has more K / V
heads than a section, and `tail`, the last round split along the keys (`_kt`, three warpgroups, no mask) where it
holds at most half the grid. A rendering with either carries each kernel it may pick and the library's rules for
them (wgmma_ws_grid, wgmma_ws_tail), so the search reaches what the dispatch runs at the task's workloads."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

from ksearch.kernels.attention import wgmma_ws, wgmma_ws_tail

#: The kernels a persistent rendering may pick, in the order its calls try them.
VARIANTS = ("kt", "hs", "plain")


def variant_configs(ws: Any, p: dict[str, Any]) -> dict[str, Any]:
    """{variant: WsConfig} a rendering carries: always the plain kernel; with `sections` the same with `_hs` (two
    warpgroups then keep 32 producer registers, as the library's TALL_SECTIONS); with `tail` the same with `_kt`
    (and `_hs` where `sections`, as the library's WIDE_SPLIT_TAIL)."""
    out = {"plain": ws}
    if p.get("sections"):
        out["hs"] = replace(ws, sections=True, preg=32 if ws.wg == 2 else ws.preg)
    if p.get("tail"):
        out["kt"] = replace(ws, sections=bool(p.get("sections")), ktail=True)
    return out


def host_code(p: dict[str, Any], bm: int, bn: int) -> str:
    """The candidate's `_variant(b, hq, hkv, length, s, causal)` (which kernel a call takes, and its persistent grid)
    and, with `tail`, `_kt` launch sizes from the library's own functions."""
    tail = bool(p.get("tail"))
    parts = [f"MAX_PARTS = {wgmma_ws_tail.MAX_PARTS}\nWARPS = {wgmma_ws_tail.WARPS}"] if tail else []
    parts += [inspect.getsource(f) for f in (wgmma_ws_tail.tail_parts, wgmma_ws_tail.scratch_floats,
                                              wgmma_ws_tail.counter_count)] if tail else []
    kt_rule = (f'''    if tail_parts(items, grid, (s + {bn - 1}) // {bn}, bool(causal))[2] > 1:
        return "kt", items, grid  # its last round split along the keys (`_kt`)
''' if tail else "")
    hs_rule = ('''    if b * hkv > max(1, grid // 4):
        return "hs", items, grid  # more K / V heads than a section (`_hs`)
''' if p.get("sections") else "")
    return "\n\n".join(parts) + f'''

def _variant(b, hq, hkv, length, s, causal):
    # (the kernel this call takes, its work items, its persistent grid), by the library's dispatch rules
    items = (length + {bm - 1}) // {bm} * b * hq
    grid = min(items, cuda_sm_count())
{kt_rule}{hs_rule}    return "plain", items, grid

'''


def stage_text(ws: Any) -> str:
    """The producer kernel's own template constants after T, D, WG, BN and CAUSAL, as a call's literal list."""
    return "".join(f", ({name!r}, {value!r})" for name, value in wgmma_ws.stage_args(ws)).replace("'", '"')


def template_args(ws: Any, d: int) -> str:
    return f'("T", q.dtype), ("D", {d}), ("WG", {ws.wg}), ("BN", {ws.bn}), ("CAUSAL", bool(causal)){stage_text(ws)}'


def io_names(variant: str) -> tuple[str, str]:
    """The kernel's input and output names (a tensor-copy kernel's, with `_kt`'s counters and records)."""
    ins, outs = ["q", "k", "v", "scale", "tmap"], ["o", "maps"]
    if variant == "kt":
        ins, outs = [*ins, "counts"], [*outs, "part"]
    return repr(ins).replace("'", '"'), repr(outs).replace("'", '"')


def source_name(variant: str) -> str:
    return "WS_SOURCE" if variant == "plain" else f"WS_SOURCE_{variant.upper()}"


def sources(variants: dict[str, Any]) -> str:
    """The kernel texts beside WS_SOURCE (the plain kernel's, which the rendering writes itself)."""
    return "".join(f"\n{source_name(v)} = {wgmma_ws.source_text(ws)!r}" for v, ws in variants.items() if v != "plain")


def objects(variants: dict[str, Any], d: int, threads: int, smem: int) -> str:
    """Module-level kernel objects of the variants beside the plain kernel's `_wg{d}` (without `constants`)."""
    out = []
    for v in variants:
        if v != "plain":
            ins, outs = io_names(v)
            out.append(f'''
_wg{d}_{v} = mx.fast.cuda_kernel(name="flash_wgmma_{v}_d{d}", input_names={ins}, output_names={outs},
                             source={source_name(v)}, header=WG_HEADER_{threads}, shared_memory={smem})''')
    return "".join(out)


def calls(variants: dict[str, Any], d: int, threads: int, constants: bool) -> str:
    """A head dim's branch of `run`: the kernel `_variant` picks for the call, launched on its persistent grid."""
    lines = [f"        if d == {d}:",
             "            which, items, grid = _variant(b, hq, k.shape[1], length, s, causal)"]
    for v in VARIANTS:
        if v not in variants:
            continue
        ws = variants[v]
        fn = (f'_kernel("{"wg" if v == "plain" else "wg_" + v}", q.dtype, {d}, bool(causal))' if constants
              else f"_wg{d}" + ("" if v == "plain" else f"_{v}"))
        tmpl = "" if constants else f"\n                          template=[{template_args(ws, d)}],"
        kt = v == "kt"
        counts = f", mx.zeros((counter_count(items, grid, {ws.wg}),), dtype=mx.uint32)" if kt else ""
        part = (f", (scratch_floats(items, grid, (s + {ws.bn - 1}) // {ws.bn}, bool(causal), {ws.wg}, {d}),)"
                if kt else "")
        call = f'''return {fn}(inputs=[q, k, v, scale, _tmap(tuple(k.shape), {ws.bn}){counts}],{tmpl}
                          grid=(grid * {threads}, 1, 1), threadgroup=({threads}, 1, 1),
                          output_shapes=[q.shape, (grid * 32 + 16,){part}],
                          output_dtypes=[q.dtype, mx.uint64{", mx.float32" if kt else ""}])[0]'''
        if v == "plain":  # the last: whatever no rule took
            lines.append("            " + call)
        else:  # one level deeper, continuation lines included
            lines.append(f'            if which == "{v}":\n                ' + call.replace("\n", "\n    "))
    return "\n".join(lines)


def maker_branches(variants: dict[str, Any], threads: int, smem: dict[int, int]) -> str:
    """The `_kernel` maker's branches for the variants (with `constants`): each made at its first call with its own
    template constants."""
    out = []
    for v, ws in variants.items():
        if v == "plain":
            continue
        ins, outs = io_names(v)
        args = template_args(ws, 128).replace("q.dtype", "dtype").replace("bool(causal)", "causal").replace(
            '("D", 128)', '("D", d)')
        out.append(f'''        elif kind == "wg_{v}":
            kern = _make("flash_wgmma_{v}", {source_name(v)}, {ins}, {outs}, WG_HEADER_{threads}, ({args}),
                         {smem[64]} if d == 64 else {smem[128]}, True)
''')
    return "".join(out)
