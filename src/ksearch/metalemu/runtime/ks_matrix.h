// ksearch Metal emulation: simdgroup_matrix<T, 8, 8>, distributed over the 32 lanes as on Apple GPUs: each lane
// holds two elements (thread_elements()), row (q & 4) + ((lane / 2) % 4), columns (q & 2) * 2 + (lane % 2) * 2 and the
// next one, q = lane / 4 (the layout MLX's steel kernels rely on). Loads and stores move each lane's own two elements
// (so threadgroup-memory checks see exactly the accesses hardware makes); multiply and multiply_accumulate are
// SIMD-group operations: the scheduler gathers the 32 lanes' fragments, computes in float with one fused
// multiply-add per term in k order, and scatters the result rounded to the destination's type.
#pragma once
#include "ks_simd.h"

namespace ks {
KS_INLINE void mma_coord(int lane, int& row, int& col) {
  int q = lane >> 2;
  row = (q & 4) + ((lane >> 1) & 3);
  col = ((q & 2) << 1) + ((lane & 1) << 1);
}
}  // namespace ks

namespace metal {
template <class T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "ksearch emulates simdgroup_matrix 8x8 only");
  static_assert(ks::is_same_v<T, float> || ks::is_same_v<T, half> || ks::is_same_v<T, bfloat>,
                "simdgroup_matrix element type must be float, half or bfloat");
  ks::vec<T, 2> e;
  simdgroup_matrix() = default;
  // A diagonal matrix.
  KS_INLINE explicit simdgroup_matrix(T d) {
    int r, c;
    ks::mma_coord(ks_fiber()->lane, r, c);
    e[0] = r == c ? d : T(0);
    e[1] = r == c + 1 ? d : T(0);
  }
  KS_INLINE ks::vec<T, 2>& thread_elements() { return e; }
  KS_INLINE const ks::vec<T, 2>& thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int C, int R> KS_INLINE simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, C, R> m;
  m.e = ks::make<T, 2>(v);
  return m;
}

template <class T, int C, int R, class P>
KS_INLINE void simdgroup_load(simdgroup_matrix<T, C, R>& d, P src, ulong elements_per_row = C,
                              ulong2 matrix_origin = 0, bool transpose_matrix = false) {
  int r, c;
  ks::mma_coord(ks_fiber()->lane, r, c);
  for (int k = 0; k < 2; ++k) {
    ulong row = (ulong)r, col = (ulong)(c + k);
    ulong idx = transpose_matrix ? (matrix_origin.y + col) * elements_per_row + matrix_origin.x + row
                                 : (matrix_origin.y + row) * elements_per_row + matrix_origin.x + col;
    d.e[k] = T(ks::val(src[idx]));
  }
}
template <class T, int C, int R, class P>
KS_INLINE void simdgroup_store(const simdgroup_matrix<T, C, R>& a, P dst, ulong elements_per_row = C,
                               ulong2 matrix_origin = 0, bool transpose_matrix = false) {
  int r, c;
  ks::mma_coord(ks_fiber()->lane, r, c);
  for (int k = 0; k < 2; ++k) {
    ulong row = (ulong)r, col = (ulong)(c + k);
    ulong idx = transpose_matrix ? (matrix_origin.y + col) * elements_per_row + matrix_origin.x + row
                                 : (matrix_origin.y + row) * elements_per_row + matrix_origin.x + col;
    dst[idx] = a.e[k];
  }
}
}  // namespace metal

namespace ks {
template <class TD, class TA, class TB, class TC, bool Acc> int exec_mma(Worker* w, Fiber* const* L, int n) {
  if (n != kSimd) {
    Fiber* f = nullptr;
    for (int l = 0; l < kSimd && !f; ++l) f = L[l];
    return ks_matrix_error(w, f, Acc ? "simdgroup_multiply_accumulate" : "simdgroup_multiply", n);
  }
  float A[8][8], B[8][8], C[8][8];
  for (int l = 0; l < kSimd; ++l) {
    int r, c;
    mma_coord(l, r, c);
    auto* a = (const metal::simdgroup_matrix<TA, 8, 8>*)L[l]->ptrs[1];
    auto* b = (const metal::simdgroup_matrix<TB, 8, 8>*)L[l]->ptrs[2];
    auto* cm = (const metal::simdgroup_matrix<TC, 8, 8>*)L[l]->ptrs[3];
    for (int k = 0; k < 2; ++k) {
      A[r][c + k] = (float)a->e[k];
      B[r][c + k] = (float)b->e[k];
      C[r][c + k] = Acc ? (float)cm->e[k] : 0.0f;
    }
  }
  for (int l = 0; l < kSimd; ++l) {
    int r, c;
    mma_coord(l, r, c);
    auto* d = (metal::simdgroup_matrix<TD, 8, 8>*)L[l]->ptrs[0];
    for (int k = 0; k < 2; ++k) {
      float s = C[r][c + k];
      for (int j = 0; j < 8; ++j) s = __builtin_fmaf(A[r][j], B[j][c + k], s);
      d->e[k] = TD(s);
    }
  }
  return 0;
}
}  // namespace ks

namespace metal {
template <class TD, class TA, class TB, class TC>
KS_INLINE void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                             const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c,
                                             int line = __builtin_LINE(), int col = __builtin_COLUMN()) {
  ks::Fiber* f = ks_fiber();
  simdgroup_matrix<TA, 8, 8> ca = a;
  simdgroup_matrix<TB, 8, 8> cb = b;
  simdgroup_matrix<TC, 8, 8> cc = c;  // copies: d may alias a, b or c
  f->ptrs[0] = &d;
  f->ptrs[1] = &ca;
  f->ptrs[2] = &cb;
  f->ptrs[3] = &cc;
  ks_collective(f, ks::exec_mma<TD, TA, TB, TC, true>, line, col);
}
template <class TD, class TA, class TB>
KS_INLINE void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                  const simdgroup_matrix<TB, 8, 8>& b, int line = __builtin_LINE(),
                                  int col = __builtin_COLUMN()) {
  ks::Fiber* f = ks_fiber();
  simdgroup_matrix<TA, 8, 8> ca = a;
  simdgroup_matrix<TB, 8, 8> cb = b;
  f->ptrs[0] = &d;
  f->ptrs[1] = &ca;
  f->ptrs[2] = &cb;
  f->ptrs[3] = nullptr;
  ks_collective(f, ks::exec_mma<TD, TA, TB, TD, false>, line, col);
}
}  // namespace metal
