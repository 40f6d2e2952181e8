"""The library functions' arguments, checked before anything runs: one TypeError or ValueError that names the
argument and what to pass, rather than an error from inside MLX, a crash (MLX 0.32's attention divides by the number
of K / V heads), or a silently wrong answer (the kernels trust the shapes and dtypes they are given, and MLX's ops
broadcast a batch of 1).

The checks of shapes and dtypes are kept per shapes and dtypes (lru_cache; a failing check is not kept): a decode
loop passes the same ones every step, so a call pays a cache lookup and no device work (0.2 us of `decode()`'s host
work on a CPU, whose CUDA path keeps them with its route; about 1 us where they are a lookup of their own).
"""

from __future__ import annotations

import operator
from functools import lru_cache
from typing import Any, NamedTuple

import mlx.core as mx

Array = mx.array
FLOATS = (mx.float16, mx.bfloat16, mx.float32)
FLOAT_NAMES = "float16, bfloat16 or float32"
Shape = tuple[int, ...]


class Spec(NamedTuple):
    """One array argument: its name, its shape, and its layout as names of its axes ("B Hq L D"). Axes of one name
    are one size across the arguments; a number is an axis of that size. `note` follows a wrong rank or size."""

    name: str
    shape: Shape
    layout: str
    note: str = ""

    def described(self) -> str:
        return f"{self.name} ({', '.join(self.layout.split())}) = {self.shape}"


def describe(value: Any) -> str:
    """A value as a message shows it: arrays by type and shape, never their contents."""
    if value is None:
        return "None"
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    if hasattr(value, "shape"):
        return f"a {name} of shape {tuple(value.shape)}"
    text = repr(value)
    return f"{name} {text}" if len(text) <= 40 else name


def require_arrays(fn: str, named: dict[str, Any]) -> None:
    """TypeError for the first value that is not an mx.array."""
    for name, value in named.items():
        if not isinstance(value, mx.array):
            hint = f"; pass mx.array({name})" if hasattr(value, "shape") or isinstance(value, list | tuple) else ""
            raise TypeError(f"{fn}: {name} must be an mx.array; got {describe(value)}{hint}")


def flag(fn: str, name: str, value: Any, hint: str = "") -> bool:
    """True or False as passed; 0 and 1 read as False and True; TypeError for anything else (an array, a string:
    truthy, so they would otherwise switch the option on)."""
    if value is True or value is False:
        return value
    if type(value) is int and value in (0, 1):
        return bool(value)
    raise TypeError(f"{fn}: {name} must be True or False; got {describe(value)}{hint}")


def optional_flag(fn: str, name: str, value: Any) -> bool | None:
    return None if value is None else flag(fn, name, value, " (or None: the default)")


def require_config(fn: str, config: Any, types: tuple[type, ...], hint: str) -> None:
    if config is not None and not isinstance(config, types):
        names = ", ".join(t.__name__ for t in types)
        raise TypeError(f"{fn}: config must be None or one of {names}; got {describe(config)} ({hint})")


def bind(fn: str, *specs: Spec) -> dict[str, int]:
    """Each axis name's size, where every spec has its layout's rank and the named axes agree; ValueError naming the
    first argument that does not."""
    first: dict[str, tuple[int, Spec]] = {}
    for spec in specs:
        axes = spec.layout.split()
        if len(spec.shape) != len(axes):
            raise ValueError(f"{fn}: {spec.name} must be {len(axes)}-d, ({', '.join(axes)}); got shape "
                             f"{spec.shape}{spec.note}")
        for axis, size in zip(axes, spec.shape, strict=True):
            if axis.isdigit():
                if size != int(axis):
                    raise ValueError(f"{fn}: {spec.name} must be ({', '.join(axes)}); got shape {spec.shape}"
                                     f"{spec.note}")
                continue
            size0, spec0 = first.setdefault(axis, (size, spec))
            if size0 != size:
                raise ValueError(f"{fn}: {spec.name}'s {axis} is {size} where {spec0.name}'s is {size0}: "
                                 f"{spec0.described()}, {spec.described()}")
    return {axis: size for axis, (size, _) in first.items()}


def require_floats(fn: str, names: tuple[str, ...], dtypes: tuple[Any, ...], same: bool) -> None:
    """TypeError for a dtype other than float16, bfloat16 or float32, or, with `same`, for dtypes that differ (the
    kernels read every array as the first one's dtype)."""
    for name, dtype in zip(names, dtypes, strict=True):
        if dtype not in FLOATS:
            raise TypeError(f"{fn}: {name} has dtype {dtype_name(dtype)}; pass {FLOAT_NAMES} "
                            f"({name}.astype(mx.float16))")
    if same and any(d != dtypes[0] for d in dtypes):
        got = ", ".join(f"{n} {dtype_name(d)}" for n, d in zip(names, dtypes, strict=True))
        raise TypeError(f"{fn}: {', '.join(names[:-1])} and {names[-1]} must share one dtype; got {got} "
                        f"(cast them: {names[1]}.astype({names[0]}.dtype))")


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("mlx.core.")


def _grouped_heads(fn: str, sizes: dict[str, int], q: str, kv: str) -> None:
    if sizes["Hkv"] == 0 or sizes["Hq"] % sizes["Hkv"]:
        raise ValueError(f"{fn}: {q}'s Hq = {sizes['Hq']} heads must be a multiple of {kv}'s Hkv = {sizes['Hkv']} "
                         f"(at least 1): query head h reads K / V head h // (Hq // Hkv)")
    if sizes["D"] == 0:
        raise ValueError(f"{fn}: the head dim D is 0; pass at least 1")


def empty_output(q: Any, k: Any, v: Any) -> Any:
    """The attention of checked inputs whose output has no elements (B, Hq or L of 0): q's shape and dtype."""
    return mx.zeros(q.shape, q.dtype)


@lru_cache(maxsize=1024)
def attention_shapes(q: Shape, k: Shape, v: Shape, dtypes: tuple[Any, ...], causal: bool) -> bool:
    """ValueError / TypeError where `attention` cannot take these shapes and dtypes; else whether the output is
    empty."""
    fn = "attention"
    sizes = bind(fn, Spec("q", q, "B Hq L D"), Spec("k", k, "B Hkv S D"), Spec("v", v, "B Hkv S D"))
    require_floats(fn, ("q", "k", "v"), dtypes, same=True)
    _grouped_heads(fn, sizes, "q", "k and v")
    length, keys = sizes["L"], sizes["S"]
    if length and not keys:
        raise ValueError(f"{fn}: k and v hold no keys (S = 0) for L = {length} queries; pass at least one key")
    if causal and length > keys:
        raise ValueError(f"{fn}: causal=True with L = {length} queries and S = {keys} keys: the mask is aligned "
                         f"lower right, so the first L - S query rows would see no key; pass S >= L")
    return 0 in q


@lru_cache(maxsize=1024)
def decode_shapes(q: Shape, k: Shape, v: Shape, dtypes: tuple[Any, ...]) -> bool:
    """`attention_shapes` for `decode`: one query position against caches of one shape."""
    fn = "decode"
    sizes = bind(fn, Spec("q", q, "B Hq 1 D", " (one query position a step: attention() takes several)"),
                 Spec("k_cache", k, "B Hkv capacity D"),
                 Spec("v_cache", v, "B Hkv capacity D"))
    require_floats(fn, ("q", "k_cache", "v_cache"), dtypes, same=True)
    _grouped_heads(fn, sizes, "q", "k_cache and v_cache")
    return 0 in q


def decode_length(length: Any, capacity: int) -> int:
    """`length` as an int in 1..capacity; TypeError / ValueError otherwise (a longer one would read past the cache,
    a negative one would count from its end)."""
    if type(length) is not int:
        if isinstance(length, bool):
            raise TypeError(f"decode: length must be an int; got {describe(length)}")
        try:
            length = operator.index(length)  # numpy integers; an integer mx.array of one element is read back
        except TypeError:
            raise TypeError(f"decode: length must be an int, the number of valid cache positions; got "
                            f"{describe(length)}") from None
    if not 0 < length <= capacity:
        if capacity == 0:
            raise ValueError("decode: the caches hold no position (k_cache.shape[2] = 0); pass caches of at least "
                             "one, and length 1 or more")
        raise ValueError(f"decode: length must lie in 1..{capacity} (k_cache.shape[2], the caches' capacity): the "
                         f"step reads positions [0, length); got {length}")
    return length


SCAN_NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0")
SCAN_LAYOUTS = ("batch dim L", "batch dim L", "dim N", "batch N L", "batch N L", "dim", "batch dim L", "dim",
                "batch dim N")


@lru_cache(maxsize=256)
def scan_shapes(shapes: tuple[Shape | None, ...], dtypes: tuple[Any, ...]) -> bool:
    """ValueError / TypeError where `selective_scan` cannot take these shapes (SCAN_NAMES' order, h0 None where not
    passed) and dtypes; else whether an axis is empty."""
    present = [(n, lay, s) for n, lay, s in zip(SCAN_NAMES, SCAN_LAYOUTS, shapes, strict=True) if s is not None]
    bind("selective_scan", *(Spec(n, s, lay) for n, lay, s in present))
    require_floats("selective_scan", tuple(n for n, _, _ in present), dtypes, same=False)
    return any(0 in s for _, _, s in present)


UPDATE_NAMES = ("x", "z", "conv_state", "conv_weight", "conv_bias", "x_proj_weight", "dt_proj_weight", "dt_bias",
                "A", "D", "ssm_state")
UPDATE_LAYOUTS = ("batch dim", "batch dim", "batch K-1 dim", "dim K", "dim", "P dim", "dim R", "dim", "dim N",
                  "dim", "batch dim N")
UPDATE_NOTES = {"x": " (one token: x[:, 0] of a (batch, 1, dim) array)", "z": " (one token: z[:, 0])",
                "conv_weight": " (a (dim, 1, K) weight: conv_weight.reshape(dim, K))"}


@lru_cache(maxsize=256)
def state_update_shapes(shapes: tuple[Shape | None, ...], dtypes: tuple[Any, ...]) -> bool:
    """`scan_shapes` for `selective_state_update` (UPDATE_NAMES' order, conv_bias None where not passed)."""
    fn = "selective_state_update"
    present = [(n, lay, s) for n, lay, s in zip(UPDATE_NAMES, UPDATE_LAYOUTS, shapes, strict=True) if s is not None]
    sizes = bind(fn, *(Spec(n, s, lay, UPDATE_NOTES.get(n, "")) for n, lay, s in present))
    require_floats(fn, tuple(n for n, _, _ in present), dtypes, same=False)
    taps, r, n = sizes["K"], sizes["R"], sizes["N"]
    if taps == 0 or sizes["K-1"] != taps - 1:
        raise ValueError(f"{fn}: conv_state must hold the previous K - 1 = {taps - 1} inputs, K = "
                         f"conv_weight.shape[1] = {taps} (at least 1): (batch, K-1, dim); got {shapes[2]}")
    if sizes["P"] != r + 2 * n:
        raise ValueError(f"{fn}: x_proj_weight must have R + 2N = {r + 2 * n} rows (R = dt_proj_weight.shape[1] = "
                         f"{r}, N = A.shape[1] = {n}): (R + 2N, dim); got {shapes[5]}")
    return any(0 in s for _, _, s in present)
