// ksearch Metal emulation: the metal:: math library (metal::fast and metal::precise are the same functions here:
// correctly rounded host libm results; Apple's fast-math approximations are not reproduced).
// Every function is a template over its argument types: scalars (float, half, bfloat, integers), vectors (computed
// per component) and threadgroup references; half and bfloat compute in float and round the result.
#pragma once
#include "ks_types.h"

namespace ks {
// Applies F per component. F has `float operator()(float...)` and, when it accepts integers (int_ok), templates
// for them; integer arguments to a float-only function are computed in float.
template <class F, class T> KS_INLINE auto apply_scalar1(T x) {
  if constexpr (is_f16_v<T>) return T(F{}(float(x)));
  else if constexpr (is_integral_v<T>) {
    if constexpr (F::int_ok) return F{}(x);
    else return F{}((float)x);
  } else return F{}((float)x);
}
template <class F, class X> KS_INLINE auto apply1(const X& xin) {
  typedef val_t<X> V;
  if constexpr (vinfo<V>::is) {
    typedef conditional_t<is_same_v<hv_t<V>, void>, V, hv_t<V>> W;
    W x = W(xin);
    typedef typename vinfo<W>::elem E;
    typedef decltype(apply_scalar1<F>(E())) R;
    vec<R, vinfo<W>::n> r;
    for (int i = 0; i < vinfo<W>::n; ++i) put_comp<R, vinfo<W>::n>(r, i, apply_scalar1<F>(E(x[i])));
    return r;
  } else {
    return apply_scalar1<F>(V(xin));
  }
}
template <class F, class T> KS_INLINE T apply_scalar_n(T a, T b, T c) {
  if constexpr (is_f16_v<T>) return T(F{}(float(a), float(b), float(c)));
  else if constexpr (is_integral_v<T> && F::int_ok) return F{}(a, b, c);
  else return (T)F{}((float)a, (float)b, (float)c);
}
// Two or three arguments: converted to their common type (a scalar next to a vector is splatted).
template <class F, class A, class B, class C = float, int K = 2>
KS_INLINE auto apply3(const A& a, const B& b, const C& c) {
  typedef val_t<A> VA;
  typedef val_t<B> VB;
  typedef val_t<C> VC;
  typedef conditional_t<K == 2, common_t<VA, VB>, common_t<common_t<VA, VB>, VC>> R0;
  typedef conditional_t<vinfo<R0>::is && is_integral_v<typename vinfo<R0>::elem> && !F::int_ok,
                         vec<float, vinfo<R0>::n>, conditional_t<is_integral_v<R0> && !F::int_ok, float, R0>> R;
  if constexpr (vinfo<R>::is) {
    typedef typename vinfo<R>::elem E;
    constexpr int N = vinfo<R>::n;
    R r;
    for (int i = 0; i < N; ++i) {
      E x = comp<E>(a, vinfo<VA>::is ? i : 0), y = comp<E>(b, vinfo<VB>::is ? i : 0);
      E z = K == 3 ? comp<E>(c, vinfo<VC>::is ? i : 0) : E(0);
      put_comp<E, N>(r, i, apply_scalar_n<F>(x, y, z));
    }
    return r;
  } else {
    return apply_scalar_n<F>(R(VA(a)), R(VB(b)), K == 3 ? R(VC(c)) : R(0));
  }
}

#define KS_F1(name, expr)                                                                                          \
  struct f_##name {                                                                                                \
    static constexpr bool int_ok = false;                                                                          \
    KS_INLINE float operator()(float x) const { return expr; }                                                     \
  };
#define KS_F2(name, expr, iexpr, iok)                                                                              \
  struct f_##name {                                                                                                \
    static constexpr bool int_ok = iok;                                                                            \
    KS_INLINE float operator()(float x, float y, float) const { return expr; }                                     \
    template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE I operator()(I x, I y, I) const {         \
      return iexpr;                                                                                                \
    }                                                                                                              \
  };
#define KS_F3(name, expr, iexpr, iok)                                                                              \
  struct f_##name {                                                                                                \
    static constexpr bool int_ok = iok;                                                                            \
    KS_INLINE float operator()(float x, float y, float z) const { return expr; }                                   \
    template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE I operator()(I x, I y, I z) const {       \
      return iexpr;                                                                                                \
    }                                                                                                              \
  };
KS_INLINE float fract_f(float x) {
  float r = x - __builtin_floorf(x);
  return r < 0x1.fffffep-1f ? r : 0x1.fffffep-1f;
}
KS_INLINE float sign_f(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x == x ? x : 0.0f; }
KS_F1(exp, __builtin_expf(x)) KS_F1(exp2, __builtin_exp2f(x)) KS_F1(exp10, __builtin_powf(10.0f, x))
KS_F1(log, __builtin_logf(x)) KS_F1(log2, __builtin_log2f(x)) KS_F1(log10, __builtin_log10f(x))
KS_F1(log1p, __builtin_log1pf(x)) KS_F1(expm1, __builtin_expm1f(x))
KS_F1(sqrt, __builtin_sqrtf(x)) KS_F1(rsqrt, 1.0f / __builtin_sqrtf(x)) KS_F1(cbrt, __builtin_cbrtf(x))
KS_F1(sin, __builtin_sinf(x)) KS_F1(cos, __builtin_cosf(x)) KS_F1(tan, __builtin_tanf(x))
KS_F1(asin, __builtin_asinf(x)) KS_F1(acos, __builtin_acosf(x)) KS_F1(atan, __builtin_atanf(x))
KS_F1(sinh, __builtin_sinhf(x)) KS_F1(cosh, __builtin_coshf(x)) KS_F1(tanh, __builtin_tanhf(x))
KS_F1(asinh, __builtin_asinhf(x)) KS_F1(acosh, __builtin_acoshf(x)) KS_F1(atanh, __builtin_atanhf(x))
KS_F1(sinpi, __builtin_sinf(x * 3.14159265358979323846f)) KS_F1(cospi, __builtin_cosf(x * 3.14159265358979323846f))
KS_F1(tanpi, __builtin_tanf(x * 3.14159265358979323846f))
KS_F1(floor, __builtin_floorf(x)) KS_F1(ceil, __builtin_ceilf(x)) KS_F1(round, __builtin_roundf(x))
KS_F1(rint, __builtin_rintf(x)) KS_F1(trunc, __builtin_truncf(x)) KS_F1(fract, fract_f(x))
KS_F1(fabs, __builtin_fabsf(x)) KS_F1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
KS_F1(sign, sign_f(x)) KS_F1(erf, __builtin_erff(x)) KS_F1(erfc, __builtin_erfcf(x))
struct f_abs {
  static constexpr bool int_ok = true;
  KS_INLINE float operator()(float x) const { return __builtin_fabsf(x); }
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE I operator()(I x) const {
    if constexpr (is_signed_v<I>) return x < 0 ? I(-x) : x;
    else return x;
  }
};
KS_F2(pow, __builtin_powf(x, y), x, false) KS_F2(powr, __builtin_powf(x, y), x, false)
KS_F2(atan2, __builtin_atan2f(x, y), x, false) KS_F2(fmod, __builtin_fmodf(x, y), x, false)
KS_F2(copysign, __builtin_copysignf(x, y), x, false) KS_F2(fdim, __builtin_fdimf(x, y), x, false)
KS_F2(divide, x / y, x, false) KS_F2(step, y < x ? 0.0f : 1.0f, x, false)
KS_F2(nextafter, __builtin_nextafterf(x, y), x, false)
KS_F2(fmax, __builtin_fmaxf(x, y), (x < y ? y : x), true) KS_F2(fmin, __builtin_fminf(x, y), (y < x ? y : x), true)
KS_F2(max, __builtin_fmaxf(x, y), (x < y ? y : x), true) KS_F2(min, __builtin_fminf(x, y), (y < x ? y : x), true)
KS_F2(absdiff, __builtin_fabsf(x - y), (x > y ? I(x - y) : I(y - x)), true)
KS_F2(hadd, (x + y) * 0.5f, I((x >> 1) + (y >> 1) + (x & y & 1)), true)
KS_F2(mulhi, x, I(((__int128)x * (__int128)y) >> (8 * sizeof(I))), true)
KS_F3(fma, __builtin_fmaf(x, y, z), I(x * y + z), true) KS_F3(mad, x * y + z, I(x * y + z), true)
KS_F3(mix, x + (y - x) * z, x, false)
KS_F3(clamp, __builtin_fminf(__builtin_fmaxf(x, y), z), (x < y ? y : (z < x ? z : x)), true)
KS_F3(smoothstep, ([&] { float t = __builtin_fminf(__builtin_fmaxf((z - x) / (y - x), 0.0f), 1.0f); return t * t * (3.0f - 2.0f * t); }()), x, false)
KS_F3(fmax3, __builtin_fmaxf(__builtin_fmaxf(x, y), z), (x < y ? (y < z ? z : y) : (x < z ? z : x)), true)
KS_F3(fmin3, __builtin_fminf(__builtin_fminf(x, y), z), (y < x ? (z < y ? z : y) : (z < x ? z : x)), true)
KS_F3(max3, __builtin_fmaxf(__builtin_fmaxf(x, y), z), (x < y ? (y < z ? z : y) : (x < z ? z : x)), true)
KS_F3(min3, __builtin_fminf(__builtin_fminf(x, y), z), (y < x ? (z < y ? z : y) : (z < x ? z : x)), true)
KS_F3(median3, __builtin_fmaxf(__builtin_fminf(x, y), __builtin_fminf(__builtin_fmaxf(x, y), z)),
      (x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y))), true)
KS_F3(fmedian3, __builtin_fmaxf(__builtin_fminf(x, y), __builtin_fminf(__builtin_fmaxf(x, y), z)), x, false)
#undef KS_F1
#undef KS_F2
#undef KS_F3

template <class X> KS_INLINE auto fbits(X x) { return bit_cast<u32>((float)x); }
}  // namespace ks

namespace metal {
#define KS_M1(name) template <class X> KS_INLINE auto name(const X& x) { return ks::apply1<ks::f_##name>(x); }
#define KS_M2(name) \
  template <class A, class B> KS_INLINE auto name(const A& a, const B& b) { return ks::apply3<ks::f_##name>(a, b, 0.0f); }
#define KS_M3(name)                                                                                                \
  template <class A, class B, class C> KS_INLINE auto name(const A& a, const B& b, const C& c) {                   \
    return ks::apply3<ks::f_##name, A, B, C, 3>(a, b, c);                                                          \
  }
#define KS_MATH_ALL                                                                                                \
  KS_M1(exp) KS_M1(exp2) KS_M1(exp10) KS_M1(log) KS_M1(log2) KS_M1(log10) KS_M1(log1p) KS_M1(expm1) KS_M1(sqrt)   \
  KS_M1(rsqrt) KS_M1(cbrt) KS_M1(sin) KS_M1(cos) KS_M1(tan) KS_M1(asin) KS_M1(acos) KS_M1(atan) KS_M1(sinh)        \
  KS_M1(cosh) KS_M1(tanh) KS_M1(asinh) KS_M1(acosh) KS_M1(atanh) KS_M1(sinpi) KS_M1(cospi) KS_M1(tanpi)            \
  KS_M1(floor) KS_M1(ceil) KS_M1(round) KS_M1(rint) KS_M1(trunc) KS_M1(fract) KS_M1(fabs) KS_M1(saturate)          \
  KS_M1(sign) KS_M1(abs) KS_M1(erf) KS_M1(erfc)                                                                    \
  KS_M2(pow) KS_M2(powr) KS_M2(atan2) KS_M2(fmod) KS_M2(copysign) KS_M2(fdim) KS_M2(divide) KS_M2(step)           \
  KS_M2(nextafter) KS_M2(fmax) KS_M2(fmin) KS_M2(max) KS_M2(min) KS_M2(absdiff) KS_M2(hadd) KS_M2(mulhi)           \
  KS_M3(fma) KS_M3(mad) KS_M3(mix) KS_M3(clamp) KS_M3(smoothstep) KS_M3(fmax3) KS_M3(fmin3) KS_M3(max3)           \
  KS_M3(min3) KS_M3(median3) KS_M3(fmedian3)
KS_MATH_ALL
namespace fast {
KS_MATH_ALL
}
namespace precise {
KS_MATH_ALL
}
#undef KS_MATH_ALL
#undef KS_M1
#undef KS_M2
#undef KS_M3

template <class A, class B> KS_INLINE auto abs_diff(const A& a, const B& b) { return absdiff(a, b); }

// ---- predicates and bit functions ----
template <class X> KS_INLINE auto ks_pred(const X& x, bool (*p)(float)) {
  typedef ks::val_t<X> V;
  if constexpr (ks::vinfo<V>::is) {
    ks::vec<bool, ks::vinfo<V>::n> r;
    for (int i = 0; i < ks::vinfo<V>::n; ++i) r[i] = p(ks::comp<float>(x, i)) ? -1 : 0;
    return r;
  } else {
    return p((float)V(x));
  }
}
KS_INLINE bool ks_isnan(float x) { return __builtin_isnan(x); }
KS_INLINE bool ks_isinf(float x) { return __builtin_isinf(x); }
KS_INLINE bool ks_isfinite(float x) { return __builtin_isfinite(x); }
KS_INLINE bool ks_isnormal(float x) { return __builtin_isnormal(x); }
KS_INLINE bool ks_signbit(float x) { return __builtin_signbit(x); }
template <class X> KS_INLINE auto isnan(const X& x) { return ks_pred(x, ks_isnan); }
template <class X> KS_INLINE auto isinf(const X& x) { return ks_pred(x, ks_isinf); }
template <class X> KS_INLINE auto isfinite(const X& x) { return ks_pred(x, ks_isfinite); }
template <class X> KS_INLINE auto isnormal(const X& x) { return ks_pred(x, ks_isnormal); }
template <class X> KS_INLINE auto signbit(const X& x) { return ks_pred(x, ks_signbit); }

template <class X> KS_INLINE bool all(const X& x) {
  typedef ks::val_t<X> V;
  if constexpr (ks::vinfo<V>::is) {
    for (int i = 0; i < ks::vinfo<V>::n; ++i)
      if (!ks::comp<long>(x, i)) return false;
    return true;
  } else {
    return (bool)V(x);
  }
}
template <class X> KS_INLINE bool any(const X& x) {
  typedef ks::val_t<X> V;
  if constexpr (ks::vinfo<V>::is) {
    for (int i = 0; i < ks::vinfo<V>::n; ++i)
      if (ks::comp<long>(x, i)) return true;
    return false;
  } else {
    return (bool)V(x);
  }
}
// select(a, b, c): c ? b : a, per component for a vector condition.
template <class A, class B, class C> KS_INLINE auto select(const A& a, const B& b, const C& c) {
  typedef ks::common_t<ks::val_t<A>, ks::val_t<B>> R;
  typedef ks::val_t<C> VC;
  if constexpr (ks::vinfo<R>::is) {
    typedef typename ks::vinfo<R>::elem E;
    constexpr int N = ks::vinfo<R>::n;
    R r;
    for (int i = 0; i < N; ++i) {
      bool ci = ks::comp<long>(c, ks::vinfo<VC>::is ? i : 0) != 0;
      ks::put_comp<E, N>(r, i, ci ? ks::comp<E>(b, ks::vinfo<ks::val_t<B>>::is ? i : 0)
                                  : ks::comp<E>(a, ks::vinfo<ks::val_t<A>>::is ? i : 0));
    }
    return r;
  } else {
    return (bool)VC(c) ? R(ks::val_t<B>(b)) : R(ks::val_t<A>(a));
  }
}
template <class A, class B> KS_INLINE auto dot(const A& a, const B& b) {
  typedef ks::common_t<ks::val_t<A>, ks::val_t<B>> R;
  typedef typename ks::vinfo<R>::elem E;
  float s = 0.0f;
  for (int i = 0; i < ks::vinfo<R>::n; ++i) s += ks::comp<float>(a, i) * ks::comp<float>(b, i);
  return E(s);
}
template <class A> KS_INLINE auto length_squared(const A& a) { return dot(a, a); }
template <class A> KS_INLINE auto length(const A& a) { return sqrt(dot(a, a)); }
template <class A, class B> KS_INLINE auto distance(const A& a, const B& b) { return length(a - b); }
template <class A> KS_INLINE auto normalize(const A& a) { return a * rsqrt(dot(a, a)); }
template <class A, class B> KS_INLINE auto cross(const A& a, const B& b) {
  return a.yzx * b.zxy - a.zxy * b.yzx;
}
template <class T> KS_INLINE T sincos(T x, T& c) {
  c = cos(x);
  return sin(x);
}
template <class T> KS_INLINE T ldexp(T x, int e) { return T(__builtin_ldexpf((float)x, e)); }
template <class T> KS_INLINE T frexp(T x, int& e) { return T(__builtin_frexpf((float)x, &e)); }
template <class T> KS_INLINE T modf(T x, T& ip) {
  float i;
  float f = __builtin_modff((float)x, &i);
  ip = T(i);
  return T(f);
}
KS_INLINE uint popcount(uint x) { return (uint)__builtin_popcount(x); }
KS_INLINE int popcount(int x) { return __builtin_popcount((uint)x); }
KS_INLINE ulong popcount(ulong x) { return (ulong)__builtin_popcountl(x); }
KS_INLINE long popcount(long x) { return __builtin_popcountl((ulong)x); }
KS_INLINE ushort popcount(ushort x) { return (ushort)__builtin_popcount(x); }
KS_INLINE uint clz(uint x) { return x ? (uint)__builtin_clz(x) : 32u; }
KS_INLINE int clz(int x) { return x ? __builtin_clz((uint)x) : 32; }
KS_INLINE ulong clz(ulong x) { return x ? (ulong)__builtin_clzl(x) : 64ul; }
KS_INLINE uint ctz(uint x) { return x ? (uint)__builtin_ctz(x) : 32u; }
KS_INLINE int ctz(int x) { return x ? __builtin_ctz((uint)x) : 32; }
KS_INLINE ulong ctz(ulong x) { return x ? (ulong)__builtin_ctzl(x) : 64ul; }
KS_INLINE uint reverse_bits(uint x) { return __builtin_bitreverse32(x); }
KS_INLINE uint rotate(uint v, uint i) { return __builtin_rotateleft32(v, i); }
KS_INLINE uint extract_bits(uint x, uint offset, uint bits) {
  return bits >= 32 ? x : (x >> offset) & ((1u << bits) - 1u);
}
KS_INLINE int extract_bits(int x, uint offset, uint bits) {
  return bits >= 32 ? x : (int)((uint)x << (32 - offset - bits)) >> (32 - bits);
}
KS_INLINE uint insert_bits(uint base, uint ins, uint offset, uint bits) {
  uint mask = bits >= 32 ? ~0u : ((1u << bits) - 1u) << offset;
  return (base & ~mask) | ((ins << offset) & mask);
}

template <class To, class From> KS_INLINE constexpr To as_type(const From& f) {
  return ks::bit_cast<To>(ks::val_t<From>(f));
}

// ---- numeric limits ----
template <class T> struct numeric_limits;
#define KS_LIMITS(T, lo_, hi_, lowest_, eps_, inf_, nan_)                                                          \
  template <> struct numeric_limits<T> {                                                                           \
    static constexpr bool is_specialized = true;                                                                   \
    static constexpr T min() { return lo_; }                                                                       \
    static constexpr T max() { return hi_; }                                                                       \
    static constexpr T lowest() { return lowest_; }                                                                \
    static constexpr T epsilon() { return eps_; }                                                                  \
    static constexpr T infinity() { return inf_; }                                                                 \
    static constexpr T quiet_NaN() { return nan_; }                                                                \
  };
KS_LIMITS(float, 1.17549435e-38f, 3.40282347e+38f, -3.40282347e+38f, 1.1920929e-07f, __builtin_inff(),
          __builtin_nanf(""))
KS_LIMITS(half, half::from_bits(0x0400), half::from_bits(0x7BFF), half::from_bits(0xFBFF), half::from_bits(0x1400),
          half::from_bits(0x7C00), half::from_bits(0x7E00))
KS_LIMITS(bfloat, bfloat::from_bits(0x0080), bfloat::from_bits(0x7F7F), bfloat::from_bits(0xFF7F),
          bfloat::from_bits(0x3C00), bfloat::from_bits(0x7F80), bfloat::from_bits(0x7FC0))
KS_LIMITS(bool, false, true, false, false, false, false)
KS_LIMITS(char, (char)-128, (char)127, (char)-128, 0, 0, 0)
KS_LIMITS(signed char, -128, 127, -128, 0, 0, 0)
KS_LIMITS(uchar, 0, 255, 0, 0, 0, 0)
KS_LIMITS(short, -32768, 32767, -32768, 0, 0, 0)
KS_LIMITS(ushort, 0, 65535, 0, 0, 0, 0)
KS_LIMITS(int, -2147483647 - 1, 2147483647, -2147483647 - 1, 0, 0, 0)
KS_LIMITS(uint, 0u, 4294967295u, 0u, 0u, 0u, 0u)
KS_LIMITS(long, -9223372036854775807L - 1, 9223372036854775807L, -9223372036854775807L - 1, 0, 0, 0)
KS_LIMITS(ulong, 0ul, 18446744073709551615ul, 0ul, 0ul, 0ul, 0ul)
#undef KS_LIMITS

// ---- type traits MSL exposes in metal:: ----
using ks::conditional;
using ks::conditional_t;
using ks::enable_if;
using ks::enable_if_t;
using ks::false_type;
using ks::integral_constant;
using ks::is_same;
using ks::is_same_v;
using ks::remove_cv;
using ks::remove_cv_t;
using ks::true_type;
template <class T> struct is_floating_point : ks::integral_constant<bool, ks::is_float_v<T>> {};
template <class T> constexpr bool is_floating_point_v = ks::is_float_v<T>;
template <class T> struct is_integral : ks::integral_constant<bool, ks::is_integral_v<T>> {};
template <class T> constexpr bool is_integral_v = ks::is_integral_v<T>;
template <class T> struct is_arithmetic : ks::integral_constant<bool, ks::is_scalar_v<T>> {};
template <class T> constexpr bool is_arithmetic_v = ks::is_scalar_v<T>;
template <class T> struct is_scalar : ks::integral_constant<bool, ks::is_scalar_v<T>> {};
template <class T> constexpr bool is_scalar_v = ks::is_scalar_v<T>;
template <class T> struct is_vector : ks::integral_constant<bool, ks::vinfo<T>::is> {};
template <class T> constexpr bool is_vector_v = ks::vinfo<T>::is;
template <class T> struct is_signed : ks::integral_constant<bool, ks::is_signed_v<T> || ks::is_f16_v<T>> {};
template <class T> constexpr bool is_signed_v = is_signed<T>::value;
template <class T> struct is_unsigned : ks::integral_constant<bool, ks::is_integral_v<T> && !ks::is_signed_v<T>> {};
template <class T> constexpr bool is_unsigned_v = is_unsigned<T>::value;
template <class T> struct remove_reference : ks::remove_reference<T> {};
template <class T> using remove_reference_t = ks::remove_reference_t<T>;
template <class T, int N> using vec = ks::vec<T, N>;
template <class T> struct make_unsigned;
template <> struct make_unsigned<int> { typedef uint type; };
template <> struct make_unsigned<uint> { typedef uint type; };
template <> struct make_unsigned<long> { typedef ulong type; };
template <> struct make_unsigned<short> { typedef ushort type; };
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;
}  // namespace metal

#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define MAXFLOAT 3.402823466e+38f
#define HUGE_VALF __builtin_inff()
#define HUGE_VALH (half::from_bits(0x7C00))
#define FLT_MAX 3.402823466e+38f
#define FLT_MIN 1.175494351e-38f
#define FLT_EPSILON 1.1920929e-07f
#define HALF_MAX (half::from_bits(0x7BFF))
#define HALF_MIN (half::from_bits(0x0400))
#define HALF_EPSILON (half::from_bits(0x1400))
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295u
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.78539816339744830962f
#define M_1_PI_F 0.31830988618379067154f
#define M_2_PI_F 0.63661977236758134308f
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.43429448190325182765f
#define M_LN2_F 0.69314718055994530942f
#define M_LN10_F 2.30258509299404568402f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.70710678118654752440f
#define M_PI_H (half(3.14159265358979323846f))
#define M_LOG2E_H (half(1.44269504088896340736f))
#define M_LN2_H (half(0.69314718055994530942f))
