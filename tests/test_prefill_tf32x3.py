"""The float32 prefill on tensor cores (3xTF32, kernels/attention/tf32x3.py): its fragment index helpers and split run
on the host by g++ against PTX's m16n8k8 TF32 fragment layout (a warp's S = Q K^T and O += P V, emulated lane by
lane with the tensor core reading 19 bits of each operand), its accuracy against fp64 and that of one TF32 product,
what it takes and refuses, and its kernels compiled for sm_80 and sm_90a without spills."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import mlx.core as mx
import pytest

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.kernels.attention import tf32x3 as K
from ksearch.knowledge.resources import parse_ptxas

# One warp (warp 1 of a 64-row block) through a tile of BN keys, as the kernel does it: Q's and K's 16-byte loads,
# the pick of a k-step's fragments, the split, three products; P from S's accumulators, V's 8-byte loads, O's dims.
# The emulated mma is PTX's layout, written here on its own: A 16 x 8 (a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
# a3 (g + 8, t + 4)), B 8 x 8 (b0 (t, g), b1 (t + 4, g)), C 16 x 8 (c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t),
# c3 (g + 8, 2t + 1)); the tensor core reads the upper 19 bits of each operand (TRUNC) and adds in fp32.
HOST = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
HEADER
constexpr int D = HD, BN = HBN;
static float tf32(float x) {
  unsigned u; std::memcpy(&u, &x, 4); u &= 0xffffe000u; float y; std::memcpy(&y, &u, 4); return y;
}
static void split(float x, float& big, float& small) {
  if (!THREE) { big = x; small = 0.f; return; }  // one TF32 product: what MLX's own fp32 matmul does
  big = tf32(x); small = x - big;
}
static void mma(float c[32][4], const float a[32][4], const float b[32][2]) {
  float A[16][8], B[8][8];
  for (int l = 0; l < 32; ++l) {
    int g = l >> 2, t = l & 3;
    A[g][t] = a[l][0]; A[g + 8][t] = a[l][1]; A[g][t + 4] = a[l][2]; A[g + 8][t + 4] = a[l][3];
    B[t][g] = b[l][0]; B[t + 4][g] = b[l][1];
  }
  for (int l = 0; l < 32; ++l) {
    int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) {
      int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      float acc = c[l][i];
      for (int k = 0; k < 8; ++k) acc = std::fma(tf32(A[row][k]), tf32(B[k][col]), acc);
      c[l][i] = acc;
    }
  }
}
static void mma3(float c[32][4], const float ab[32][4], const float as[32][4], const float bb[32][2],
                 const float bs[32][2]) {
  mma(c, as, bb); mma(c, ab, bs); mma(c, ab, bb);
}
int main() {
  constexpr int W = 1, BM = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  std::vector<float> Qs(BM * (D + 16), NAN), Ks(BN * (D + 16), NAN), Vs(BN * (D + 4), NAN);
  std::vector<double> q(BM * D), k(BN * D), v(BN * D);
  std::vector<float> Qi(BM / 2 * (2 * D + 16), NAN), Vt(D * BN, NAN);
  for (int r = 0; r < BM; ++r) for (int c = 0; c < D; ++c) {
    Qs[ks3_qk<D>(r, c)] = q[r * D + c] = nd(rng);
    if (!std::isnan(Qi[ks3_qi_at<D>(r, c)])) { std::printf("Q slot taken twice\n"); return 1; }
    Qi[ks3_qi_at<D>(r, c)] = (float)q[r * D + c];
  }
  for (int r = 0; r < BN; ++r) for (int c = 0; c < D; ++c) {
    Ks[ks3_qk<D>(r, c)] = k[r * D + c] = nd(rng);
    Vs[ks3_v<D>(r, c)] = v[r * D + c] = nd(rng);
    if (!std::isnan(Vt[ks3_vt<BN>(c, r)])) { std::printf("V^T slot taken twice\n"); return 1; }
    Vt[ks3_vt<BN>(c, r)] = (float)v[r * D + c];
  }
  auto f4 = [](const std::vector<float>& s, int at) { return float4{s[at], s[at + 1], s[at + 2], s[at + 3]}; };
  auto f2 = [](const std::vector<float>& s, int at) { return float2{s[at], s[at + 1]}; };
  static float sacc[BN / 8][32][4], oacc[D / 8][32][4];
  std::memset(sacc, 0, sizeof sacc); std::memset(oacc, 0, sizeof oacc);
  for (int kp = 0; kp < D / 16; ++kp)
    for (int sk = 0; sk < 2; ++sk) {
      float ab[32][4], as[32][4];
      for (int l = 0; l < 32; ++l) {
        float a[4];
        if (FRAG) {
          float4 x = f4(Qi, ks3_qquad<D>(W, l, 2 * kp + sk));
          a[0] = x.x; a[1] = x.y; a[2] = x.z; a[3] = x.w;
        } else {
          ks3_pick(f4(Qs, ks3_qa<D>(W, l, kp, 0)), f4(Qs, ks3_qa<D>(W, l, kp, 1)), sk, a);
        }
        for (int i = 0; i < 4; ++i) split(a[i], ab[l][i], as[l][i]);
      }
      for (int n = 0; n < BN / 8; ++n) {
        float bb[32][2], bs[32][2];
        for (int l = 0; l < 32; ++l) {
          float b[2];
          ks3_pick_b(f4(Ks, FRAG ? ks3_kbf<D>(l, n, kp) : ks3_kb<D>(l, n, kp)), sk, b);
          for (int i = 0; i < 2; ++i) split(b[i], bb[l][i], bs[l][i]);
        }
        mma3(sacc[n], ab, as, bb, bs);
      }
    }
  double s_err = 0, s_max = 0;
  std::vector<double> p(16 * BN, -1.0);  // P: S scaled into [0, 1), as the lanes hold it
  for (int l = 0; l < 32; ++l)
    for (int n = 0; n < BN / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        int row = (l >> 2) + 8 * (i >> 1);
        int key = FRAG ? ks3_key(n, 2 * (l & 3) + (i & 1)) : n * 8 + 2 * (l & 3) + (i & 1);
        double ref = 0;
        for (int c = 0; c < D; ++c) ref += q[(W * 16 + row) * D + c] * k[key * D + c];
        s_err = std::fmax(s_err, std::fabs(sacc[n][l][i] - ref)); s_max = std::fmax(s_max, std::fabs(ref));
        if (p[row * BN + key] != -1.0) { std::printf("key %d of row %d held twice\n", key, row); return 1; }
        sacc[n][l][i] = (float)(p[row * BN + key] = ud(rng));
      }
  for (int kk = 0; kk < BN / 8 && FRAG; ++kk) {  // V^T: key tiles 2j (x, y) and 2j + 1 (z, w) from one load
    float pb[32][4], ps[32][4];
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) split(sacc[kk][l][ks3_pa(i)], pb[l][i], ps[l][i]);
    for (int dn = 0; dn < D / 8; ++dn) {
      float bb[32][2], bs[32][2];
      for (int l = 0; l < 32; ++l) {
        float4 x = f4(Vt, ks3_vtb<BN>(l, kk >> 1, dn));
        float b[2] = {kk & 1 ? x.z : x.x, kk & 1 ? x.w : x.y};
        for (int i = 0; i < 2; ++i) split(b[i], bb[l][i], bs[l][i]);
      }
      mma3(oacc[dn], pb, ps, bb, bs);
    }
  }
  for (int kk = 0; kk < BN / 8 && !FRAG; ++kk) {
    float pb[32][4], ps[32][4];
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) split(sacc[kk][l][ks3_pa(i)], pb[l][i], ps[l][i]);
    for (int j = 0; j < D / 16; ++j) {
      float bb[2][32][2], bs[2][32][2];
      for (int l = 0; l < 32; ++l) {
        float2 v0 = f2(Vs, ks3_vb<D>(l, kk, j, 0)), v1 = f2(Vs, ks3_vb<D>(l, kk, j, 1));
        float b0[2] = {v0.x, v1.x}, b1[2] = {v0.y, v1.y};
        for (int i = 0; i < 2; ++i) { split(b0[i], bb[0][l][i], bs[0][l][i]); split(b1[i], bb[1][l][i], bs[1][l][i]); }
      }
      mma3(oacc[2 * j], pb, ps, bb[0], bs[0]);
      mma3(oacc[2 * j + 1], pb, ps, bb[1], bs[1]);
    }
  }
  double o_err = 0, o_max = 0;
  std::vector<int> seen(16 * D, 0);
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < D / 16; ++j)
      for (int half = 0; half < 2; ++half) {
        float4 x = ks3_out(oacc[2 * j][l], oacc[2 * j + 1][l], half);  // FRAG: O's plain accumulator layout
        float got[4] = {x.x, x.y, x.z, x.w};
        if (FRAG) {
          got[0] = oacc[2 * j][l][2 * half]; got[1] = oacc[2 * j][l][2 * half + 1];
          got[2] = oacc[2 * j + 1][l][2 * half]; got[3] = oacc[2 * j + 1][l][2 * half + 1];
        }
        int row = (l >> 2) + 8 * half;
        for (int e = 0; e < 4; ++e) {
          int dim = FRAG ? (2 * j + (e >> 1)) * 8 + 2 * (l & 3) + (e & 1) : j * 16 + 4 * (l & 3) + e;
          seen[row * D + dim] += 1;
          double ref = 0;
          for (int key = 0; key < BN; ++key) ref += p[row * BN + key] * v[key * D + dim];
          o_err = std::fmax(o_err, std::fabs(got[e] - ref)); o_max = std::fmax(o_max, std::fabs(ref));
        }
      }
  for (int i = 0; i < 16 * D; ++i) if (seen[i] != 1) { std::printf("O element %d stored %d times\n", i, seen[i]); return 1; }
  std::printf("%.3e %.3e %.3e %.3e\n", s_err, s_max, o_err, o_max);
  return 0;
}
"""


def _run(tmp_path: Path, d: int, bn: int, three: bool, frag: bool = False) -> tuple[float, float, float, float]:
    stem = f"tf32x3_{d}_{bn}_{int(three)}_{int(frag)}"
    src, exe = tmp_path / f"{stem}.cpp", tmp_path / stem
    src.write_text(HOST.replace("HEADER", K.TF32X3_HEADER))
    flags = [f"-DHD={d}", f"-DHBN={bn}", f"-DTHREE={int(three)}", f"-DFRAG={int(frag)}"]
    built = subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", *flags, "-o", str(exe), str(src)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-3000:]
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    s_err, s_max, o_err, o_max = map(float, ran.stdout.split())
    return s_err, s_max, o_err, o_max


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="LOUD SKIP: no g++ to run the helpers on the host")


@needs_gxx
@pytest.mark.parametrize("frag", [False, True], ids=["plain", "fragment-layouts"])
@pytest.mark.parametrize("d,bn", [(64, 32), (128, 32), (128, 64)])
def test_a_warps_products_land_where_the_kernel_reads_and_stores_them_within_fp32(tmp_path: Path, d: int, bn: int,
                                                                                 frag: bool) -> None:
    """Every lane's S element is Q K^T at the row and key the softmax and the mask take it to be, every O element is
    P V at the dim it is stored to, each once; three TF32 products are within 1e-6 of fp64 relative to the largest
    value (scores of D standard normal terms, O of BN keys). With the fragment layouts (SOURCE_FRAG) as well: Q's
    interleaving and V^T's swizzle put every element in a slot of its own."""
    s_err, s_max, o_err, o_max = _run(tmp_path, d, bn, three=True, frag=frag)
    assert s_err < 1e-6 * s_max and o_err < 1e-6 * o_max, (s_err, s_max, o_err, o_max)


@needs_gxx
def test_one_tf32_product_misses_what_three_reach(tmp_path: Path) -> None:
    """The emulation can fail: with one TF32 product (each operand's upper 19 bits, as MLX's float32 matmul on CUDA)
    S is off by more than 1e-4 relative, which a float32 reference's tolerance does not allow."""
    s_err, s_max, o_err, o_max = _run(tmp_path, 128, 32, three=False)
    assert s_err > 1e-4 * s_max and o_err > 1e-5 * o_max, (s_err, s_max, o_err, o_max)


def _shapes(length: int = 256, s: int = 256, d: int = 128, hq: int = 8, hkv: int = 2,
            dtype: mx.Dtype = mx.float32) -> tuple[mx.array, mx.array, mx.array]:
    q = mx.zeros((1, hq, length, d), dtype=dtype)
    k = mx.zeros((1, hkv, s, d), dtype=dtype)
    return q, k, k


def test_what_it_takes() -> None:
    assert K.supports(*_shapes(), causal=True)
    assert K.supports(*_shapes(length=100, s=77, d=64), causal=False)  # partial tiles and blocks are masked
    assert not K.supports(*_shapes(length=100, s=77), causal=True)  # causal needs L <= S
    assert not K.supports(*_shapes(dtype=mx.float16), causal=False)
    assert not K.supports(*_shapes(d=96), causal=False)
    assert not K.supports(*_shapes(hq=6, hkv=4), causal=False)


def test_inputs_it_cannot_take_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="needs float32") as err:
        K.attention_tf32x3(*_shapes(dtype=mx.bfloat16))
    assert "\n" not in str(err.value)


def test_the_default_takes_the_fragment_layouts_and_keeps_q_in_registers_at_d64_only() -> None:
    assert K.default_config(64) == K.Tf32Config(bm=64, qreg=True, frag=True)
    assert K.default_config(128) == K.Tf32Config(bm=128, qreg=False, frag=True)
    assert K.default_config(128).smem_bytes(128) <= 163 * 1024  # sm_80's limit too
    assert K.default_config(128).name() == "mma_tf32x3_m128_n32_fl"


def _spills(arch: str, frag: bool) -> dict[str, int]:
    """Spill-store bytes of the default (frag) or the first form at both head dims, with and without the mask, compiled
    as MLX wraps it."""
    units, names = [], []
    for d in (64, 128):
        cfg = K.default_config(d) if frag else K.Tf32Config(qreg=d == 64)
        for causal in (False, True):
            names.append(f"tf{d}x{int(causal)}")
            units.append(wrap(f"{names[-1]}_0", cfg.source(), "", [("q", "T"), ("k", "T"), ("v", "T"),
                                                                     ("scale", "float32")],
                              [("o", "T")], [("T", "float32"), ("D", d), *K.template_args(cfg, causal)],
                              scope=f"s_{names[-1]}"))
    ok, log = compile_check([K.TF32X3_HEADER, *units], arch=arch)
    assert ok, log[-3000:]
    found = {r.kernel: r.spill_store_bytes for r in parse_ptxas(log)}
    assert sorted(found) == sorted(names), log[-2000:]
    return found


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_kernels_compile_without_spills(arch: str) -> None:
    assert all(b == 0 for b in _spills(arch, frag=False).values())


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_the_fragment_layouts_compile_with_at_most_a_word_spilled() -> None:
    """The default, sm_90a: none at D=64 (Q in registers) or at D=128 without the mask; at most 4 bytes at D=128 with
    it (V's next tile waits in 32 registers)."""
    spills = _spills("sm_90a", frag=True)
    assert spills["tf64x0"] == spills["tf64x1"] == spills["tf128x0"] == 0 and spills["tf128x1"] <= 4, spills
