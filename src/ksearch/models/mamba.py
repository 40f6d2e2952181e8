"""Mamba-1 language model in MLX on ksearch's selective-scan kernels (prefill: conv kernel + chunked parallel scan;
decode: one fused kernel per layer for conv update, x_proj, dt_proj, SSM step and gate).

Loads Hugging Face Mamba checkpoints from a local directory (config.json + *.safetensors), in either naming:
the original `state-spaces/mamba-*` one (d_model, n_layer, `backbone.embedding`) or the transformers `-hf` one
(hidden_size, num_hidden_layers, `backbone.embeddings`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import mlx.nn as nn

from ksearch.config import env_switch
from ksearch.kernels.selective_scan import MixerParams, derive_params, mixer_decode, mixer_prefill

F32 = mx.float32


def fused_from_env() -> bool:
    """KSEARCH_MAMBA_FUSED, read strictly (a value that is not on or off is a ConfigError) and handed to the kernels
    as `fused=`: off by default, 1 opts into the fused layout (ksearch.kernels.selective_scan)."""
    return env_switch("KSEARCH_MAMBA_FUSED", False)


def check_dtype(dtype: Any) -> mx.Dtype:
    """A floating mlx dtype for the weights; TypeError, one line, for anything else (a string, an integer type)."""
    if not isinstance(dtype, mx.Dtype) or not mx.issubdtype(dtype, mx.floating):
        raise TypeError(f"dtype must be a floating mlx dtype (mx.float16, mx.bfloat16 or mx.float32), got {dtype!r}")
    return dtype


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
        sizes = ("vocab_size", "d_model", "n_layer", "d_state", "d_conv", "expand")
        for name in sizes:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ModelArgs.{name} must be a whole number of at least 1, got {value!r}")
        if not isinstance(self.dt_rank, int) or self.dt_rank < 0:
            raise ValueError(f"ModelArgs.dt_rank must be a whole number (0: ceil(d_model / 16)), got {self.dt_rank!r}")
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
        d_model = _required(cfg, "d_model", "hidden_size")
        n_layer = _required(cfg, "n_layer", "num_hidden_layers")
        expand = cfg.get("expand", ssm.get("expand", 2))
        if "intermediate_size" in cfg:
            expand = cfg["intermediate_size"] // d_model
        dt_rank = cfg.get("time_step_rank", ssm.get("dt_rank", "auto"))
        return cls(
            vocab_size=_required(cfg, "vocab_size"),
            d_model=d_model,
            n_layer=n_layer,
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


def _required(cfg: dict[str, Any], *names: str) -> Any:
    """The first of `names` that cfg sets; ValueError, one line, where it sets none."""
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    lacks = " nor ".join(names)
    raise ValueError(f"config.json has {'neither ' if len(names) > 1 else 'no '}{lacks}: is this a Mamba checkpoint?")


# Sizes of the published checkpoints (d_model, n_layer); vocab 50280 after padding.
CONFIGS = {"130m": (768, 24), "370m": (1024, 48), "790m": (1536, 48), "1.4b": (2048, 48), "2.8b": (2560, 64)}


def config(name: str) -> ModelArgs:
    """The ModelArgs of a published size (CONFIGS); ValueError naming the sizes for any other name."""
    if name not in CONFIGS:
        raise ValueError(f"no Mamba config {name!r}: one of {', '.join(CONFIGS)}")
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

    def __call__(self, x: mx.array, cache: list[Any] | None, fused: bool | None = None) -> mx.array:
        """x (b, L, d_model) -> the gated scan output y (b, L, d_inner); out_proj is applied by the block.
        `fused`: the kernels' layout (None: they read KSEARCH_MAMBA_FUSED themselves)."""
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
            y, conv_state, ssm_state = mixer_decode(xz, p, conv_state, ssm_state,  # type: ignore[arg-type]
                                                    fused=fused)
        else:
            y, conv_state, ssm_state = mixer_prefill(xz, p, conv_state, ssm_state, fused=fused)
        if cache is not None:
            cache[0], cache[1] = conv_state, ssm_state
        return y


class ResidualBlock(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.mixer = MambaMixer(args)
        self.norm = nn.RMSNorm(args.d_model, eps=args.rms_norm_eps)

    def __call__(self, x: mx.array, cache: list[Any] | None, fused: bool | None = None) -> mx.array:
        y = self.mixer(self.norm(x), cache, fused)
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
        a call with L == 1 is a decode step, longer calls are (chunked) prefills. Shapes, dtype and the cache are
        checked (ValueError / TypeError, one line); token ids are not range-checked here, which would cost a device
        sync per call (generate checks its prompt's)."""
        self._check_input(tokens, cache)
        fused = fused_from_env()
        x = self.backbone.embeddings(tokens)
        for i, layer in enumerate(self.backbone.layers):
            x = layer(x, cache[i] if cache is not None else None, fused)
        x = self.backbone.norm_f(x)
        if self.args.tie_embeddings:
            return self.backbone.embeddings.as_linear(x)
        return self.lm_head(x)  # type: ignore[no-any-return]

    def _check_input(self, tokens: mx.array, cache: list[list[Any]] | None) -> None:
        """Shapes and dtypes only (no device work): the mistakes that otherwise surface deep in a conv or concat."""
        shape = tuple(tokens.shape)
        if tokens.ndim != 2:
            hint = ": add a batch axis (tokens[None])" if tokens.ndim == 1 else ""
            raise ValueError(f"tokens must be (batch, L) token ids, got shape {shape}{hint}")
        if not mx.issubdtype(tokens.dtype, mx.integer):
            raise TypeError(f"tokens must be integer token ids, got {tokens.dtype} (use .astype(mx.int32))")
        if shape[1] == 0:
            raise ValueError(f"tokens has no positions (shape {shape}): pass at least one token")
        if cache is None:
            return
        if len(cache) != len(self.backbone.layers):
            raise ValueError(f"the cache has {len(cache)} layers, the model {len(self.backbone.layers)}: "
                             "make it with this model's make_cache()")
        held = cache[0][0]
        if held is not None and held.shape[0] != shape[0]:
            raise ValueError(f"the cache holds batch {held.shape[0]}, tokens batch {shape[0]}: start a new cache "
                             "(make_cache()) for another batch")

    def make_cache(self) -> list[list[Any]]:
        """Per layer [conv_state (b, K-1, d_inner), ssm_state (b, d_inner, N) float32], filled by the first call."""
        return [[None, None] for _ in self.backbone.layers]

    def cast(self, dtype: mx.Dtype) -> Model:
        """Cast weights to dtype, keeping A_log and D in float32 (the scan runs in float32)."""
        check_dtype(dtype)
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


def _read_config(root: Path) -> dict[str, Any]:
    """config.json of a checkpoint directory, refused in one line where it is no Mamba-1 checkpoint's."""
    if not root.exists():
        hub_id = str(root) if re.fullmatch(r"[\w.-]+/[\w.-]+", str(root)) else "state-spaces/mamba-130m-hf"
        raise FileNotFoundError(f"{root} does not exist: load takes a local directory with config.json and "
                                f"*.safetensors (a Hugging Face id needs downloading first: "
                                f"`huggingface-cli download {hub_id} --local-dir DIR`)")
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is a file: pass the directory that holds config.json and *.safetensors")
    cfg_path = root / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{cfg_path} not found: pass a directory holding a Mamba config.json and safetensors")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
        raise ValueError(f"{cfg_path} is not JSON ({exc}): is this a Hugging Face checkpoint?") from exc
    if not isinstance(cfg, dict):
        raise ValueError(f"{cfg_path} holds a JSON {type(cfg).__name__}, not an object: is this a checkpoint's config?")
    kind = cfg.get("model_type", "mamba")  # the original state-spaces configs name no model_type
    if kind != "mamba":
        raise ValueError(f"{cfg_path} is a {kind!r} checkpoint: ksearch.models.mamba loads Mamba-1 (model_type "
                         "'mamba') only; mlx-lm runs other architectures (mlx_lm.load)")
    return cfg


def _check_weights(model: Model, weights: dict[str, mx.array], root: Path) -> None:
    """The checkpoint's weights against the model its config.json describes, as one line (mlx's own message lists
    every name on a line of its own)."""
    from mlx.utils import tree_flatten

    want = {k: tuple(v.shape) for k, v in cast(list[tuple[str, mx.array]], tree_flatten(model.parameters()))}
    missing = sorted(want.keys() - weights.keys())
    extra = sorted(weights.keys() - want.keys())
    reshaped = [f"{k} {tuple(weights[k].shape)}, not {want[k]}" for k in sorted(want.keys() & weights.keys())
                if tuple(weights[k].shape) != want[k]]
    kinds = (("missing", missing), ("unexpected", extra), ("of another shape than config.json gives", reshaped))
    found = [f"{len(names)} {what} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
             for what, names in kinds if names]
    if found:
        raise ValueError(f"the weights in {root} do not fit the Mamba-1 model its config.json describes: "
                         f"{'; '.join(found)}")


def load(path: str | Path, dtype: mx.Dtype | None = None) -> tuple[Model, ModelArgs]:
    """A Mamba-1 checkpoint from a local directory with config.json and *.safetensors. A path that is no such
    directory, another architecture, or weights that do not fit the config raise one line (FileNotFoundError,
    NotADirectoryError, ValueError; TypeError for a dtype that is not a floating mlx dtype)."""
    if dtype is not None:
        check_dtype(dtype)
    root = Path(path)
    args = ModelArgs.from_config(_read_config(root))
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {root} (PyTorch .bin checkpoints: convert them first)")
    weights: dict[str, mx.array] = {}
    for f in files:
        weights.update(mx.load(str(f)))  # type: ignore[arg-type]
    model = Model(args)
    weights = sanitize(weights, args)
    _check_weights(model, weights, root)
    model.load_weights(list(weights.items()))
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
