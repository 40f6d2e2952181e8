"""Mamba-1 language model in MLX on ksearch's selective-scan kernels (prefill: conv kernel + chunked parallel scan;
decode: one fused kernel per layer for conv update, x_proj, dt_proj, SSM step and gate).

Loads Hugging Face Mamba checkpoints from a local directory (config.json + *.safetensors), in either naming:
the original `state-spaces/mamba-*` one (d_model, n_layer, `backbone.embedding`) or the transformers `-hf` one
(hidden_size, num_hidden_layers, `backbone.embeddings`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import mlx.nn as nn

from ksearch.kernels.selective_scan import MixerParams, derive_params, mixer_decode, mixer_prefill

F32 = mx.float32


@dataclass
class ModelArgs:
    vocab_size: int = 50280
    d_model: int = 1024
    n_layer: int = 48
    d_state: int = 16
    d_conv: int = 4
    expand: int = 2
    dt_rank: int = 0  # 0: ceil(d_model / 16)
    conv_bias: bool = True
    bias: bool = False
    rms_norm_eps: float = 1e-5
    tie_embeddings: bool = True
    pad_vocab_size_multiple: int = 8

    def __post_init__(self) -> None:
        if not self.dt_rank:
            self.dt_rank = math.ceil(self.d_model / 16)
        m = self.pad_vocab_size_multiple
        if m > 1 and self.vocab_size % m:
            self.vocab_size += m - self.vocab_size % m

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ModelArgs:
        """Either naming: original (d_model, n_layer, ssm_cfg) or transformers (hidden_size, num_hidden_layers)."""
        ssm = cfg.get("ssm_cfg") or {}
        d_model = cfg.get("d_model", cfg.get("hidden_size"))
        if d_model is None:
            raise ValueError("config.json has neither d_model nor hidden_size: is this a Mamba checkpoint?")
        expand = cfg.get("expand", ssm.get("expand", 2))
        if "intermediate_size" in cfg:
            expand = cfg["intermediate_size"] // d_model
        dt_rank = cfg.get("time_step_rank", ssm.get("dt_rank", "auto"))
        return cls(
            vocab_size=cfg["vocab_size"],
            d_model=d_model,
            n_layer=cfg.get("n_layer", cfg.get("num_hidden_layers", 0)),
            d_state=cfg.get("state_size", ssm.get("d_state", 16)),
            d_conv=cfg.get("conv_kernel", ssm.get("d_conv", 4)),
            expand=expand,
            dt_rank=0 if dt_rank == "auto" else int(dt_rank),
            conv_bias=cfg.get("use_conv_bias", ssm.get("conv_bias", True)),
            bias=cfg.get("use_bias", ssm.get("bias", False)),
            rms_norm_eps=cfg.get("layer_norm_epsilon", cfg.get("rms_norm_eps", 1e-5)),
            tie_embeddings=cfg.get("tie_word_embeddings", cfg.get("tie_embeddings", True)),
            # The -hf configs carry the already padded vocabulary.
            pad_vocab_size_multiple=cfg.get("pad_vocab_size_multiple", 8 if "d_model" in cfg else 1),
        )


# Sizes of the published checkpoints (d_model, n_layer); vocab 50280 after padding.
CONFIGS = {"130m": (768, 24), "370m": (1024, 48), "790m": (1536, 48), "1.4b": (2048, 48), "2.8b": (2560, 64)}


def config(name: str) -> ModelArgs:
    d_model, n_layer = CONFIGS[name]
    return ModelArgs(d_model=d_model, n_layer=n_layer)


class DepthwiseConv(nn.Module):
    """Holds the causal depthwise conv's parameters in PyTorch's layout (dim, 1, K), as checkpoints store them."""

    def __init__(self, dim: int, kernel: int, bias: bool) -> None:
        super().__init__()
        self.weight = mx.zeros((dim, 1, kernel))
        if bias:
            self.bias = mx.zeros((dim,))


class MambaMixer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        di, n, r = args.d_inner, args.d_state, args.dt_rank
        self.in_proj = nn.Linear(args.d_model, 2 * di, bias=args.bias)
        self.conv1d = DepthwiseConv(di, args.d_conv, args.conv_bias)
        self.x_proj = nn.Linear(di, r + 2 * n, bias=False)
        self.dt_proj = nn.Linear(r, di, bias=True)
        # mx.contiguous: a broadcast array has stride 0 over channels, and the kernels index parameters directly.
        self.A_log = mx.contiguous(mx.log(mx.broadcast_to(mx.arange(1, n + 1, dtype=F32), (di, n))))
        self.D = mx.ones((di,))
        self.out_proj = nn.Linear(di, args.d_model, bias=args.bias)
        self._params: MixerParams | None = None
        self._proj: tuple[tuple[int, ...], mx.array, mx.array] | None = None

    def params(self) -> dict[str, Any]:
        """Kernel-ready parameters, derived once (and again only if a weight array is replaced)."""
        self._params = derive_params(self.A_log, self.D, self.conv1d.weight,
                                     self.conv1d.get("bias"), self.x_proj.weight, self.dt_proj.weight,
                                     self.dt_proj.bias, self.in_proj.weight.dtype, self._params)
        return self._params.values

    def proj_t(self) -> tuple[mx.array, mx.array]:
        """in_proj and out_proj weights transposed once: a per-call `.T` is one more graph node per layer."""
        key = (id(self.in_proj.weight), id(self.out_proj.weight))
        if self._proj is None or self._proj[0] != key:
            self._proj = (key, self.in_proj.weight.T, self.out_proj.weight.T)
        return self._proj[1], self._proj[2]

    def __call__(self, x: mx.array, cache: list[Any] | None) -> mx.array:
        """x (b, L, d_model) -> the gated scan output y (b, L, d_inner); out_proj is applied by the block."""
        args = self.args
        p = self.params()
        batch, length, _ = x.shape
        xz = self.in_proj(x) if "bias" in self.in_proj else x @ self.proj_t()[0]
        conv_state = cache[0] if cache is not None else None
        ssm_state = cache[1] if cache is not None else None
        if length == 1 and cache is not None:
            if conv_state is None:
                conv_state = mx.zeros((batch, args.d_conv - 1, args.d_inner), dtype=x.dtype)
                ssm_state = mx.zeros((batch, args.d_inner, args.d_state), dtype=F32)
            y, conv_state, ssm_state = mixer_decode(xz, p, conv_state, ssm_state)  # type: ignore[arg-type]
        else:
            y, conv_state, ssm_state = mixer_prefill(xz, p, conv_state, ssm_state)
        if cache is not None:
            cache[0], cache[1] = conv_state, ssm_state
        return y


class ResidualBlock(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.mixer = MambaMixer(args)
        self.norm = nn.RMSNorm(args.d_model, eps=args.rms_norm_eps)

    def __call__(self, x: mx.array, cache: list[Any] | None) -> mx.array:
        y = self.mixer(self.norm(x), cache)
        out = self.mixer.out_proj
        if "bias" in out:
            return out(y) + x
        # Plain matmul + add (not mx.addmm): once suspected of our GPU NaNs, which came from a broadcast A_log instead.
        return y @ self.mixer.proj_t()[1] + x


class Backbone(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(args.vocab_size, args.d_model)
        self.layers = [ResidualBlock(args) for _ in range(args.n_layer)]
        self.norm_f = nn.RMSNorm(args.d_model, eps=args.rms_norm_eps)


class Model(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.backbone = Backbone(args)
        if not args.tie_embeddings:
            self.lm_head = nn.Linear(args.d_model, args.vocab_size, bias=False)

    def __call__(self, tokens: mx.array, cache: list[list[Any]] | None = None) -> mx.array:
        """tokens (b, L) int -> logits (b, L, vocab). With a cache (make_cache()), states carry over between calls:
        a call with L == 1 is a decode step, longer calls are (chunked) prefills."""
        x = self.backbone.embeddings(tokens)
        for i, layer in enumerate(self.backbone.layers):
            x = layer(x, cache[i] if cache is not None else None)
        x = self.backbone.norm_f(x)
        if self.args.tie_embeddings:
            return self.backbone.embeddings.as_linear(x)
        return self.lm_head(x)  # type: ignore[no-any-return]

    def make_cache(self) -> list[list[Any]]:
        """Per layer [conv_state (b, K-1, d_inner), ssm_state (b, d_inner, N) float32], filled by the first call."""
        return [[None, None] for _ in self.backbone.layers]

    def cast(self, dtype: mx.Dtype) -> Model:
        """Cast weights to dtype, keeping A_log and D in float32 (the scan runs in float32)."""
        def conv(path: str, v: mx.array) -> mx.array:
            keep = path.endswith("A_log") or path.endswith(".D")
            return v if keep or not mx.issubdtype(v.dtype, mx.floating) else v.astype(dtype)

        from mlx.utils import tree_flatten
        flat = cast(list[tuple[str, mx.array]], tree_flatten(self.parameters()))
        self.load_weights([(k, conv(k, v)) for k, v in flat])
        return self


# -- checkpoints ------------------------------------------------------------------------------------------------
def sanitize(weights: dict[str, mx.array], args: ModelArgs) -> dict[str, mx.array]:
    """Checkpoint names/layouts -> ours (the -hf names; conv weight (dim, 1, K))."""
    out = {}
    for k, v in weights.items():
        k = k.replace("backbone.embedding.", "backbone.embeddings.")
        if k.startswith("lm_head.") and args.tie_embeddings:
            continue
        if k.endswith("conv1d.weight") and v.ndim == 3 and v.shape[1] != 1:
            v = v.swapaxes(1, 2)  # MLX layout (dim, K, 1) from mlx-community conversions
        out[k] = v
    return out


def load(path: str | Path, dtype: mx.Dtype | None = None) -> tuple[Model, ModelArgs]:
    """A Mamba-1 checkpoint from a local directory with config.json and *.safetensors."""
    root = Path(path)
    cfg_path = root / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{cfg_path} not found: pass a directory holding a Mamba config.json and safetensors")
    args = ModelArgs.from_config(json.loads(cfg_path.read_text()))
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {root} (PyTorch .bin checkpoints: convert them first)")
    weights: dict[str, mx.array] = {}
    for f in files:
        weights.update(mx.load(str(f)))  # type: ignore[arg-type]
    model = Model(args)
    model.load_weights(list(sanitize(weights, args).items()))
    if dtype is not None:
        model.cast(dtype)
    mx.eval(model.parameters())
    return model, args


def save_checkpoint(model: Model, path: str | Path, naming: str = "hf") -> Path:
    """Write config.json + model.safetensors in the "hf" or "original" naming (tests and benchmarks use this)."""
    from mlx.utils import tree_flatten

    a = model.args
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    weights = dict(cast(list[tuple[str, mx.array]], tree_flatten(model.parameters())))
    if naming == "original":
        cfg: dict[str, Any] = {"d_model": a.d_model, "n_layer": a.n_layer, "vocab_size": a.vocab_size,
                               "ssm_cfg": {"d_state": a.d_state, "d_conv": a.d_conv, "expand": a.expand,
                                           "dt_rank": a.dt_rank, "conv_bias": a.conv_bias, "bias": a.bias},
                               "rms_norm": True, "residual_in_fp32": True, "fused_add_norm": True,
                               "pad_vocab_size_multiple": a.pad_vocab_size_multiple, "tie_embeddings": a.tie_embeddings}
        weights = {k.replace("backbone.embeddings.", "backbone.embedding."): v for k, v in weights.items()}
    else:
        cfg = {"model_type": "mamba", "architectures": ["MambaForCausalLM"], "vocab_size": a.vocab_size,
               "hidden_size": a.d_model, "num_hidden_layers": a.n_layer, "state_size": a.d_state,
               "conv_kernel": a.d_conv, "expand": a.expand, "intermediate_size": a.d_inner,
               "time_step_rank": a.dt_rank, "use_conv_bias": a.conv_bias, "use_bias": a.bias,
               "layer_norm_epsilon": a.rms_norm_eps, "tie_word_embeddings": a.tie_embeddings}
    if a.tie_embeddings:
        weights["lm_head.weight"] = model.backbone.embeddings.weight  # both published namings ship it
    (root / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    mx.save_safetensors(str(root / "model.safetensors"), weights)
    return root


def random_model(args: ModelArgs, seed: int = 0, dtype: mx.Dtype = F32) -> Model:
    """A model with random weights at sensible scales (benchmarks, tests)."""
    from mlx.utils import tree_flatten, tree_unflatten

    mx.random.seed(seed)
    model = Model(args)
    params = []
    for k, v in cast(list[tuple[str, mx.array]], tree_flatten(model.parameters())):
        if k.endswith("A_log") or k.endswith(".D") or k.endswith("norm.weight") or k.endswith("norm_f.weight"):
            params.append((k, v))
        elif k.endswith("dt_proj.bias"):
            params.append((k, mx.random.uniform(-4.0, -2.0, v.shape)))  # softplus -> dt ~ 0.02..0.13
        elif k.endswith("conv1d.weight"):
            params.append((k, mx.random.normal(v.shape) * 0.5))
        else:
            fan_in = v.shape[-1] if v.ndim > 1 else 1
            params.append((k, mx.random.normal(v.shape) * (0.02 if "embeddings" in k else fan_in ** -0.5)))
    model.update(tree_unflatten(params))
    if dtype != F32:
        model.cast(dtype)
    mx.eval(model.parameters())
    return model


__all__ = ["CONFIGS", "Model", "ModelArgs", "config", "load", "random_model", "save_checkpoint"]
