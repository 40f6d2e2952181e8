"""Template families for the `gqa_decode` task: split-K flash-decoding on MLX-CUDA and Metal, grouped MLX ops on CPU.

Each family renders a complete candidate (`run(q, k_cache, v_cache, length)`), self-contained: kernel bodies are
embedded from ksearch.kernels (the same text the library runs), so a rendered candidate is what the library measures.
"""

from __future__ import annotations

from typing import Any

from ksearch.kernels.decode import MMA_DEFAULT, cuda_cluster, cuda_split_k_text, metal_split_k
from ksearch.kernels.decode.cuda_split_k import MERGE_FEW
from ksearch.kernels.kernel_text import compact
from ksearch.policy.templates.base import CONSTANT_KERNELS, HOPPER_CHECK, METAL_CONSTANT_KERNELS, TemplateFamily

_OPS_FALLBACK = '''
def _ops(q, k_cache, v_cache, length):
    # Grouped ops without K/V repetition: dtypes or head dims the kernel does not take.
    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    k = k_cache[:, :, :length].astype(mx.float32)
    v = v_cache[:, :, :length].astype(mx.float32)
    qg = q.astype(mx.float32).reshape(b, hkv, hq // hkv, d) * (1.0 / math.sqrt(d))
    s = qg @ k.transpose(0, 1, 3, 2)
    p = mx.exp(s - mx.max(s, axis=-1, keepdims=True))
    return ((p / mx.sum(p, axis=-1, keepdims=True)) @ v).reshape(b, hq, 1, d).astype(q.dtype)
'''


def _split_call(kernel: str, template: str, indent: str) -> str:
    # A literal template list in each call: the project's linter reads the kernel's template arguments from it.
    # Without one (`template` empty) the kernel carries its arguments as constants in its header
    # (base.CONSTANT_KERNELS).
    targs = f"template={template}, " if template else ""
    return f'''{indent}part_acc, part_ml = {kernel}(
{indent}    inputs=[q, k, v], {targs}grid=(blocks * nt, nsplit, 1), threadgroup=(nt, 1, 1),
{indent}    output_shapes=[(blocks, nsplit, g, d), (blocks, nsplit, g, 2)],
{indent}    output_dtypes=[mx.float32, mx.float32])
'''


def _call(fn: str, lead: str, args: list[str], tail: str = "") -> str:
    """`lead fn(args...)tail` as rendered code: the keyword arguments one a line under the first."""
    indent = " " * (len(lead) + len(fn) + 1)
    return f"{lead}{fn}(" + (",\n" + indent).join(args) + ")" + tail


def _mma_code(mib: int, constants: bool = False) -> tuple[str, str]:
    """(module-level code, the call in run()) for the library's tensor-core decode (kernels/decode/cuda_cluster.py with
    no producer warp, decode.MMA_DEFAULT) on Hopper at D 128 and G 4 (where it was measured), for calls of more than
    `mib` MiB of K/V: the library's own dispatch at mib=64 (decode.MMA_MIN_KV_BYTES). The texts
    are the library's, compacted as the library hands them to MLX (a call's host work grows with them). With
    `constants` their template arguments are constants in their headers (base.CONSTANT_KERNELS, rendered before
    this)."""
    cfg, d, g, nf = MMA_DEFAULT, 128, 4, MERGE_FEW
    nt, smem = cfg.threads(), cfg.smem_bytes(d, g)
    room = cfg.sms * cfg.blocks_per_sm(d, g)
    fixed = (f'("T", q.dtype), ("D", {d}), ("G", {g}), ("NC", {cfg.consumers}), ("PW", {cfg.producers}), '
             f'("BK", {cfg.keys}), ("SPW", {cfg.slots})')

    def tmpl(cs: int) -> str:
        return f'[{fixed}, ("CS", {cs}), ("TMA", False)]'

    if constants:
        kernels = f'''
def _mma_kernels(dtype):
    # The tensor-core kernels for this dtype, made at its first call.
    ks = _MADE.get(("mma", dtype))
    if ks is None:
        base = ({fixed.replace("q.dtype", "dtype")})
        ks = _MADE[("mma", dtype)] = (
            _make("gqa_mma_one", MMA_ONE, ["q", "k", "v"], ["o"], MMA_HEADER, base + (("CS", 1), ("TMA", False)),
                  {smem}),
            _make("gqa_mma_parts", MMA_PARTS, ["q", "k", "v"], ["part_acc", "part_ml"], MMA_HEADER,
                  base + (("CS", 0), ("TMA", False)), {smem}),
            _make("gqa_mma_merge", MERGE, ["part_acc", "part_ml"], ["o"], "", base[:3]),
            _make("gqa_mma_merge_few", MERGE_FEW, ["part_acc", "part_ml"], ["o"], "", base[:3] + (("NF", {nf}),)))
    return ks
'''
        pick = "    one, parts, merge, merge_few = _mma_kernels(q.dtype)\n"
        one, parts, merge, merge_few = "one", "parts", "merge", "merge_few"
        targs: dict[Any, list[str]] = {1: [], 0: [], "merge": [], "few": []}
    else:
        kernels = f'''_mma_one = mx.fast.cuda_kernel(name="gqa_mma_one", input_names=["q", "k", "v"], output_names=["o"], source=MMA_ONE,
                               header=MMA_HEADER, ensure_row_contiguous=False, shared_memory={smem})
_mma_parts = mx.fast.cuda_kernel(name="gqa_mma_parts", input_names=["q", "k", "v"],
                                 output_names=["part_acc", "part_ml"], source=MMA_PARTS, header=MMA_HEADER,
                                 ensure_row_contiguous=False, shared_memory={smem})
_mma_merge = mx.fast.cuda_kernel(name="gqa_mma_merge", input_names=["part_acc", "part_ml"], output_names=["o"],
                                 source=MERGE)
_mma_merge_few = mx.fast.cuda_kernel(name="gqa_mma_merge_few", input_names=["part_acc", "part_ml"],
                                     output_names=["o"], source=MERGE_FEW)
'''
        pick, one, parts, merge, merge_few = "", "_mma_one", "_mma_parts", "_mma_merge", "_mma_merge_few"
        targs = {1: [f"template={tmpl(1)}"], 0: [f"template={tmpl(0)}"],
                 "merge": [f'template=[("T", q.dtype), ("D", {d}), ("G", {g})]'],
                 "few": [f'template=[("T", q.dtype), ("D", {d}), ("G", {g}), ("NF", {nf})]']}
    one_call = _call(one, "        return ", ["inputs=[q, k, v]", *targs[1], f"grid=(pairs * {nt}, 1, 1)",
                                               f"threadgroup=({nt}, 1, 1)", "output_shapes=[q.shape]",
                                               "output_dtypes=[q.dtype]"], "[0]")
    parts_call = _call(parts, "    part_acc, part_ml = ", [
        "inputs=[q, k, v]", *targs[0], f"grid=(pairs * {nt}, ns, 1)", f"threadgroup=({nt}, 1, 1)",
        f"output_shapes=[(pairs, ns, {g}, {d}), (pairs, ns, {g}, 2)]", "output_dtypes=[mx.float32, mx.float32]"])
    merge_args = [f"grid=(b * hq * {d}, 1, 1)", f"threadgroup=({d}, 1, 1)", "output_shapes=[q.shape]",
                  "output_dtypes=[q.dtype]"]
    merge_call = _call(merge, "    return ", ["inputs=[part_acc, part_ml]", *targs["merge"], *merge_args], "[0]")
    if cfg.few_merge:  # the library's one-read merge at 2 to MERGE_FEW splits
        few_call = _call(merge_few, "        return ", ["inputs=[part_acc, part_ml]", *targs["few"], *merge_args], "[0]")
        merge_call = f"    if ns <= {nf}:\n{few_call}\n{merge_call}"

    few_note = f" (at most {nf} splits: the one-read merge)" if cfg.few_merge else ""
    module = f'''
MMA_HEADER = {compact(cuda_cluster.header(cfg, 1))!r}
MMA_ONE = {compact(cuda_cluster.SOURCE)!r}
MMA_PARTS = {compact(cuda_cluster.PARTS_SOURCE)!r}
MERGE_FEW = {cuda_split_k_text.MERGE_FEW_SOURCE!r}
{kernels}
{HOPPER_CHECK}

def _mma(q, k, v, length):
    # One block of {nt} threads a (batch, kv head) and split, S and P V on mma.sync, each warp copying its own tiles
    # {cfg.slots} ahead with cp.async; as many splits as one wave of {room} blocks holds; at one split a pair the block
    # writes the output itself, otherwise split-K's merge{few_note}.
    b, hq, _, d = q.shape
    # No-ops that tell static checkers the arrays keep q's dtype.
    k = k.astype(q.dtype)
    v = v.astype(q.dtype)
    pairs = b * k.shape[1]
{pick}    ns = max(1, min({room} // pairs, math.ceil(length / {cfg.keys}) // 2))
    if ns == 1:
{one_call}
{parts_call}
{merge_call}
'''
    call = f'''    if _HOPPER and d == {d} and hq == {g} * hkv and 2 * b * hkv * length * d * q.dtype.size > {mib} * 2**20:
        return _mma(q, k, v, length)
'''
    return module, call


def _constant_kernels(p: dict[str, Any], ring_bytes: int) -> tuple[str, str]:
    """(module-level code, the launch in run()) with each kernel's template arguments as constants in its header
    (base.CONSTANT_KERNELS): the kernels of one (dtype, D, G) made at its first call and kept."""
    fixed = f'("NW", {p["warps"]}), ("U", {p["unroll"]}), ("PREFETCH", {p["prefetch"]})'
    if p["fused"]:
        made = '''ks = _MADE[key] = (_make("gqa_decode_fused", SOURCE, ["q", "k", "v"], ["o", "work"], HEADER, consts),)'''
        launch = '''    return _kernels(q.dtype, d, g)[0](
        inputs=[q, k, v], grid=(blocks * nt, nsplit, 1), threadgroup=(nt, 1, 1),
        output_shapes=[q.shape, (_work_floats(blocks, nsplit, g, d),)],
        output_dtypes=[q.dtype, mx.float32], init_value=0)[0]


def _work_floats(blocks, nsplit, g, d):
    # The work buffer SOURCE lays out: counters, (max, sum) pairs, accumulators, each region 16-byte aligned.
    return (blocks + 3) // 4 * 4 + (blocks * nsplit * g * 2 + 3) // 4 * 4 + blocks * nsplit * g * d'''
    else:
        ring = int(p.get("ring", 0))
        # The ring's static shared memory beside the warps' merge, past MLX's 48 KB a block: the same steps in
        # registers (decided once per (D, G), with the kernel).
        plain = '''_make("gqa_split_k", SOURCE, ["q", "k", "v"], ["part_acc", "part_ml"], HEADER, consts)'''
        split = (f'''_make("gqa_split_k_ring", RING_SOURCE, ["q", "k", "v"], ["part_acc", "part_ml"], HEADER,
                      consts + (("RING", {ring}),)) if {p["warps"]} * g * (d + 2) * 4 + {ring_bytes} <= 48 * 1024 \\
            else {plain}''' if ring else plain)
        made = (f"split = {split}\n        ks = _MADE[key] = "
                '''(split, _make("gqa_lse_merge", MERGE, ["part_acc", "part_ml"], ["o"], "", consts[:3]))''')
        launch = _split_call("split", "", "    ") + '''    return merge(inputs=[part_acc, part_ml], grid=(b * hq * d, 1, 1), threadgroup=(d, 1, 1),
                 output_shapes=[q.shape], output_dtypes=[q.dtype])[0]'''
        launch = "    split, merge = _kernels(q.dtype, d, g)\n" + launch
    module = CONSTANT_KERNELS + f'''

def _kernels(dtype, d, g):
    # This (dtype, D, G)'s kernels, made at its first call.
    key = (dtype, d, g)
    ks = _MADE.get(key)
    if ks is None:
        consts = (("T", dtype), ("D", d), ("G", g), {fixed})
        {made}
    return ks
'''
    return module, launch


def render_cuda(p: dict[str, Any]) -> str:
    fused = bool(p["fused"])
    ring = int(p.get("ring", 0))
    tmpl = (f'[("T", q.dtype), ("D", d), ("G", g), ("NW", {p["warps"]}), ("U", {p["unroll"]}), '
            f'("PREFETCH", {p["prefetch"]})]')
    # The ring's static shared memory beside the warps' merge (DecodeConfig.shared_bytes): past MLX's 48 KB a block
    # (G 8 at D 128) the same steps go through registers.
    ring_bytes = ring * 2 * p["unroll"] * p["warps"] * 32 * 16
    ring_tmpl = tmpl[:-1] + f', ("RING", {ring})]'
    if p.get("constants"):
        kernels, launch = _constant_kernels(p, ring_bytes)
    # Literal template lists and module-level kernel names keep the candidate readable by the project's linter.
    elif fused:
        kernels = '''_kernel = mx.fast.cuda_kernel(name="gqa_decode_fused", input_names=["q", "k", "v"],
                              output_names=["o", "work"], source=SOURCE, header=HEADER,
                              ensure_row_contiguous=False)'''
        launch = f'''    return _kernel(
        inputs=[q, k, v], template={tmpl},
        grid=(blocks * nt, nsplit, 1), threadgroup=(nt, 1, 1),
        output_shapes=[q.shape, (_work_floats(blocks, nsplit, g, d),)],
        output_dtypes=[q.dtype, mx.float32], init_value=0)[0]


def _work_floats(blocks, nsplit, g, d):
    # The work buffer SOURCE lays out: counters, (max, sum) pairs, accumulators, each region 16-byte aligned.
    return (blocks + 3) // 4 * 4 + (blocks * nsplit * g * 2 + 3) // 4 * 4 + blocks * nsplit * g * d'''
    else:
        kernels = '''_split = mx.fast.cuda_kernel(name="gqa_split_k", input_names=["q", "k", "v"],
                             output_names=["part_acc", "part_ml"], source=SOURCE, header=HEADER,
                             ensure_row_contiguous=False)
_merge = mx.fast.cuda_kernel(name="gqa_lse_merge", input_names=["part_acc", "part_ml"], output_names=["o"],
                             source=MERGE)'''
        launch = _split_call("_split", tmpl, "    ")
        if ring:
            kernels += '''
_ring = mx.fast.cuda_kernel(name="gqa_split_k_ring", input_names=["q", "k", "v"],
                            output_names=["part_acc", "part_ml"], source=RING_SOURCE, header=HEADER,
                            ensure_row_contiguous=False)'''
            launch = (f'''    if {p["warps"]} * g * (d + 2) * 4 + {ring_bytes} <= 48 * 1024:
''' + _split_call("_ring", ring_tmpl, "        ") + '''    else:
''' + _split_call("_split", tmpl, "        "))
        launch += '''    return _merge(inputs=[part_acc, part_ml], template=[("T", q.dtype), ("D", d), ("G", g)],
                  grid=(b * hq * d, 1, 1), threadgroup=(d, 1, 1), output_shapes=[q.shape],
                  output_dtypes=[q.dtype])[0]'''
    mma_module, mma_call = _mma_code(p["mma"], bool(p.get("constants"))) if p.get("mma") else ("", "")
    # A floor on the block count: chained calls wait on each call's latency, which a few long splits cannot hide
    # (DecodeConfig.floor_blocks, the library's rule).
    floor = (f'''    floor_splits = math.ceil({p["floor_blocks"]} / blocks)
    chunk = min(chunk, max({min(128, p["min_chunk"])}, math.ceil(length / floor_splits)))
''' if p.get("floor_blocks") else "")
    return f'''# gqa_decode.cuda.split_k {p}
# Split-K flash-decoding: (batch, head block, split) blocks, 16-byte loads, online softmax in exp2, then a log-sum-exp
# merge: by the last block to finish (fused, one launch) or by a second kernel. With a ring, each lane's rows come
# through shared memory by cp.async, ring - 1 steps ahead. With mma, large calls on Hopper take the tensor-core kernel.
import math

import mlx.core as mx

HEADER = {cuda_split_k_text.HEADER!r}
SOURCE = {(cuda_split_k_text.FUSED_SOURCE if fused else cuda_split_k_text.SPLIT_SOURCE)!r}
MERGE = {cuda_split_k_text.MERGE_SOURCE!r}
RING_SOURCE = {(cuda_split_k_text.SPLIT_RING_SOURCE if ring else "")!r}
{kernels}
{mma_module}{_OPS_FALLBACK}

def run(q, k_cache, v_cache, length):
    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    if q.dtype not in (mx.float16, mx.bfloat16) or d not in (64, 128) or hq // hkv > 8 or \
            v_cache.shape != k_cache.shape:
        return _ops(q, k_cache, v_cache, length)
    g = hq // hkv if {p["group_heads"]} else 1
    blocks = b * hq // g
    step = {p["warps"]} * (32 // (d // 8)) * {p["unroll"]}
    chunk = max({p["min_chunk"]}, math.ceil(length / max(1, {p["target_blocks"]} // blocks)))
{floor}    chunk = math.ceil(chunk / step) * step
    nsplit = math.ceil(length / chunk)
    nt = {p["warps"]} * 32
    # K as a view: its shape carries the length, K's and V's strides the layout (no copy); V goes in whole, one
    # slice less to build and dispatch a call (astype to the same dtype is a no-op that tells static checkers the
    # arrays keep q's dtype).
    k = k_cache[:, :, :length].astype(q.dtype)
    v = v_cache.astype(q.dtype)
{mma_call}{launch}
'''


def render_metal(p: dict[str, Any]) -> str:
    constants = bool(p.get("constants"))
    if constants:  # each kernel made at a (dtype, D, G)'s first call, its template arguments in its header
        kernels = METAL_CONSTANT_KERNELS + '''

def _kernels(dtype, d, g):
    # This (dtype, D, G)'s kernels, made at its first call.
    ks = _MADE.get((dtype, d, g))
    if ks is None:
        consts = (("T", dtype), ("D", d), ("G", g), ("NW", WARPS), ("U", UNROLL))
        ks = _MADE[(dtype, d, g)] = (
            _make("gqa_split_k", SPLIT, ["q", "k_cache", "v_cache", "meta"], ["part_acc", "part_ml"], consts),
            _make("gqa_lse_merge", MERGE, ["part_acc", "part_ml"], ["o"], consts[:3]),
            _make("gqa_one_split", ONE_SPLIT, ["q", "k_cache", "v_cache", "meta"], ["o"], consts),
            _make("gqa_lse_merge_few", MERGE_FEW, ["part_acc", "part_ml"], ["o"], consts[:3] + (("NF", NF),)))
    return ks'''
        pick = "    _split, _merge, _one_split, _merge_few = _kernels(q.dtype, d, g)\n"
        one_t = split_t = merge_t = few_t = ""
    else:
        kernels = '''_split = mx.fast.metal_kernel(name="gqa_split_k", input_names=["q", "k_cache", "v_cache", "meta"],
                              output_names=["part_acc", "part_ml"], source=SPLIT)
_merge = mx.fast.metal_kernel(name="gqa_lse_merge", input_names=["part_acc", "part_ml"], output_names=["o"],
                              source=MERGE)
_one_split = mx.fast.metal_kernel(name="gqa_one_split", input_names=["q", "k_cache", "v_cache", "meta"],
                                  output_names=["o"], source=ONE_SPLIT)
_merge_few = mx.fast.metal_kernel(name="gqa_lse_merge_few", input_names=["part_acc", "part_ml"], output_names=["o"],
                                  source=MERGE_FEW)'''
        pick = ""
        tmpl = 'template=[("T", q.dtype), ("D", d), ("G", g), ("NW", WARPS), ("U", UNROLL)],'
        one_t, split_t = "\n            " + tmpl, "\n        " + tmpl
        merge_t = ' template=[("T", q.dtype), ("D", d), ("G", g)],'
        few_t = '\n            template=[("T", q.dtype), ("D", d), ("G", g), ("NF", NF)],'
    return f'''# gqa_decode.metal.split_k {p}
# Split-K flash-decoding in MSL: simdgroup shuffles for the score reduction, LSE merge pass. Not yet measured on Apple.
import math

import mlx.core as mx

SPLIT = {metal_split_k.DECODE_SPLIT_SOURCE!r}
MERGE = {metal_split_k.DECODE_MERGE_SOURCE!r}
ONE_SPLIT = {metal_split_k.DECODE_ONE_SPLIT_SOURCE!r}
MERGE_FEW = {metal_split_k.DECODE_MERGE_FEW_SOURCE!r}
NF = {metal_split_k.MERGE_FEW}  # the most splits MERGE_FEW takes: one thread an output element, every split read at once
WARPS, TARGET_BLOCKS, MIN_CHUNK, UNROLL = {p["warps"]}, {p["target_blocks"]}, {p["min_chunk"]}, {p["unroll"]}

{kernels}{chr(10) if constants else ""}
{_OPS_FALLBACK}

def run(q, k_cache, v_cache, length):
    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    if d not in (64, 128) or hq // hkv > 8:
        return _ops(q, k_cache, v_cache, length)
    g = hq // hkv
{pick}    step = WARPS * (32 // (d // 4)) * UNROLL
    chunk = max(MIN_CHUNK, math.ceil(length / max(1, TARGET_BLOCKS // (b * hkv))))
    chunk = math.ceil(chunk / step) * step
    nsplit = math.ceil(length / chunk)
    nt = WARPS * 32
    meta = mx.array([length, chunk, nsplit], dtype=mx.int32)
    if nsplit == 1:  # one split a (batch, kv head): the output itself, no merge launch
        return _one_split(
            inputs=[q, k_cache, v_cache, meta],{one_t}
            grid=(b * hkv * nt, 1, 1), threadgroup=(nt, 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
    part_acc, part_ml = _split(
        inputs=[q, k_cache, v_cache, meta],{split_t}
        grid=(b * hkv * nt, nsplit, 1), threadgroup=(nt, 1, 1),
        output_shapes=[(b * hkv, nsplit, g, d), (b * hkv, nsplit, g, 2)], output_dtypes=[mx.float32, mx.float32])
    if nsplit <= NF:
        return _merge_few(
            inputs=[part_acc, part_ml],{few_t}
            grid=(b * hq * d, 1, 1), threadgroup=(d, 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
    return _merge(inputs=[part_acc, part_ml],{merge_t}
                  grid=(b * hq * d, 1, 1), threadgroup=(d, 1, 1), output_shapes=[q.shape],
                  output_dtypes=[q.dtype])[0]
'''


def render_cpu(p: dict[str, Any]) -> str:
    split = p["split"]
    softmax = ("p = mx.softmax(s, axis=-1)\n        return p @ v" if p["softmax"] == "mx" else
               "p = mx.exp(s - mx.max(s, axis=-1, keepdims=True))\n"
               "        return (p / mx.sum(p, axis=-1, keepdims=True)) @ v")
    core = f'''def _core(qg, k, v):
    # qg (B, Hkv, G, D) pre-scaled fp32; k, v (B, Hkv, n, D) fp32: one matmul per kv head serves its G query heads.
    if {split} == 0 or k.shape[2] <= {split}:
        s = qg @ k.transpose(0, 1, 3, 2)
        {softmax}
    # Split-K in ops: per-chunk max, sum and un-normalised output, then a log-sum-exp merge.
    ms, ls, os_ = [], [], []
    for j in range(0, k.shape[2], {split}):
        s = qg @ k[:, :, j:j + {split}].transpose(0, 1, 3, 2)
        m = mx.max(s, axis=-1, keepdims=True)
        e = mx.exp(s - m)
        ms.append(m)
        ls.append(mx.sum(e, axis=-1, keepdims=True))
        os_.append(e @ v[:, :, j:j + {split}])
    mmax = ms[0]
    for m in ms[1:]:
        mmax = mx.maximum(mmax, m)
    num = sum(o * mx.exp(m - mmax) for o, m in zip(os_, ms))
    den = sum(lc * mx.exp(m - mmax) for lc, m in zip(ls, ms))
    return num / den
'''
    wrap = "_core = mx.compile(_core)\n" if p["compile"] else ""
    return f'''# gqa_decode.cpu.grouped_ops {p}
import math

import mlx.core as mx


{core}
{wrap}

def run(q, k_cache, v_cache, length):
    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    k = k_cache[:, :, :length].astype(mx.float32)
    v = v_cache[:, :, :length].astype(mx.float32)
    qg = q.astype(mx.float32).reshape(b, hkv, hq // hkv, d) * (1.0 / math.sqrt(d))
    return _core(qg, k, v).reshape(b, hq, 1, d).astype(q.dtype)
'''


FAMILIES = [
    TemplateFamily(
        id="gqa_decode.cuda.split_k", tasks=("gqa_decode",), backends=("mlx-cuda",),
        patterns=("split_k_decode_lse_merge", "gqa_head_grouping", "vectorized_loads", "simd_register_reduction",
                  "online_softmax", "exp2_trick", "loop_unrolling", "double_buffering", "fused_epilogue",
                  "tensor_core_mma"),
        # First choices: one block per query head, no split, no prefetch: the naive starter with 16-byte loads.
        params={"group_heads": (False, True), "target_blocks": (1, 264, 528, 1056, 2112), "unroll": (1, 2, 4, 8),
                "prefetch": (False, True), "warps": (4, 2, 8), "min_chunk": (128, 256, 512), "fused": (False, True),
                "ring": (0, 2), "mma": (0, 64, 256), "floor_blocks": (0, 256), "constants": (False, True)},
        render=render_cuda,
        valid=lambda p: p["warps"] * p["unroll"] <= 32 and not (p["ring"] and p["fused"]),
        # Split-K: the keys of a head over several blocks (target_blocks 1 is one block a head: no split at all; a
        # search on the H200 kept 1 for 24 evaluations, its B 1 workload at 0.74x of native). Double buffering on
        # sm_80+: each lane's next rows copied into shared memory by cp.async (the library's ring). Tensor cores: the
        # library's mma.sync kernel for calls of more than 64 MiB of K/V (Hopper, D 128, G 4).
        # Constants: the kernels' template arguments written into their headers, not formatted by MLX into every
        # call (the pattern's note; the library's kernels do it).
        pattern_params={"split_k_decode_lse_merge": {"target_blocks": (528, 1056, 2112), "floor_blocks": (256,),
                                                     "constants": (True,)},
                        "gqa_head_grouping": {"group_heads": (True,)}, "loop_unrolling": {"unroll": (2, 4, 8)},
                        "double_buffering": {"ring": (2,), "fused": (False,)}, "tensor_core_mma": {"mma": (64,)}},
        description="split-K flash-decoding with an LSE merge (last block or a kernel); GQA heads grouped per block"),
    TemplateFamily(
        id="gqa_decode.metal.split_k", tasks=("gqa_decode",), backends=("mlx-metal",),
        patterns=("split_k_decode_lse_merge", "gqa_head_grouping", "vectorized_loads", "simd_register_reduction",
                  "online_softmax", "exp2_trick", "loop_unrolling"),
        params={"target_blocks": (1, 128, 256, 512), "warps": (4, 2, 8), "min_chunk": (128, 256, 512),
                "unroll": (1, 2, 4), "constants": (False, True)},
        render=render_metal,
        valid=lambda p: p["warps"] * p["unroll"] <= 32,
        pattern_params={"split_k_decode_lse_merge": {"target_blocks": (128, 256, 512)},
                        "loop_unrolling": {"unroll": (2, 4)}},
        description="split-K flash-decoding in MSL (opt-in; not yet measured on Apple hardware)"),
    TemplateFamily(
        id="gqa_decode.cpu.grouped_ops", tasks=("gqa_decode",), backends=("mlx-cpu",),
        patterns=("gqa_head_grouping", "blocked_attention_ops", "split_k_decode_lse_merge", "mx_compile_fusion"),
        params={"split": (0, 256, 1024), "softmax": ("manual", "mx"), "compile": (False, True)},
        render=render_cpu,
        description="decode in MLX ops without K/V repetition; optional split-K with LSE merge; mx.compile"),
]
