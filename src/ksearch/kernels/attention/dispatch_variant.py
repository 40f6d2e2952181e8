"""`dispatch-FLAG` and `dispatch+FLAG`: at each shape, the dispatch's own wgmma kernel with one of its name's flags
(`_r1`, `_hs`, `_kt`, ...) off or on, or several in a row (`dispatch-sn-r1`, `dispatch-sn+qt`). Named in `ksearch
bench attention --configs`, it is timed beside the dispatch in the same rounds at every shape of the set, so a flag's
effect on the dispatch is read off one process: the dispatch's columns of two processes, one with the flag and one
without, differ by as much as the flag's effect (a kernel's latency moved up to 7% between processes at one shape on
an H100; docs/kernels-attention.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ksearch.kernels.attention import wgmma_ws
from ksearch.kernels.attention.wgmma_ws import WsConfig
from ksearch.kernels.attention.wgmma_ws_names import NAME_FLAGS

# A flag as the configuration's name spells it (wgmma_ws.config_name) -> the WsConfig field it sets.
FLAG_FIELDS = {"pst": "persist", "qn": "qnext", "pp": "pp", "ob": "obulk",
               **{tag: field for tag, field, _ in NAME_FLAGS}}


@dataclass(frozen=True)
class DispatchVariant:
    """The dispatch's kernel at each shape with each of `switches`' flags on (True) or off (False)."""

    switches: tuple[tuple[str, bool], ...]

    @property
    def name(self) -> str:
        return "dispatch" + "".join(f"{'+' if on else '-'}{flag}" for flag, on in self.switches)


def parse_dispatch_variant(name: str) -> DispatchVariant:
    """"dispatch-r1" -> the dispatch's kernel without `_r1`; "dispatch+hs" -> with `_hs`; "dispatch-sn-r1" -> without
    either. ValueError in one line for any other spelling, an unknown flag or a flag named twice."""
    text = name.strip()
    switches = tuple((flag, sign == "+") for sign, flag in re.findall(r"([+-])([a-z0-9]+)", text))
    flags = [flag for flag, _ in switches]
    if (not re.fullmatch(r"dispatch(?:[+-][a-z0-9]+)+", text) or any(f not in FLAG_FIELDS for f in flags)
            or len(set(flags)) != len(flags)):
        raise ValueError(f"{name!r} is not a variant of the dispatch: write dispatch-FLAG (the dispatch's kernel at "
                         f"each shape without _FLAG) or dispatch+FLAG (with it), several in a row for several flags "
                         f"(each once), FLAG one of {', '.join(FLAG_FIELDS)} (e.g. dispatch-r1, dispatch-sn+qt)")
    return DispatchVariant(switches)


def variant_config(kernel: str, variant: DispatchVariant) -> WsConfig | None:
    """The dispatch's kernel `kernel` (its name as `prefill_plan` gives it) with the variant's flags set: the same
    configuration where they are already so; None where `kernel` is no producer-warpgroup wgmma configuration
    (`native`, `mma_sync_*`, the float32 kernels, `wg*`) or the flag set so can run at no shape (`dispatch-pst` on a
    persistent kernel with `_sn`, say): there MLX's attention stands in, as for a named configuration that does not
    fit, and the summaries leave the shape out."""
    if not kernel.startswith("ws"):
        return None
    cfg = replace(wgmma_ws.parse_config(kernel), **{FLAG_FIELDS[flag]: on for flag, on in variant.switches})
    return None if wgmma_ws.config_problem(cfg) else cfg
