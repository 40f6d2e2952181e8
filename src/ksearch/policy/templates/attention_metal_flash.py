"""The `attention.metal.flash_simdgroup` template family: FlashAttention-2 prefill on Apple's `simdgroup_matrix`
(ksearch.kernels.attention.metal_simdgroup, the same text the library runs when Metal kernels are opted in), with the
row kernel of ksearch.kernels.attention.metal_rows for bfloat16 (and, with `float32` = "rows", float32).

The parameters are the key rows staged per block at each head dim (BK, float16's): threadgroup memory holds Q (32 x
D), K and V (BK x D each), S (32 x BK, fp32) and P (32 x BK), and must stay within 32 KB, so D=128 takes 16 or 8, D=64
32, 16 or 8; float32 takes the same blocks, shortened to what fits at four bytes an element (`float32_keys`).
A larger block halves the barriers per key and the softmax passes; a smaller one may let two threadgroups share a
core. `crescale`: rows keep their maximum while it grows by at most 2^8, and a simdgroup whose rows all kept skips
the diagonal product that rescales O (the library's default; the Hopper kernels' `_cr`). `softmax`: "threadgroup"
(the library's kernel: S and P through threadgroup memory, no fragment layout relied on) or "registers"
(ksearch.kernels.attention.metal_fragments: each lane's own fragment elements in the layout MLX's steel kernels rely
on, P kept in registers as the Hopper kernels keep it; Q, K and V alone in threadgroup memory, so blocks of 32 keys at
D=128 and 64 at D=64 fit). Not yet measured on Apple hardware: every rendering passes clang with the project's MSL
shim (tests/test_attention_templates.py), and renderings of both kinds run correctly on the Metal emulation (backend
mlx-metal-emu, tests/test_metalemu_acceptance_eval.py, tests/test_metal_family_constants.py).
"""

from __future__ import annotations

from typing import Any

from ksearch.kernels.attention import metal_fragments, metal_rows, metal_simdgroup
from ksearch.policy.templates.base import METAL_CONSTANT_KERNELS, TemplateFamily

# Threadgroup memory a Metal threadgroup may take (Apple GPUs: 32 KB).
METAL_TG_BYTES = metal_simdgroup.TG_BYTES


def tg_bytes(d: int, bk: int, softmax: str = "threadgroup", itemsize: int = 2) -> int:
    """Threadgroup memory of the simdgroup kernel (its SOURCE's arrays: Q, K, V and P in the inputs' dtype, S and the
    8x8 scratch tiles as float, two float rows of softmax state); with the softmax in registers Q, K and V alone."""
    if softmax == "registers":
        return metal_fragments.tg_bytes(d, bk, itemsize)
    return metal_simdgroup.tg_bytes(d, bk, itemsize)


def float32_keys(d: int, bk: int, softmax: str = "threadgroup") -> int:
    """Float32's key rows a block: the float16 choice `bk`, at most the longest block that fits at four bytes an
    element (the library's own, metal_simdgroup.block_keys / metal_fragments.block_keys)."""
    kernel = metal_fragments if softmax == "registers" else metal_simdgroup
    return min(bk, kernel.block_keys(d, 4))


def render_flash_simdgroup(p: dict[str, Any]) -> str:
    # Each branch names its dtype (T = f16 or f32, inputs cast to it and o made in it: no-ops there) rather than
    # q.dtype: the linter sizes threadgroup memory from the template's dtype and takes an unknown one as float32, which
    # put D=64, BK=32 at 35 KB and failed the default rendering on every evaluation; the deep check compiles the
    # inputs and the output at those dtypes too, each launch at its own.
    bq, nt = metal_simdgroup.BQ, metal_simdgroup.NT
    rnt, rbn = metal_rows.PREFILL_NT, metal_rows.PREFILL_BN
    constants = bool(p.get("constants"))
    softmax = p.get("softmax", "threadgroup")
    registers = softmax == "registers"
    mma_name = "attention_fragments" if registers else "attention_simdgroup"
    mma_source = metal_fragments.SOURCE if registers else metal_simdgroup.SOURCE
    softmax_line = (" on each lane's own fragment elements, P kept in registers" if registers
                    else " through threadgroup memory, rows rescaled by a diagonal product")
    keys = {("f16", d): p[f"bk{d}"] for d in (64, 128)}
    dtypes = ("f16", "f32") if p.get("float32", "mma") == "mma" else ("f16",)
    if "f32" in dtypes:
        keys.update({("f32", d): float32_keys(d, p[f"bk{d}"], softmax) for d in (64, 128)})

    def call(t: str, d: int) -> str:
        bk = keys[(t, d)]
        fn = f'_kernel("mma", {t}, {d}, bool(causal), {bk})' if constants else "_mma"
        template = "" if constants else f'''
                        template=[("T", {t}), ("D", {d}), ("BK", {bk}), ("CAUSAL", bool(causal)),
                                  ("CRESCALE", {bool(p["crescale"])})],'''
        return f'''        if d == {d}:
            return {fn}(inputs=[q.astype({t}), k.astype({t}), v.astype({t})],{template}
                        grid=((length + {bq - 1}) // {bq} * {nt}, b * hq, 1), threadgroup=({nt}, 1, 1),
                        output_shapes=[q.shape], output_dtypes=[{t}])[0]'''

    fits = "hq % k.shape[1] == 0 and (not causal or length <= k.shape[2])"
    calls = "\n".join(f"    if q.dtype == {t} and {fits}:\n" + "\n".join(call(t, d) for d in (64, 128))
                      for t in dtypes)
    rows_fn = '_kernel("rows", q.dtype, d, bool(causal))' if constants else "_rows"
    rows_t = " " if constants else (f' template=[("T", q.dtype), ("D", d), ("NT", {rnt}), ("BN", {rbn}), '
                                   '("CAUSAL", bool(causal))],\n                 ')
    if constants:  # each kernel made at a (kind, dtype, D, mask)'s first call, its template arguments in its header
        kernels = METAL_CONSTANT_KERNELS + f'''

def _kernel(kind, dtype, d, causal, bk=0):
    # The kernel of one (kind, dtype, D, mask, key rows a block), made at its first call.
    key = (kind, dtype, d, causal, bk)
    kern = _MADE.get(key)
    if kern is None:
        if kind == "mma":
            kern = _make("{mma_name}", MMA_SOURCE, ["q", "k", "v"], ["o"],
                         (("T", dtype), ("D", d), ("BK", bk), ("CAUSAL", causal), ("CRESCALE", {bool(p["crescale"])})))
        else:
            kern = _make("attention_rows", ROW_SOURCE, ["q", "k", "v"], ["o"],
                         (("T", dtype), ("D", d), ("NT", {rnt}), ("BN", {rbn}), ("CAUSAL", causal)))
        _MADE[key] = kern
    return kern'''
    else:
        kernels = f'''_mma = mx.fast.metal_kernel(name="{mma_name}", input_names=["q", "k", "v"], output_names=["o"],
                            source=MMA_SOURCE)
_rows = mx.fast.metal_kernel(name="attention_rows", input_names=["q", "k", "v"], output_names=["o"], source=ROW_SOURCE)'''
    f32_line = (f"float32 ({keys[('f32', 128)]} / {keys[('f32', 64)]} rows) on the matrix units too"
                if "f32" in dtypes else "float32 on the row kernel")
    return f'''# attention.metal.flash_simdgroup {p}
# FlashAttention-2 on simdgroup_matrix (8x8 matrix units): 4 simdgroups x 8 query rows a threadgroup, K / V blocks of
# {p["bk128"]} (D=128) or {p["bk64"]} (D=64) rows in threadgroup memory, S = Q K^T with K loaded transposed, online softmax in
# exp2{softmax_line}, O += P V, causal block skipping, GQA. float16; {f32_line}; the row
# kernel otherwise.{" The rescale only where a row's maximum grew past 2^8." if p["crescale"] else ""} Not yet measured
# on Apple hardware.
import mlx.core as mx

MMA_SOURCE = {mma_source!r}
ROW_SOURCE = {metal_rows.PREFILL_SOURCE!r}
{kernels}


def run(q, k, v, causal):
    b, hq, length, d = q.shape
    f16 = mx.float16
    f32 = mx.float32
{calls}
    nblk = (length + {rnt - 1}) // {rnt}
    return {rows_fn}(inputs=[q, k, v],{rows_t}grid=(b * hq * nblk * {rnt}, 1, 1), threadgroup=({rnt}, 1, 1), output_shapes=[q.shape],
                 output_dtypes=[q.dtype])[0]
'''


FLASH_SIMDGROUP = TemplateFamily(
    id="attention.metal.flash_simdgroup", tasks=("attention",), backends=("mlx-metal",),
    patterns=("tensor_core_mma", "online_softmax", "exp2_trick", "threadgroup_tiling", "k_transposition",
              "causal_block_skipping", "gqa_head_grouping"),
    # The first choices are the library's (metal_simdgroup.block_keys, metal_simdgroup.CRESCALE); the longer blocks
    # (32 keys at D=128, 64 at D=64: metal_fragments.block_keys) fit only with the softmax in registers.
    # `float32`: "mma" (the library's: float32 on the matrix units, its blocks float32_keys) or "rows" (the row
    # kernel); which is faster on a Mac is not measured.
    params={"bk128": (16, 8, 32), "bk64": (32, 16, 8, 64), "crescale": (True, False), "constants": (False, True),
            "softmax": ("threadgroup", "registers"), "float32": ("mma", "rows")},
    render=render_flash_simdgroup,
    valid=lambda p: all(tg_bytes(d, p[f"bk{d}"], p.get("softmax", "threadgroup")) <= METAL_TG_BYTES for d in (64, 128)),
    description="FlashAttention-2 on simdgroup_matrix (opt-in; not yet measured on Apple hardware)")
