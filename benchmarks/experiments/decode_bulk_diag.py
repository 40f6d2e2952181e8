"""Diagnostic run of the bulk-copy decode (decode_bulk.py): a cluster of one vs clusters, __syncwarp after waits; kernels
under fresh names (results in benchmarks/results/logs/decode-bulk-diag-h200.log)."""
import math
import time

import mlx.core as mx

from ksearch.kernels import decode_bulk as DB
from ksearch.kernels.attention import native_decode


def ref(q, k, v):
    g = q.shape[1] // k.shape[1]
    k = mx.repeat(k.astype(mx.float32), g, axis=1)
    v = mx.repeat(v.astype(mx.float32), g, axis=1)
    s = (q.astype(mx.float32) @ k.transpose(0, 1, 3, 2)) / math.sqrt(q.shape[-1])
    return mx.softmax(s, axis=-1) @ v

# native at B=16 before anything of ours runs
mx.random.seed(0)
q = mx.random.normal((16, 32, 1, 128)).astype(mx.float16)
kc = mx.random.normal((16, 8, 4352, 128)).astype(mx.float16)
vc = mx.random.normal((16, 8, 4352, 128)).astype(mx.float16)
nat = native_decode(q, kc, vc, 4096)
print("native B16 nan:", mx.any(mx.isnan(nat)).item(), "inputs nan:", mx.any(mx.isnan(kc)).item(), mx.any(mx.isnan(q)).item(),
      "max err vs ref (head 0..3):", mx.max(mx.abs(nat[:1].astype(mx.float32) - ref(q[:1], kc[:1, :, :4096], vc[:1, :, :4096]))).item(), flush=True)
del q, kc, vc, nat

def variant(tag, cluster111, syncwarp, cs):
    cfg = DB.BulkConfig()
    src = DB.SOURCE
    if syncwarp:
        src = src.replace("ks_mbar_wait(full + s, (i / NS) & 1);", "ks_mbar_wait(full + s, (i / NS) & 1);\n        __syncwarp();")
        src = src.replace("if (n > 0) ks_mbar_wait(empty + s, (n - 1) & 1);", "if (n > 0) ks_mbar_wait(empty + s, (n - 1) & 1);\n        __syncwarp();")
    hdr = DB.header(cfg, cs)
    if cluster111 and cs == 1:
        hdr = hdr.replace("launch_bounds(160, 1)))", "launch_bounds(160, 1))) __cluster_dims__(1, 1, 1)")
    k = mx.fast.cuda_kernel(name=f"diag_{tag}", input_names=["q", "k", "v"], output_names=["o"], source=src,
                            header=hdr, ensure_row_contiguous=False, shared_memory=cfg.smem_bytes(128, 4))
    def run(q, kc, vc, n):
        b, hq, _, d = q.shape
        hkv = kc.shape[1]
        return k(inputs=[q, kc[:, :, :n], vc[:, :, :n]], template=DB.template(q.dtype, d, hq // hkv, cfg, cs),
                 grid=(b * hkv * 160, cs, 1), threadgroup=(160, 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
    return run

cases = [(1, 32, 8, 4352, 4096, 128), (3, 16, 1, 9000, 8191, 128), (8, 32, 8, 16640, 16384, 128), (16, 32, 8, 4352, 4100, 128)]
for tag, c111, sw, cs in [("a", 0, 0, 1), ("b", 1, 0, 1), ("c", 0, 1, 1), ("d", 1, 1, 1), ("e", 0, 0, 2), ("f", 0, 1, 2)]:
    fn = variant(tag, c111, sw, cs)
    for (b, hq, hkv, cap, n, d) in cases:
        mx.random.seed(1)
        q = mx.random.normal((b, hq, 1, d)).astype(mx.float16)
        kc = mx.random.normal((b, hkv, cap, d)).astype(mx.float16)
        vc = mx.random.normal((b, hkv, cap, d)).astype(mx.float16)
        mx.eval(q, kc, vc)
        errs = []
        for _rep in range(3):
            out = fn(q, kc, vc, n).astype(mx.float32)
            errs.append(mx.max(mx.abs(out - ref(q, kc[:, :, :n], vc[:, :, :n]))).item())
        mx.synchronize()
        t0 = time.perf_counter()
        outs = [fn(q, kc, vc, n) for _ in range(20)]
        mx.eval(outs)
        mx.synchronize()
        dt = (time.perf_counter() - t0) / 20
        print(f"{tag} cluster111={c111} syncwarp={sw} cs={cs} {(b, hq, hkv, cap, n, d)}: errs {[f'{e:.1e}' for e in errs]} "
              f"{dt * 1e6:.1f} us {2 * b * hkv * n * d * 2 / dt / 1e9:.0f} GB/s", flush=True)
        del q, kc, vc
