// ksearch Metal emulation on CUDA, part 5 of 5: simdgroup_matrix<T, 8, 8> and the names MLX's Metal preamble gives
// a kernel body (Limits, elem_to_loc, ceildiv, log1p, ...).
//
// simdgroup_matrix: each lane holds the two elements Apple's layout gives it (the layout MLX's steel kernels rely
// on): lane l holds row (q & 4) + (l / 2) % 4 and columns (q & 2) * 2 + (l % 2) * 2 + {0, 1}, with q = l / 4.
// thread_elements() exposes them. Products gather their operands with warp shuffles and accumulate in float.
namespace metal {
namespace detail {
KS_HD constexpr int frag_row(unsigned lane) { return (int)(((lane / 4u) & 4u) + (lane / 2u) % 4u); }
KS_HD constexpr int frag_col(unsigned lane) { return (int)(((lane / 4u) & 2u) * 2u + (lane % 2u) * 2u); }
// The lane holding element (r, c) (c and c ^ 1 share a lane).
KS_HD constexpr int frag_lane(int r, int c) { return (r & 4) * 4 + ((c >> 2) & 1) * 8 + (r & 3) * 2 + ((c >> 1) & 1); }
KS_HD constexpr bool frag_layout_is_a_bijection() {
  for (unsigned l = 0; l < 32u; ++l) {
    if (frag_lane(frag_row(l), frag_col(l)) != (int)l || frag_lane(frag_row(l), frag_col(l) + 1) != (int)l) return false;
  }
  return true;
}
static_assert(frag_layout_is_a_bijection(), "simdgroup_matrix: frag_lane must invert frag_row / frag_col");
}  // namespace detail

template <class T, int C, int R> struct simdgroup_matrix {
  static_assert(C == 8 && R == 8, "simdgroup_matrix: only 8x8 matrices exist");
  static_assert(detail::is_fl<T>::value, "simdgroup_matrix: the element type must be half, bfloat or float");
  vec<T, 2> e;  // this lane's elements: (frag_row, frag_col) and (frag_row, frag_col + 1)
  simdgroup_matrix() = default;
  KS_D explicit simdgroup_matrix(T diagonal) {
    const unsigned l = detail::lane_id();
    const int r = detail::frag_row(l), c = detail::frag_col(l);
    e = vec<T, 2>(r == c ? diagonal : T(0), r == c + 1 ? diagonal : T(0));
  }
  KS_D vec<T, 2>& thread_elements() { return e; }
  KS_D const vec<T, 2>& thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int C, int R> KS_D simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, C, R> m;
  m.e = vec<T, 2>(value);
  return m;
}

// Element (r, c) of the matrix is src[(origin.y + r) * elements_per_row + origin.x + c]; with `transpose`,
// element (r, c) is the source's (c, r) of the same block.
template <class T, class U> KS_D void simdgroup_load(simdgroup_matrix<T, 8, 8>& d, const U* src, ulong elements_per_row = 8,
                                                     ulong2 origin = ulong2(0ul, 0ul), bool transpose = false) {
  const unsigned l = detail::lane_id();
  const long r = detail::frag_row(l), c = detail::frag_col(l);
  const U* base = src + (long)origin.y * (long)elements_per_row + (long)origin.x;
  const long epr = (long)elements_per_row;
  if (!transpose) {
    d.e = vec<T, 2>(T(base[r * epr + c]), T(base[r * epr + c + 1]));
  } else {
    d.e = vec<T, 2>(T(base[c * epr + r]), T(base[(c + 1) * epr + r]));
  }
}
template <class T, class U> KS_D void simdgroup_store(const simdgroup_matrix<T, 8, 8>& a, U* dst, ulong elements_per_row = 8,
                                                      ulong2 origin = ulong2(0ul, 0ul), bool transpose = false) {
  const unsigned l = detail::lane_id();
  const long r = detail::frag_row(l), c = detail::frag_col(l);
  U* base = dst + (long)origin.y * (long)elements_per_row + (long)origin.x;
  const long epr = (long)elements_per_row;
  if (!transpose) {
    base[r * epr + c] = U(a.e.x);
    base[r * epr + c + 1] = U(a.e.y);
  } else {
    base[c * epr + r] = U(a.e.x);
    base[(c + 1) * epr + r] = U(a.e.y);
  }
}

// d = a * b + c (8x8 products gathered with warp shuffles, accumulated in float, rounded once to d's type).
template <class T, class A, class B, class U>
KS_D void simdgroup_multiply_accumulate(simdgroup_matrix<T, 8, 8>& d, const simdgroup_matrix<A, 8, 8>& a,
                                        const simdgroup_matrix<B, 8, 8>& b, const simdgroup_matrix<U, 8, 8>& c) {
  const unsigned l = detail::lane_id();
  const int r = detail::frag_row(l), col = detail::frag_col(l);
  float acc0 = float(c.e.x), acc1 = float(c.e.y);
  for (int k = 0; k < 8; k += 2) {
    const vec<A, 2> ar = detail::shfl(a.e, detail::frag_lane(r, k));        // a[r][k], a[r][k + 1]
    const vec<B, 2> b0 = detail::shfl(b.e, detail::frag_lane(k, col));      // b[k][col], b[k][col + 1]
    const vec<B, 2> b1 = detail::shfl(b.e, detail::frag_lane(k + 1, col));  // b[k + 1][col], b[k + 1][col + 1]
    acc0 += float(ar.x) * float(b0.x) + float(ar.y) * float(b1.x);
    acc1 += float(ar.x) * float(b0.y) + float(ar.y) * float(b1.y);
  }
  d.e = vec<T, 2>(T(acc0), T(acc1));
}
template <class T, class A, class B>
KS_D void simdgroup_multiply(simdgroup_matrix<T, 8, 8>& d, const simdgroup_matrix<A, 8, 8>& a,
                             const simdgroup_matrix<B, 8, 8>& b) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<T, 8, 8>(T(0)));
}

// ---- MLX's Metal preamble (mlx/backend/metal/kernels/utils.h): the same names with the same meaning ----
// MLX spells the members as values (Limits<T>::max); CUDA cannot read a class-typed static member from device code,
// so they are functions here and the translator writes `Limits<T>::max()`.
template <class U> struct Limits {
  KS_HD static constexpr U max() { return detail::is_fl<U>::value ? numeric_limits<U>::infinity() : numeric_limits<U>::max(); }
  KS_HD static constexpr U min() {
    return detail::is_fl<U>::value ? U(-numeric_limits<U>::infinity()) : numeric_limits<U>::min();
  }
  KS_HD static constexpr U finite_max() { return numeric_limits<U>::max(); }
  KS_HD static constexpr U finite_min() { return detail::is_fl<U>::value ? U(-numeric_limits<U>::max()) : numeric_limits<U>::min(); }
};
template <class U> struct WorkPerThread { static constexpr int n = 8 / sizeof(U); };
template <class T, class U> KS_HD constexpr T ceildiv(T n, U m) { return (n + m - 1) / m; }
template <class IdxT = long, class S = long> KS_D IdxT elem_to_loc(IdxT elem, const int* shape, const S* strides, int ndim) {
  IdxT loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % shape[i]) * IdxT(strides[i]);
    elem /= shape[i];
  }
  return loc;
}
template <class IdxT = long, class S = long> KS_D IdxT elem_to_loc(uint3 elem, const int* shape, const S* strides, int ndim) {
  IdxT loc = elem.x * IdxT(strides[ndim - 1]) + elem.y * IdxT(strides[ndim - 2]);
  for (int d = ndim - 3; d >= 0; --d) {
    loc += (elem.z % shape[d]) * IdxT(strides[d]);
    elem.z /= shape[d];
  }
  return loc;
}
template <class IdxT = long, class S = long> KS_D IdxT elem_to_loc_1(uint elem, const S& stride) { return elem * IdxT(stride); }
template <class IdxT = long, class S = long> KS_D IdxT elem_to_loc_2(uint2 elem, const S* strides) {
  return elem.x * IdxT(strides[1]) + elem.y * IdxT(strides[0]);
}
template <class IdxT = long, class S = long> KS_D IdxT elem_to_loc_3(uint3 elem, const S* strides) {
  return elem.x * IdxT(strides[2]) + elem.y * IdxT(strides[1]) + elem.z * IdxT(strides[0]);
}
KS_D float log1p(float x) { return log1pf(x); }
KS_D bfloat log1p(bfloat x) { return bfloat(log1pf(float(x))); }
template <class U, class T> KS_D U cast_to(T x) { return static_cast<U>(x); }
}  // namespace metal
