"""`dispatch-FLAG` / `dispatch+FLAG` in `ksearch bench attention --configs`: the dispatch's own kernel at each shape
with one flag (or several: `dispatch-sn-r1`) off or on, timed beside the dispatch in the same rounds."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest

from ksearch.bench import attention as ba
from ksearch.kernels.attention import TALL, WIDE_PERSIST, WIDE_SPLIT_TAIL, parse_prefill_config
from ksearch.kernels.attention.dispatch_variant import (
    FLAG_FIELDS,
    DispatchVariant,
    parse_dispatch_variant,
    variant_config,
)
from ksearch.kernels.attention.wgmma_ws import WsConfig, config_name, parse_config


def test_a_variant_is_read_from_its_name_and_spelled_back() -> None:
    assert parse_dispatch_variant("dispatch-r1") == DispatchVariant((("r1", False),))
    assert parse_dispatch_variant(" dispatch+hs ") == DispatchVariant((("hs", True),))
    assert parse_dispatch_variant("dispatch-kt").name == "dispatch-kt"
    assert parse_prefill_config("dispatch+uw") == DispatchVariant((("uw", True),))  # as --configs takes it
    both = parse_dispatch_variant("dispatch-sn+qt")
    assert both == DispatchVariant((("sn", False), ("qt", True))) and both.name == "dispatch-sn+qt"


@pytest.mark.parametrize("name", ["dispatch-zz", "dispatch_r1", "dispatch-", "dispatch", "dispatch-r1-zz",
                                  "dispatch-r1+r1", "dispatch-r1 hs", "dispatch-R1"])
def test_a_bad_variant_is_one_line_that_names_the_flags(name: str) -> None:
    with pytest.raises(ValueError, match="write dispatch-FLAG") as err:
        parse_prefill_config(name)
    assert "\n" not in str(err.value) and "r1" in str(err.value)


def test_every_flag_is_a_switch_of_the_configuration_spelled_as_its_name_spells_it() -> None:
    switches = {f.name for f in fields(WsConfig) if f.type in ("bool", bool)}
    assert set(FLAG_FIELDS.values()) <= switches
    plain = WsConfig(wg=3, bn=64, stages=4, pwarps=4)
    for flag, field in FLAG_FIELDS.items():
        assert flag in config_name(replace(plain, **{field: True})).split("_")
        assert flag not in config_name(plain).split("_")


def test_a_variant_is_the_dispatchs_kernel_with_the_flag_set() -> None:
    off = variant_config(config_name(WIDE_SPLIT_TAIL), DispatchVariant((("r1", False),)))
    assert off == replace(WIDE_SPLIT_TAIL, row_sums_once=False)
    assert config_name(off) == config_name(WIDE_SPLIT_TAIL).replace("_r1", "")  # nothing else changed
    # a flag already as asked: the dispatch's own kernel, timed again beside itself (a control at that shape)
    assert variant_config(config_name(TALL), DispatchVariant((("r1", False),))) == TALL
    assert variant_config(config_name(WIDE_PERSIST), DispatchVariant((("r1", True),))) == WIDE_PERSIST
    on = variant_config(config_name(TALL), DispatchVariant((("hs", True),)))
    assert on == replace(TALL, sections=True) and parse_config(config_name(on)) == on
    # several flags at once: each set, nothing else changed
    both = variant_config(config_name(WIDE_PERSIST), parse_dispatch_variant("dispatch-sn-r1"))
    assert both == replace(WIDE_PERSIST, snake=False, row_sums_once=False)


@pytest.mark.parametrize("kernel", ["native", "mma_sync_m128_n64_db", "mma_tf32x3_m64_n32_qr_fl", "wg3_n64",
                                    "metal_simdgroup"])
def test_a_kernel_with_no_such_variant_gives_none(kernel: str) -> None:
    assert variant_config(kernel, DispatchVariant((("r1", False),))) is None


def test_a_variant_that_can_run_at_no_shape_gives_none() -> None:
    # persistent blocks off leaves snake order and the uniform index without what they need
    assert variant_config(config_name(WIDE_PERSIST), DispatchVariant((("pst", False),))) is None


def test_the_bench_resolves_a_variant_at_each_shape_and_leaves_named_configurations_alone() -> None:
    named = parse_config("ws3_n64_s4_p4_bulk")
    assert ba.shape_config(named, config_name(WIDE_PERSIST)) is named
    variant = DispatchVariant((("r1", False),))
    assert ba.shape_config(variant, config_name(WIDE_PERSIST)) == replace(WIDE_PERSIST, row_sums_once=False)
    assert ba.shape_config(variant, "native") is ba.NO_KERNEL


def test_a_variant_where_the_dispatch_has_no_wgmma_kernel_times_mlx_and_says_so() -> None:
    pytest.importorskip("mlx.core")
    shape = {"B": 1, "Hq": 4, "Hkv": 2, "D": 64, "L": 128, "S": 128, "dtype": "float16", "causal": True}
    row = ba.bench_prefill_shape(shape, rounds=2, n=1, configs=["dispatch-r1"])
    c = row["configs"]["dispatch-r1"]
    # off Hopper the dispatch runs no wgmma kernel: MLX's attention stands in, and the summaries leave it out
    assert c["kernel"] == "native" and c["latency_s"] > 0 and c["max_abs_diff_vs_native"] == 0.0
    assert ba.summarize_prefill([row])["configs"]["dispatch-r1"]["shapes"] == 0


def test_a_bad_variant_stops_the_bench_in_one_line_before_anything_runs(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "ksearch.cli", "bench", "attention", "--configs", "dispatch-zz",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is not a variant of the dispatch" in proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []
