"""The Metal split-K decode's knobs as a configuration (MetalDecodeConfig): parsed and refused in one line, taken by
`decode` only on Metal (MLX's attention elsewhere), and named to `ksearch bench decode --config` on a Mac, where the
CUDA kernels are refused."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.kernels import device
from ksearch.kernels.decode.metal_split_k import MetalDecodeConfig

mx = pytest.importorskip("mlx.core")


def test_parsed_with_the_librarys_defaults_and_refused_in_one_line() -> None:
    assert MetalDecodeConfig.parse("") == MetalDecodeConfig(warps=4, target_blocks=256, unroll=1)
    assert MetalDecodeConfig.parse("unroll=2, warps=8") == MetalDecodeConfig(warps=8, unroll=2)
    for text, said in (("min_chunk=512", "unknown MetalDecodeConfig field 'min_chunk'"), ("unroll=3", "unroll 1, 2 or 4"),
                       ("warps=x", "give an integer"), ("target_blocks=0", "target_blocks at least 1")):
        with pytest.raises(ValueError, match=said) as err:
            MetalDecodeConfig.parse(text)
        assert "\n" not in str(err.value)


def test_off_metal_it_runs_mlxs_attention() -> None:
    from ksearch.kernels.decode import decode_plan

    q, kc = mx.zeros((1, 4, 1, 64), dtype=mx.float16), mx.zeros((1, 2, 64, 64), dtype=mx.float16)
    assert decode_plan(q, kc, kc, 32, config=MetalDecodeConfig(unroll=2))[0] == "native"


@pytest.fixture
def on_a_mac(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(device, "backend", lambda: "metal")
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")


def test_on_metal_it_runs_the_metal_kernel_with_its_knobs(on_a_mac: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from ksearch.kernels.decode import decode, decode_plan, metal_split_k

    seen: list[tuple[int, int, int]] = []
    monkeypatch.setattr(metal_split_k, "decode_metal",
                        lambda q, kc, vc, length, warps, blocks, unroll: seen.append((warps, blocks, unroll)) or q)
    q, kc = mx.zeros((1, 4, 1, 64), dtype=mx.float16), mx.zeros((1, 2, 64, 64), dtype=mx.float16)
    assert decode_plan(q, kc, kc, 32, config=MetalDecodeConfig(unroll=2, warps=8))[0] == "metal_split_k"
    decode(q, kc, kc, 32, config=MetalDecodeConfig(unroll=2, warps=8))
    decode(q, kc, kc, 32)
    assert seen == [(8, 256, 2), (4, 256, 1)]
    # 8 simdgroups of 8 query heads at D=128 would need 33,280 bytes of threadgroup memory: MLX's attention instead
    q8, kc8 = mx.zeros((1, 8, 1, 128), dtype=mx.float16), mx.zeros((1, 1, 64, 128), dtype=mx.float16)
    assert not MetalDecodeConfig(warps=8).fits(8, 128) and MetalDecodeConfig(warps=4).fits(8, 128)
    assert decode_plan(q8, kc8, kc8, 32, config=MetalDecodeConfig(warps=8))[0] == "native"
    assert decode_plan(q8, kc8, kc8, 32)[0] == "metal_split_k"


@pytest.mark.parametrize(("args", "said"), [(["--kernel", "split_k"], "split_k is a CUDA kernel"),
                                            (["--kernel", "cluster"], "cluster is a CUDA kernel"),
                                            (["--config", "min_chunk=512"], "unknown MetalDecodeConfig field")])
def test_bench_decode_on_a_mac_refuses_the_cuda_kernels_and_their_knobs(on_a_mac: Any, tmp_path: Any,
                                                                        args: list[str], said: str) -> None:
    r = CliRunner().invoke(app, ["bench", "decode", *args, "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert r.exit_code == 2 and said in " ".join(r.output.split()), r.output
    assert list(tmp_path.iterdir()) == []
