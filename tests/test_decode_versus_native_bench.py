"""Decode configurations named on the command line (`attention_gpu.py versus-native`, `ksearch bench decode
--config`); the timing itself needs the GPU (`bash benchmarks/gpu_suite.sh decode-versus-native`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_a_configuration_is_named_by_its_fields():
    from ksearch.kernels.decode.cuda_split_k import DecodeConfig

    cfg = DecodeConfig.parse("warps=8,unroll=2,fused=1,prefetch=0")
    assert cfg == DecodeConfig(warps=8, unroll=2, fused=True, prefetch=False)
    assert DecodeConfig.parse("") == DecodeConfig()
    with pytest.raises(ValueError, match="unroll='x': give an integer"):
        DecodeConfig.parse("unroll=x")


def test_an_unknown_field_is_refused_with_the_fields_there_are():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/attention_gpu.py"), "versus-native", "/tmp/unused",
                          "warp=8"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "unknown DecodeConfig field 'warp'" in out.stderr and "warps" in out.stderr
