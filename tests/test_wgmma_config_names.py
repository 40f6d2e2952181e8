"""The names of the wgmma configurations: every boolean switch of a WsConfig is spelled by its name, read back by
parse_config, and in the kernel's name unless it leaves the kernel's text alone (wgmma_ws_names.NAME_FLAGS)."""

from dataclasses import fields, replace

import pytest

from ksearch.kernels.attention import WIDE_PERSIST
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention.wgmma_ws_names import HOST_FLAGS, NAME_FLAGS

# Spelled before the store tag, each in its own place of the name.
EARLY = {"bulk", "pp", "persist", "qnext", "obulk"}


def _switches() -> list[str]:
    return [f.name for f in fields(WS.WsConfig) if f.type in ("bool", bool)]


def test_every_boolean_switch_is_spelled_by_the_name() -> None:
    table = [field for _, field, _ in NAME_FLAGS]
    assert len(set(table)) == len(table) and len({tag for tag, _, _ in NAME_FLAGS}) == len(table)
    assert set(_switches()) == EARLY | set(table)  # a new switch goes into NAME_FLAGS (or its own spelling)


@pytest.mark.parametrize(("tag", "field"), [(tag, field) for tag, field, _ in NAME_FLAGS])
def test_each_switch_reads_back_and_names_its_kernel(tag: str, field: str) -> None:
    flipped = replace(WIDE_PERSIST, **{field: not getattr(WIDE_PERSIST, field)})
    name = WS.config_name(flipped)
    assert (tag in name.split("_")) == getattr(flipped, field)
    if WS.config_problem(flipped) is None:
        assert WS.parse_config(name) == flipped
    in_kernel = tag not in HOST_FLAGS
    assert (WS.kernel_name(flipped) != WS.kernel_name(WIDE_PERSIST)) == in_kernel


def test_an_unknown_switch_is_refused_with_every_spelling_listed() -> None:
    with pytest.raises(ValueError) as err:
        WS.parse_config("ws3_n64_s4_p4_tmas_pst_zz")
    message = str(err.value)
    assert "\n" not in message and all(f"[_{tag}]" in message and f"_{tag}: " in message for tag, _, _ in NAME_FLAGS)


def test_the_switches_go_in_the_tables_order() -> None:
    every = replace(WIDE_PERSIST, **{field: True for _, field, _ in NAME_FLAGS})
    name = WS.config_name(every)
    positions = [name.index(f"_{tag}") for tag, _, _ in NAME_FLAGS]
    assert positions == sorted(positions)
