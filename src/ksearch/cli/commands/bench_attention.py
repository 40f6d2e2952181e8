"""`ksearch bench attention` and `ksearch bench decode`: our kernels vs MLX's native attention, side by side
(the suites: ksearch.bench.attention)."""

from __future__ import annotations

import typer

from ksearch.cli.out_dir import check_out_dir


def check_wgmma_env() -> None:
    """A bad KSEARCH_WGMMA, KSEARCH_WGMMA_CONFIG or KSEARCH_METAL_PREFILL fails here, as one line, not as a traceback
    from inside the first kernel call."""
    import os

    from ksearch.kernels.attention import metal_prefill_setting, wgmma_setting
    from ksearch.kernels.attention.wgmma_ws import parse_config

    name = os.environ.get("KSEARCH_WGMMA_CONFIG", "").strip()
    if name:
        try:
            parse_config(name)
        except ValueError as exc:
            raise typer.BadParameter(f"KSEARCH_WGMMA_CONFIG: {exc}") from exc
    try:
        metal_prefill_setting()
        wgmma_setting()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def check_configs(text: str) -> list[str]:
    """--configs as a list of names, each one a configuration that can run here (a Metal kernel only on Metal); else
    one line saying which."""
    from ksearch.kernels import device
    from ksearch.kernels.attention import MetalConfig, parse_prefill_config

    names = [n.strip() for n in text.split(",") if n.strip()]
    if len(set(names)) != len(names):
        raise typer.BadParameter(f"{text!r} names a configuration twice; name each once", param_hint="--configs")
    for name in names:
        try:
            cfg = parse_prefill_config(name)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--configs") from None
        if isinstance(cfg, MetalConfig) and device.backend() != "metal":
            raise typer.BadParameter(f"{name} is a Metal kernel: time it on a Mac (with KSEARCH_METAL_KERNELS=1)",
                                     param_hint="--configs")
    return names


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("attention")
    def attention_cmd(full: bool = typer.Option(False, help="all 96 benchmark shapes (B=4 at every dtype/Hkv)"),
                      out: str = typer.Option("benchmarks/results", help="directory for the JSON result"),
                      configs: str = typer.Option("", help="configurations to time beside the dispatch in the same "
                                                  "rounds, comma-separated: wgmma ones (e.g. 'ws3_n64_s4_p4_bulk,"
                                                  "ws2_n128_s3_p4_bulk'), variants of the dispatch (dispatch-r1: its "
                                                  "kernel at each shape without _r1; dispatch+hs: with _hs) or, on a "
                                                  "Mac, Metal kernels ('metal_fragments'); written as "
                                                  "attention-prefill-configs-*.json"),
                      calls: str = typer.Option("independent", help="independent: the same inputs every call, calls "
                                                "free to overlap on the device; chained: each call's query the "
                                                "previous call's output, as a model's layers wait for each other "
                                                "(`attention-prefill-*-chained-*.json`)"),
                      lengths: str = typer.Option("", help="only the shapes at these L, comma-separated (e.g. "
                                                  "'2048'; `attention-prefill-*-l2048-*.json`)"),
                      dtypes: str = typer.Option("", help="the shapes at these dtypes instead of float16 and "
                                                 "bfloat16, comma-separated, of float16, bfloat16, float32 (e.g. "
                                                 "'float32'; `attention-prefill-*-float32-*.json`)")
                      ) -> None:
        """Prefill attention: ksearch.kernels.attention (wgmma on Hopper, mma.sync elsewhere, the Metal kernels on a Mac
        with KSEARCH_METAL_KERNELS=1) vs MLX native attention."""
        from ksearch.bench.attention import CALLS, prefill_dtypes, prefill_lengths, prefill_shapes, run_bench

        if calls not in CALLS:
            raise typer.BadParameter(f"{calls!r}: use {' or '.join(CALLS)}", param_hint="--calls")
        check_wgmma_env()
        names = check_configs(configs)
        try:
            picked = [int(n) for n in lengths.split(",") if n.strip()]
        except ValueError:
            raise typer.BadParameter(f"{lengths!r}: write lengths as comma-separated integers, e.g. '2048,4096'",
                                     param_hint="--lengths") from None
        try:
            types = prefill_dtypes([t.strip() for t in dtypes.split(",") if t.strip()])
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--dtypes") from None
        try:
            prefill_lengths(prefill_shapes(full, types), picked)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--lengths") from None
        check_out_dir(out)
        run_bench("prefill", full, out, configs=names, name="attention-prefill-configs" if names else None,
                  calls=calls, lengths=picked, dtypes=types)

    @bench_app.command("decode")
    def decode_cmd(full: bool = typer.Option(True, help="add a bf16 and a D=64 shape to the B x length grid"),
                   out: str = typer.Option("benchmarks/results", help="directory for the JSON result"),
                   kernel: str = typer.Option("library", help="library: the dispatch (split-K, the tensor-core "
                                              "kernel above 64 MiB of K/V on Hopper); split_k: split-K at every "
                                              "shape; mma_split: tensor cores, without clusters (Hopper); cluster: "
                                              "the same in one launch (Hopper, MLX_USE_CUDA_GRAPHS=0)"),
                   config: str = typer.Option("", help="a configuration other than the kernel's default, e.g. "
                                              "'target_blocks=528,min_chunk=256' for split_k (and the library's), 'consumers=4,"
                                              "producers=2' for mma_split, 'unroll=2,warps=8' for the Metal kernel on a "
                                              "Mac (written as decode-config-*.json)"),
                   calls: str = typer.Option("chained", help="chained: each call's query is the previous call's "
                                             "output, caches read in turn (a model's layers); independent: the same "
                                             "inputs every call, calls free to overlap on the device "
                                             "(`decode-*-independent-*.json`)"),
                   stream: bool = typer.Option(True, help="also time the calls as a stream, handed to the device "
                                               "8 at a time, the next 8 built while the device runs them (a model's "
                                               "generate loop): the rows' stream_* figures beside the queued rounds'")
                   ) -> None:
        """GQA decode: our kernel vs MLX's attention on the cache (the faster of two ways)."""
        from ksearch.bench.attention import CALLS, SPLIT_K, run_bench
        from ksearch.kernels import device
        from ksearch.kernels.decode.cuda_cluster import GRAPHS_ERROR, ClusterConfig, graphs_off
        from ksearch.kernels.decode.cuda_split_k import DecodeConfig
        from ksearch.kernels.decode.metal_split_k import MetalDecodeConfig

        if kernel not in ("library", "split_k", "mma_split", "cluster"):
            raise typer.BadParameter(f"{kernel!r}: use library, split_k, mma_split or cluster", param_hint="--kernel")
        on_metal = device.backend() == "metal"
        if on_metal and kernel != "library":
            raise typer.BadParameter(f"{kernel} is a CUDA kernel: on a Mac time the library (its Metal split-K "
                                     "kernel), with --config for its knobs (e.g. unroll=2)", param_hint="--kernel")
        if calls not in CALLS:
            raise typer.BadParameter(f"{calls!r}: use {' or '.join(CALLS)}", param_hint="--calls")
        if kernel == "cluster" and not graphs_off():
            raise typer.BadParameter(GRAPHS_ERROR, param_hint="--kernel")
        if config and kernel == "cluster":
            raise typer.BadParameter("a configuration is for the split_k and mma_split kernels", param_hint="--config")
        try:
            chosen = (MetalDecodeConfig.parse(config) if on_metal and config else
                      DecodeConfig.parse(config) if kernel in ("library", "split_k") and config else
                      ClusterConfig.parse_mma_split(config) if kernel == "mma_split" else None)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--config") from None
        check_out_dir(out)
        # Anything but the default kernel in its default configuration gets a file of its own.
        if kernel == "cluster":
            run_bench("decode", full, out, config=ClusterConfig(), name="decode-cluster", calls=calls, stream=stream)
        elif kernel == "mma_split":
            run_bench("decode", full, out, config=chosen, name="decode-config" if config else "decode-mma-split",
                      calls=calls, stream=stream)
        elif chosen is not None:
            run_bench("decode", full, out, config=chosen, name="decode-config", calls=calls, stream=stream)
        elif kernel == "split_k":
            run_bench("decode", full, out, config=SPLIT_K, name="decode-split-k", calls=calls, stream=stream)
        else:
            run_bench("decode", full, out, calls=calls, stream=stream)
