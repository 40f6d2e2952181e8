"""The boolean switches a wgmma configuration's name spells after its store tag (`_cr`, `_sn`, `_r1`, ...), in one
table for wgmma_ws's kernel_name, config_name and parse_config and for dispatch_variant's flags."""

from __future__ import annotations

from typing import Any

# The switches a name spells after its store tag, in that order: (tag, WsConfig field, what it does). One table for
# kernel_name, config_name and parse_config (and dispatch_variant's flags), so a new switch is spelled once.
NAME_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("cr", "crescale", "O rescaled only when a row's maximum grew past 2^8"),
    ("qp", "qpf", "the next item's Q prefetched into L2"),
    ("m1", "maps1", "one pair of tensor maps a launch"),
    ("wt", "own_tiles", "each consumer warpgroup only the tiles its rows need"),
    ("sn", "snake", "persistent items in snake order"),
    ("hs", "sections", "persistent items a section of heads at a time"),
    ("kt", "ktail", "without the mask, the last round's items split along the keys"),
    ("uw", "uniform", "the consumers' index arithmetic on the uniform datapath"),
    ("qt", "qtma", "persistent, Q by the producer's tensor copies"),
    ("r1", "row_sums_once", "P's row sums by one product a tile"),
    ("xa", "exp_ahead", "P's exponentials ahead of the tile's maximum, a tile whose rows grew past 2^8 run again"),
    ("gp", "grouped", "without the mask, the query heads of a K / V head as one run of rows"),
)
# Host side only: the same kernel text, so not in the kernel's name.
HOST_FLAGS = frozenset({"gp"})


def flags_tag(cfg: Any, *, kernel: bool = False) -> str:
    """The name part for NAME_FLAGS's switches that are on (for the kernel's name, those that change its text)."""
    return "".join(f"_{tag}" for tag, field, _ in NAME_FLAGS
                   if getattr(cfg, field) and not (kernel and tag in HOST_FLAGS))
