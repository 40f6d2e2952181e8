"""Make mlx-lm's Mamba (mlx_lm.models.mamba) use ksearch's selective-scan kernels.

    from ksearch.integrations import mlx_lm as ks_mlx_lm
    ks_mlx_lm.patch()      # every MambaBlock, existing or new, now runs our conv / scan / fused decode step
    ks_mlx_lm.unpatch()    # back to mlx-lm's per-token loop

The patched block keeps mlx-lm's cache layout (ArraysCache: conv state (B, K-1, D_inner), SSM state (B, D_inner, N));
the SSM state is kept in float32. Falcon-Mamba blocks (use_bcdt_rms) are left to mlx-lm's own code.
"""

from __future__ import annotations

from typing import Any, cast

import mlx.core as mx

from ksearch.config import env_switch
from ksearch.errors import IntegrationError
from ksearch.kernels.selective_scan import derive_params, mixer_decode, mixer_prefill

_ORIGINAL: dict[str, Any] = {}


def _params(block: Any) -> dict[str, Any]:
    cached = getattr(block, "_ksearch_params", None)
    conv = block.conv1d
    p = derive_params(block.A_log, block.D, conv.weight, conv.get("bias"), block.x_proj.weight,
                      block.dt_proj.weight, block.dt_proj.bias, block.in_proj.weight.dtype, cached)
    block._ksearch_params = p  # a plain attribute (not an array): mlx-lm never sees it as a parameter
    return p.values


def _process_sequence(self: Any, x: mx.array, conv_cache: mx.array | None,
                      state_cache: mx.array | None) -> tuple[mx.array, tuple[mx.array, mx.array]]:
    if self.use_bcdt_rms:
        return _ORIGINAL["_process_sequence"](self, x, conv_cache, state_cache)  # type: ignore[no-any-return]
    p = _params(self)
    xz = self.in_proj(x)
    # Read strictly here (a typo is a ConfigError), not by the kernels, which take any other value as on.
    fused = env_switch("KSEARCH_MAMBA_FUSED", False)
    if x.shape[1] == 1 and conv_cache is not None and state_cache is not None:
        y, conv_cache, state = mixer_decode(xz, p, conv_cache, state_cache, fused=fused)
    else:
        y, conv_cache, state = mixer_prefill(xz, p, conv_cache, state_cache, fused=fused)
    return self.out_proj(y), (conv_cache, state)


#: The oldest mlx-lm whose MambaBlock has `_process_sequence`, the method `patch` replaces (pyproject's `compare`;
#: 0.21.1 and older run the sequence in `__call__`).
MIN_MLX_LM = "0.21.2"


def mamba_module() -> Any:
    """mlx-lm's Mamba module; IntegrationError, one line, where mlx-lm is missing or older than MIN_MLX_LM."""
    try:
        from mlx_lm.models import mamba
    except ImportError as exc:
        raise IntegrationError(f"mlx-lm is not installed: pip install 'mlx-lm>={MIN_MLX_LM}'") from exc
    if not hasattr(mamba.MambaBlock, "_process_sequence"):
        from importlib.metadata import PackageNotFoundError, version

        try:
            have = f"mlx-lm {version('mlx-lm')}"
        except PackageNotFoundError:
            have = "this mlx-lm"
        raise IntegrationError(f"{have} has no MambaBlock._process_sequence, the method the patch replaces (mlx-lm "
                               f"{MIN_MLX_LM} and later have it): pip install -U 'mlx-lm>={MIN_MLX_LM}'")
    return mamba


def patch() -> None:
    """Route mlx-lm's Mamba blocks through ksearch's kernels (idempotent). IntegrationError where mlx-lm is missing
    or too old, ConfigError for a KSEARCH_MAMBA_FUSED that is not on or off: both one line, nothing patched."""
    mamba = mamba_module()
    env_switch("KSEARCH_MAMBA_FUSED", False)
    if "_process_sequence" not in _ORIGINAL:
        _ORIGINAL["_process_sequence"] = mamba.MambaBlock._process_sequence
    mamba.MambaBlock._process_sequence = _process_sequence  # type: ignore[method-assign]


def unpatch() -> None:
    """Put mlx-lm's own MambaBlock._process_sequence back; nothing to do (and mlx-lm not imported) if unpatched."""
    if "_process_sequence" not in _ORIGINAL:
        return
    from mlx_lm.models import mamba

    mamba.MambaBlock._process_sequence = _ORIGINAL.pop("_process_sequence")  # type: ignore[method-assign]


def is_patched() -> bool:
    return "_process_sequence" in _ORIGINAL


def mlx_lm_model(model: Any) -> Any:
    """An mlx-lm Mamba Model with the same weights as a ksearch.models.mamba.Model (comparisons, benchmarks)."""
    from mlx.utils import tree_flatten
    from mlx_lm.models import mamba

    a = model.args
    args = mamba.ModelArgs(
        model_type="mamba", vocab_size=a.vocab_size, hidden_size=a.d_model, intermediate_size=a.d_inner,
        state_size=a.d_state, num_hidden_layers=a.n_layer, conv_kernel=a.d_conv, use_bias=a.bias,
        use_conv_bias=a.conv_bias, time_step_rank=a.dt_rank, tie_word_embeddings=a.tie_embeddings)
    theirs = mamba.Model(args)
    weights = []
    for k, v in cast(list[tuple[str, mx.array]], tree_flatten(model.parameters())):
        if k.endswith("conv1d.weight"):
            v = v.swapaxes(1, 2)  # (D, 1, K) -> MLX's (D, K, 1)
        weights.append((k, v))
    theirs.load_weights(weights)
    for layer in theirs.layers:  # mlx-lm's RMSNorm eps is its default (1e-5); keep ours identical
        layer.norm.eps = a.rms_norm_eps
    theirs.backbone.norm_f.eps = a.rms_norm_eps
    mx.eval(theirs.parameters())
    return theirs
