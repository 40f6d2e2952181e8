"""`dispatch-FLAG` and `dispatch+FLAG`: at each shape, the dispatch's own wgmma kernel with one of its name's flags
(`_r1`, `_hs`, `_kt`, ...) off or on. Named in `ksearch bench attention --configs`, it is timed beside the dispatch
in the same rounds at every shape of the set, so a flag's effect on the dispatch is read off one process: the
dispatch's columns of two processes, one with the flag and one without, differ by as much as the flag's effect (a
kernel's latency moved up to 7% between processes at one shape on an H100; docs/kernels-attention.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ksearch.kernels.attention import wgmma_ws
from ksearch.kernels.attention.wgmma_ws import WsConfig

# A flag as the configuration's name spells it (wgmma_ws.config_name) -> the WsConfig field it sets.
FLAG_FIELDS = {"pst": "persist", "qn": "qnext", "pp": "pp", "ob": "obulk",
               **{tag: field for tag, field, _ in wgmma_ws.NAME_FLAGS}}


@dataclass(frozen=True)
class DispatchVariant:
    """The dispatch's kernel at each shape with `flag` on (True) or off (False)."""

    flag: str
    on: bool

    @property
    def name(self) -> str:
        return f"dispatch{'+' if self.on else '-'}{self.flag}"


def parse_dispatch_variant(name: str) -> DispatchVariant:
    """"dispatch-r1" -> the dispatch's kernel without `_r1`; "dispatch+hs" -> with `_hs`. ValueError in one line for
    any other spelling or flag."""
    m = re.fullmatch(r"dispatch([+-])(\w+)", name.strip())
    if not m or m[2] not in FLAG_FIELDS:
        raise ValueError(f"{name!r} is not a variant of the dispatch: write dispatch-FLAG (the dispatch's kernel at "
                         f"each shape without _FLAG) or dispatch+FLAG (with it), FLAG one of "
                         f"{', '.join(FLAG_FIELDS)} (e.g. dispatch-r1)")
    return DispatchVariant(m[2], m[1] == "+")


def variant_config(kernel: str, variant: DispatchVariant) -> WsConfig | None:
    """The dispatch's kernel `kernel` (its name as `prefill_plan` gives it) with the variant's flag set: the same
    configuration where the flag is already so; None where `kernel` is no producer-warpgroup wgmma configuration
    (`native`, `mma_sync_*`, the float32 kernels, `wg*`) or the flag set so can run at no shape (`dispatch-pst` on a
    persistent kernel with `_sn`, say): there MLX's attention stands in, as for a named configuration that does not
    fit, and the summaries leave the shape out."""
    if not kernel.startswith("ws"):
        return None
    cfg = replace(wgmma_ws.parse_config(kernel), **{FLAG_FIELDS[variant.flag]: variant.on})
    return None if wgmma_ws.config_problem(cfg) else cfg
