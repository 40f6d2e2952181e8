// ksearch Metal emulation: the names MLX's Metal preamble (mlx/backend/metal/kernels/utils.h, prepended to every
// mx.fast.metal_kernel source) gives a kernel body, written anew from what they compute.
#pragma once
#include "ks_matrix.h"

typedef half float16_t;
typedef bfloat bfloat16_t;

#define MLX_MTL_PRAGMA_UNROLL _Pragma("clang loop unroll(full)")
#define MLX_MTL_CONST static constexpr const
#define MTL_CONST const
#define METAL_FUNC inline __attribute__((always_inline))

template <typename U> struct WorkPerThread {
  static_assert(sizeof(U) <= 8, "Type too large");
  static constexpr int n = 8 / sizeof(U);
};

template <typename U> struct Limits {
  static constexpr U max = metal::numeric_limits<U>::max();
  static constexpr U min = metal::numeric_limits<U>::min();
  static constexpr U finite_max = metal::numeric_limits<U>::max();
  static constexpr U finite_min = metal::numeric_limits<U>::min();
};
#define KS_FLOAT_LIMITS(T)                                                                                         \
  template <> struct Limits<T> {                                                                                   \
    static constexpr T max = metal::numeric_limits<T>::infinity();                                                 \
    static constexpr T min = -metal::numeric_limits<T>::infinity();                                                \
    static constexpr T finite_max = metal::numeric_limits<T>::max();                                               \
    static constexpr T finite_min = -metal::numeric_limits<T>::max();                                              \
  };
KS_FLOAT_LIMITS(float)
KS_FLOAT_LIMITS(half)
KS_FLOAT_LIMITS(bfloat)
#undef KS_FLOAT_LIMITS
template <> struct Limits<bool> {
  static constexpr bool max = true;
  static constexpr bool min = false;
};

template <typename IdxT = int64_t, class S, class St>
METAL_FUNC IdxT elem_to_loc(IdxT elem, S shape, St strides, int ndim) {
  IdxT loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % IdxT(shape[i])) * IdxT(strides[i]);
    elem /= IdxT(shape[i]);
  }
  return loc;
}
template <typename IdxT = int64_t, class S, class St>
METAL_FUNC IdxT elem_to_loc(uint3 elem, S shape, St strides, int ndim) {
  IdxT loc = elem.x * IdxT(strides[ndim - 1]) + elem.y * IdxT(strides[ndim - 2]);
  for (int d = ndim - 3; d >= 0; --d) {
    loc += (elem.z % shape[d]) * IdxT(strides[d]);
    elem.z /= shape[d];
  }
  return loc;
}
template <typename IdxT = int64_t> METAL_FUNC IdxT elem_to_loc_1(uint elem, int64_t stride) {
  return elem * IdxT(stride);
}
template <typename IdxT = int64_t, class St> METAL_FUNC IdxT elem_to_loc_2(uint2 elem, St strides) {
  return elem.x * IdxT(strides[1]) + elem.y * IdxT(strides[0]);
}
template <typename IdxT = int64_t, class St> METAL_FUNC IdxT elem_to_loc_3(uint3 elem, St strides) {
  return elem.x * IdxT(strides[2]) + elem.y * IdxT(strides[1]) + elem.z * IdxT(strides[0]);
}
template <typename T, typename U> inline T ceildiv(T N, U M) { return (N + M - 1) / M; }
template <typename U, typename T> inline U cast_to(T val) { return static_cast<U>(val); }
template <bool condition, typename T, typename U> struct ConditionalType { using type = U; };
template <typename T, typename U> struct ConditionalType<true, T, U> { using type = T; };
