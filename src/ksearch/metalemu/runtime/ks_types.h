// ksearch Metal emulation: scalar and vector types of MSL on a host C++ compiler.
// half and bfloat are classes holding IEEE binary16 / bfloat16 bits (clang 14 has no usable _Float16 on x86-64):
// every operation on them computes in float and rounds to nearest even, which is what a single half operation does.
// Vectors of the other scalar types are clang ext-vectors (MSL's swizzle rules); vectors of half and bfloat are the
// class hvec with the same members, multi-letter swizzles included.
#pragma once
#include "ks_abi.h"

#define KS_INLINE __attribute__((always_inline)) inline
#define KS_LIKELY(x) __builtin_expect(!!(x), 1)
#define KS_UNLIKELY(x) __builtin_expect(!!(x), 0)

#include "../../knowledge/msl_scalars.h"  // MSL's scalar type names, one copy with the syntax-check shim
typedef __UINTPTR_TYPE__ uintptr_t;
typedef __INTPTR_TYPE__ intptr_t;

namespace ks {
// ---- type traits (no standard library in a kernel translation unit) ----
// Kept apart from the syntax-check shim's traits (knowledge/msl_shim.h): those are MSL's metal:: names for checked
// kernel bodies; these are the runtime's own, a larger set (integral_constant, reference and pointer traits).
template <class T, T v> struct integral_constant { static constexpr T value = v; };
typedef integral_constant<bool, true> true_type;
typedef integral_constant<bool, false> false_type;
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;
template <bool B, class T, class F> struct conditional { typedef T type; };
template <class T, class F> struct conditional<false, T, F> { typedef F type; };
template <bool B, class T, class F> using conditional_t = typename conditional<B, T, F>::type;
template <class A, class B> struct is_same : false_type {};
template <class A> struct is_same<A, A> : true_type {};
template <class A, class B> constexpr bool is_same_v = is_same<A, B>::value;
template <class T> struct remove_cv { typedef T type; };
template <class T> struct remove_cv<const T> { typedef T type; };
template <class T> struct remove_cv<volatile T> { typedef T type; };
template <class T> struct remove_cv<const volatile T> { typedef T type; };
template <class T> using remove_cv_t = typename remove_cv<T>::type;
template <class T> struct remove_reference { typedef T type; };
template <class T> struct remove_reference<T&> { typedef T type; };
template <class T> struct remove_reference<T&&> { typedef T type; };
template <class T> using remove_reference_t = typename remove_reference<T>::type;
template <class T> using decay_t = remove_cv_t<remove_reference_t<T>>;
template <class T> struct remove_pointer { typedef T type; };
template <class T> struct remove_pointer<T*> { typedef T type; };
template <class T> struct is_pointer : false_type {};
template <class T> struct is_pointer<T*> : true_type {};
template <class T> struct is_reference : false_type {};
template <class T> struct is_reference<T&> : true_type {};
template <class T> struct is_reference<T&&> : true_type {};
template <class T> struct is_const : false_type {};
template <class T> struct is_const<const T> : true_type {};
template <class T> struct is_array : false_type {};
template <class T, unsigned long N> struct is_array<T[N]> : true_type {};
template <class T> T&& declval();

template <class T> struct is_integral_base : false_type {};
#define KS_INTEGRAL(T) template <> struct is_integral_base<T> : true_type {};
KS_INTEGRAL(bool) KS_INTEGRAL(char) KS_INTEGRAL(signed char) KS_INTEGRAL(unsigned char) KS_INTEGRAL(short)
KS_INTEGRAL(unsigned short) KS_INTEGRAL(int) KS_INTEGRAL(unsigned int) KS_INTEGRAL(long) KS_INTEGRAL(unsigned long)
KS_INTEGRAL(long long) KS_INTEGRAL(unsigned long long)
#undef KS_INTEGRAL
template <class T> constexpr bool is_integral_v = is_integral_base<remove_cv_t<T>>::value;
template <class T> constexpr bool is_builtin_float_v =
    is_same_v<remove_cv_t<T>, float> || is_same_v<remove_cv_t<T>, double> || is_same_v<remove_cv_t<T>, long double>;
template <class T> constexpr bool is_builtin_arith_v = is_integral_v<T> || is_builtin_float_v<T>;
template <class T> constexpr bool is_signed_v = is_builtin_float_v<T> || (is_integral_v<T> && T(-1) < T(0));

template <class To, class From> KS_INLINE constexpr To bit_cast(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "as_type: source and destination must have the same size");
  if constexpr (__is_trivially_copyable(To) && __is_trivially_copyable(From)) {
    return __builtin_bit_cast(To, f);
  } else {  // half/bfloat vectors: their assignment is user-provided (swizzle members), so copy the bytes
    To t;
    __builtin_memcpy(&t, &f, sizeof(To));
    return t;
  }
}

// ---- binary16 and bfloat16 conversions (round to nearest even; NaN stays NaN) ----
KS_INLINE constexpr u16 f2h(float f) {
  u32 x = __builtin_bit_cast(u32, f);
  u32 sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return (u16)(sign | (ax > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (ax >= 0x477FF000u) return (u16)(sign | 0x7C00u);  // at or above 65520: rounds to infinity
  if (ax < 0x38800000u) {                                 // below 2^-14: a subnormal half (or zero)
    if (ax < 0x33000000u) return (u16)sign;
    u32 e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u;
    u32 shift = 126u - e, q = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return (u16)(sign | q);
  }
  u32 r = ax - 0x38000000u, q = r >> 13, rem = r & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return (u16)(sign | q);
}
KS_INLINE constexpr float h2f(u16 h) {
  u32 sign = (u32)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-8f;  // m * 2^-24
    return sign ? -v : v;
  }
  if (e == 31) return __builtin_bit_cast(float, sign | 0x7F800000u | (m << 13));
  return __builtin_bit_cast(float, sign | ((e + 112u) << 23) | (m << 13));
}
KS_INLINE constexpr u16 f2b(float f) {
  u32 x = __builtin_bit_cast(u32, f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (u16)((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return (u16)(x >> 16);
}
KS_INLINE constexpr float b2f(u16 b) { return __builtin_bit_cast(float, (u32)b << 16); }
}  // namespace ks

// ---- half and bfloat ----
namespace ks {
struct bfloat;
struct half {
  u16 bits;
  half() = default;
  KS_INLINE constexpr half(float f) : bits(f2h(f)) {}
  KS_INLINE constexpr half(double f) : bits(f2h((float)f)) {}
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE constexpr half(I i) : bits(f2h((float)i)) {}
  KS_INLINE constexpr half(bfloat b);
  KS_INLINE constexpr operator float() const { return h2f(bits); }
  static KS_INLINE constexpr half from_bits(u16 b) {
    half h{};
    h.bits = b;
    return h;
  }
};
struct bfloat {
  u16 bits;
  bfloat() = default;
  KS_INLINE constexpr bfloat(float f) : bits(f2b(f)) {}
  KS_INLINE constexpr bfloat(double f) : bits(f2b((float)f)) {}
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE constexpr bfloat(I i) : bits(f2b((float)i)) {}
  KS_INLINE constexpr bfloat(half h) : bits(f2b(h2f(h.bits))) {}
  KS_INLINE constexpr operator float() const { return b2f(bits); }
  static KS_INLINE constexpr bfloat from_bits(u16 b) {
    bfloat h{};
    h.bits = b;
    return h;
  }
};
KS_INLINE constexpr half::half(bfloat b) : bits(f2h(b2f(b.bits))) {}

template <class T> constexpr bool is_f16_v = is_same_v<remove_cv_t<T>, half> || is_same_v<remove_cv_t<T>, bfloat>;
template <class T> constexpr bool is_float_v = is_builtin_float_v<T> || is_f16_v<T>;
template <class T> constexpr bool is_scalar_v = is_builtin_arith_v<T> || is_f16_v<T>;

// The result type of `H op U` for a 16-bit float H and a builtin scalar U: C's usual arithmetic conversions (a
// floating operand wins; Metal has no double, so double literals act as float).
template <class H, class U> using f16_mix_t = conditional_t<is_builtin_float_v<U>, float, H>;

#define KS_F16_BINOP(H, op)                                                                                        \
  KS_INLINE constexpr H operator op(H a, H b) { return H(float(a) op float(b)); }                                  \
  template <class U, enable_if_t<is_builtin_arith_v<U>, int> = 0>                                                  \
  KS_INLINE constexpr f16_mix_t<H, U> operator op(H a, U b) { return f16_mix_t<H, U>(float(a) op (float)b); }      \
  template <class U, enable_if_t<is_builtin_arith_v<U>, int> = 0>                                                  \
  KS_INLINE constexpr f16_mix_t<H, U> operator op(U a, H b) { return f16_mix_t<H, U>((float)a op float(b)); }      \
  template <class U> KS_INLINE constexpr H& operator op##=(H & a, const U & b) {                                   \
    a = H(float(a) op(float) b);                                                                                   \
    return a;                                                                                                      \
  }
#define KS_F16_CMP(H, op)                                                                                          \
  KS_INLINE constexpr bool operator op(H a, H b) { return float(a) op float(b); }                                  \
  template <class U, enable_if_t<is_builtin_arith_v<U>, int> = 0>                                                  \
  KS_INLINE constexpr bool operator op(H a, U b) { return float(a) op(float) b; }                                  \
  template <class U, enable_if_t<is_builtin_arith_v<U>, int> = 0>                                                  \
  KS_INLINE constexpr bool operator op(U a, H b) { return (float)a op float(b); }
#define KS_F16_OPS(H)                                                                                              \
  KS_F16_BINOP(H, +) KS_F16_BINOP(H, -) KS_F16_BINOP(H, *) KS_F16_BINOP(H, /)                                      \
  KS_F16_CMP(H, <) KS_F16_CMP(H, >) KS_F16_CMP(H, <=) KS_F16_CMP(H, >=) KS_F16_CMP(H, ==) KS_F16_CMP(H, !=)        \
  KS_INLINE constexpr H operator-(H a) { return H::from_bits((u16)(a.bits ^ 0x8000u)); }                           \
  KS_INLINE constexpr H operator+(H a) { return a; }                                                               \
  KS_INLINE constexpr H& operator++(H& a) { return a = H(float(a) + 1.0f); }                                       \
  KS_INLINE constexpr H& operator--(H& a) { return a = H(float(a) - 1.0f); }                                       \
  KS_INLINE constexpr H operator++(H& a, int) { H o = a; a = H(float(a) + 1.0f); return o; }                      \
  KS_INLINE constexpr H operator--(H& a, int) { H o = a; a = H(float(a) - 1.0f); return o; }
KS_F16_OPS(half)
KS_F16_OPS(bfloat)
#undef KS_F16_OPS
#undef KS_F16_CMP
#undef KS_F16_BINOP
#define KS_F16_CROSS(op)                                                                                           \
  KS_INLINE constexpr float operator op(half a, bfloat b) { return float(a) op float(b); }                         \
  KS_INLINE constexpr float operator op(bfloat a, half b) { return float(a) op float(b); }
KS_F16_CROSS(+) KS_F16_CROSS(-) KS_F16_CROSS(*) KS_F16_CROSS(/)
#undef KS_F16_CROSS
}  // namespace ks
using ks::bfloat;
using ks::half;

// ---- vectors ----
namespace ks {
template <class T, int N> using ev = T __attribute__((ext_vector_type(N)));
template <class E, int N> struct hvec;

template <class T, int N> struct vsel { typedef ev<T, N> type; };
template <int N> struct vsel<half, N> { typedef hvec<half, N> type; };
template <int N> struct vsel<bfloat, N> { typedef hvec<bfloat, N> type; };
template <int N> struct vsel<bool, N> { typedef ev<int, N> type; };  // clang has no bool ext-vectors; comparisons give int
template <class T, int N> using vec = typename vsel<remove_cv_t<T>, N>::type;

// vinfo: is V a vector, its element type and length.
template <class V> struct vinfo { static constexpr bool is = false; static constexpr int n = 1; typedef V elem; };
template <class T, int N> struct vinfo<ev<T, N>> { static constexpr bool is = true; static constexpr int n = N; typedef T elem; };
template <class E, int N> struct vinfo<hvec<E, N>> { static constexpr bool is = true; static constexpr int n = N; typedef E elem; };
template <class V> constexpr bool is_vec_v = vinfo<remove_cv_t<V>>::is;

// Swizzle of a half/bfloat vector: a view of the vector's storage naming components I...
template <class E, int S, int... I> struct swz {
  E v[S];
  static constexpr int M = sizeof(int[sizeof...(I)]) / sizeof(int);
  KS_INLINE operator hvec<E, M>() const;
  template <int... J> KS_INLINE swz& operator=(const swz<E, S, J...>& o) { return *this = hvec<E, M>(o); }
  KS_INLINE swz& operator=(const swz& o) { return *this = hvec<E, M>(o); }
  KS_INLINE swz& operator=(const hvec<E, M>& o);
};
template <class E, int S, int... I> struct vinfo<swz<E, S, I...>> {
  static constexpr bool is = true;
  static constexpr int n = sizeof...(I);
  typedef E elem;
};

#define KS_HVEC_COMMON(N)                                                                                          \
  hvec() = default;                                                                                                \
  template <class U, enable_if_t<is_scalar_v<U>, int> = 0> KS_INLINE constexpr hvec(U s) {                         \
    for (int i = 0; i < N; ++i) v[i] = E(s);                                                                       \
  }                                                                                                                \
  template <class U> KS_INLINE explicit hvec(const ev<U, N>& o) {                                                  \
    for (int i = 0; i < N; ++i) v[i] = E(o[i]);                                                                    \
  }                                                                                                                \
  template <class F, enable_if_t<!is_same_v<F, E>, int> = 0> KS_INLINE explicit hvec(const hvec<F, N>& o) {        \
    for (int i = 0; i < N; ++i) v[i] = E(float(o.v[i]));                                                           \
  }                                                                                                                \
  template <class U> KS_INLINE explicit operator ev<U, N>() const {                                                \
    ev<U, N> r;                                                                                                    \
    for (int i = 0; i < N; ++i) r[i] = (U)(float)v[i];                                                             \
    return r;                                                                                                      \
  }                                                                                                                \
  KS_INLINE hvec& operator=(const hvec& o) {                                                                       \
    for (int i = 0; i < N; ++i) v[i] = o.v[i];                                                                     \
    return *this;                                                                                                  \
  }                                                                                                                \
  hvec(const hvec&) = default;                                                                                     \
  KS_INLINE constexpr E& operator[](int i) { return v[i]; }                                                        \
  KS_INLINE constexpr const E& operator[](int i) const { return v[i]; }

template <class E> struct hvec<E, 2> {
  union {
    E v[2];
    struct { E x, y; };
    struct { E r, g; };
#include "ks_swizzle2.h"
  };
  KS_HVEC_COMMON(2)
};
template <class E> struct alignas(4 * sizeof(E)) hvec<E, 3> {
  union {
    E v[3];
    struct { E x, y, z; };
    struct { E r, g, b; };
#include "ks_swizzle3.h"
  };
  KS_HVEC_COMMON(3)
};
template <class E> struct alignas(4 * sizeof(E)) hvec<E, 4> {
  union {
    E v[4];
    struct { E x, y, z, w; };
    struct { E r, g, b, a; };
#include "ks_swizzle4.h"
  };
  KS_HVEC_COMMON(4)
};
#undef KS_HVEC_COMMON
static_assert(sizeof(hvec<half, 4>) == 8 && alignof(hvec<half, 4>) == 8, "half4 layout");
static_assert(sizeof(hvec<half, 3>) == 8 && sizeof(hvec<half, 2>) == 4, "half2/half3 layout");

template <class E, int S, int... I> KS_INLINE swz<E, S, I...>::operator hvec<E, M>() const {
  hvec<E, M> r;
  int k = 0;
  ((r.v[k++] = v[I]), ...);
  return r;
}
template <class E, int S, int... I> KS_INLINE swz<E, S, I...>& swz<E, S, I...>::operator=(const hvec<E, M>& o) {
  int k = 0;
  ((v[I] = o.v[k++]), ...);
  return *this;
}

// hvec arithmetic: component-wise in float, rounded per component; a scalar operand is splatted.
template <class X> struct hv_of { typedef void type; };
template <class E, int N> struct hv_of<hvec<E, N>> { typedef hvec<E, N> type; };
template <class E, int S, int... I> struct hv_of<swz<E, S, I...>> { typedef hvec<E, sizeof...(I)> type; };
template <class X> using hv_t = typename hv_of<remove_cv_t<X>>::type;
template <class A, class B> struct hv_pair { typedef void type; };
template <class A, class B> using hv_res_t =
    conditional_t<!is_same_v<hv_t<A>, void>, hv_t<A>, hv_t<B>>;
template <class A, class B> constexpr bool hv_ok_v =
    (!is_same_v<hv_t<A>, void> || !is_same_v<hv_t<B>, void>) &&
    (is_same_v<hv_t<A>, void> || is_same_v<hv_t<B>, void> || is_same_v<hv_t<A>, hv_t<B>>) &&
    (!is_same_v<hv_t<A>, void> || is_scalar_v<A>) && (!is_same_v<hv_t<B>, void> || is_scalar_v<B>);
template <class V, class X> KS_INLINE constexpr float hv_at(const X& x, int i) {
  if constexpr (is_same_v<hv_t<X>, void>) return (float)x;
  else return (float)V(x).v[i];
}
#define KS_HV_BINOP(op)                                                                                            \
  template <class A, class B, enable_if_t<hv_ok_v<A, B>, int> = 0>                                                 \
  KS_INLINE hv_res_t<A, B> operator op(const A& a, const B& b) {                                                   \
    typedef hv_res_t<A, B> V;                                                                                      \
    V r;                                                                                                           \
    for (int i = 0; i < vinfo<V>::n; ++i) r.v[i] = typename vinfo<V>::elem(hv_at<V>(a, i) op hv_at<V>(b, i));      \
    return r;                                                                                                      \
  }                                                                                                                \
  template <class E, int N, class B> KS_INLINE hvec<E, N>& operator op##=(hvec<E, N>& a, const B& b) {             \
    return a = a op b;                                                                                             \
  }
KS_HV_BINOP(+) KS_HV_BINOP(-) KS_HV_BINOP(*) KS_HV_BINOP(/)
#undef KS_HV_BINOP
#define KS_HV_CMP(op)                                                                                              \
  template <class A, class B, enable_if_t<hv_ok_v<A, B>, int> = 0>                                                 \
  KS_INLINE ev<int, vinfo<hv_res_t<A, B>>::n> operator op(const A& a, const B& b) {                                \
    typedef hv_res_t<A, B> V;                                                                                      \
    ev<int, vinfo<V>::n> r;                                                                                        \
    for (int i = 0; i < vinfo<V>::n; ++i) r[i] = (hv_at<V>(a, i) op hv_at<V>(b, i)) ? -1 : 0;                      \
    return r;                                                                                                      \
  }
KS_HV_CMP(<) KS_HV_CMP(>) KS_HV_CMP(<=) KS_HV_CMP(>=) KS_HV_CMP(==) KS_HV_CMP(!=)
#undef KS_HV_CMP
template <class E, int N> KS_INLINE hvec<E, N> operator-(const hvec<E, N>& a) {
  hvec<E, N> r;
  for (int i = 0; i < N; ++i) r.v[i] = -a.v[i];
  return r;
}
template <class E, int N> KS_INLINE hvec<E, N> operator+(const hvec<E, N>& a) { return a; }

// ---- components of MSL values (for constructors and conversions) ----
template <class X> struct proxy_value { typedef X type; };  // specialised for threadgroup references (ks_mem.h)
template <class E, int S, int... I> struct proxy_value<swz<E, S, I...>> { typedef hvec<E, sizeof...(I)> type; };
template <class X> using val_t = typename proxy_value<decay_t<X>>::type;
template <class X> KS_INLINE constexpr int ncomp() { return vinfo<val_t<X>>::n; }
template <class T, class X> KS_INLINE constexpr T comp(const X& x, int i) {
  typedef val_t<X> V;
  if constexpr (vinfo<V>::is) {
    if constexpr (is_same_v<hv_t<V>, void>) return (T)((const V&)x)[i];
    else return T(hv_t<V>(x).v[i]);
  } else {
    return (T)(V)x;
  }
}
template <class T, int N> KS_INLINE constexpr void put_comp(vec<T, N>& out, int i, T c) {
  if constexpr (is_same_v<hv_t<vec<T, N>>, void>) out[i] = c;
  else out.v[i] = c;
}
// MSL vector construction: one scalar splats; one vector of the same length converts; otherwise the components
// of the arguments, in order, must add up to exactly N.
template <class T, int N, class... A> KS_INLINE constexpr vec<T, N> make(const A&... a) {
  constexpr int total = (0 + ... + ncomp<A>());
  static_assert(sizeof...(A) == 1 ? (total == 1 || total == N) : total == N,
                "MSL vector constructor: the components of the arguments do not add up to the vector's size");
  typedef conditional_t<is_same_v<T, bool>, int, T> C;
  vec<T, N> out{};
  int i = 0;
  if constexpr (sizeof...(A) == 1 && total == 1) {
    C s = ((comp<C>(a, 0)), ...);
    for (int k = 0; k < N; ++k) put_comp<T, N>(out, k, (T)s);
  } else {
    auto one = [&](const auto& x) {
      for (int k = 0; k < ncomp<decltype(x)>(); ++k) put_comp<T, N>(out, i++, (T)comp<C>(x, k));
    };
    (one(a), ...);
  }
  return out;
}
// static_cast / C-style cast to a vector type: conversion of each component (clang would reinterpret the bits).
template <class V, class X> KS_INLINE constexpr V vcast(const X& x) {
  return make<typename vinfo<V>::elem, vinfo<V>::n>(x);
}

// ---- the type of `c ? b : d` under MSL's conversions (half and bfloat included) ----
template <class A, class B, class = void> struct common { typedef decay_t<decltype(true ? declval<A>() : declval<B>())> type; };
template <class A, class B> using common_t = typename common<decay_t<A>, decay_t<B>>::type;
template <class A, class B> struct scalar_common {
  typedef conditional_t<
      is_same_v<A, B>, A,
      conditional_t<is_builtin_float_v<A> || is_builtin_float_v<B>, float,
                    conditional_t<is_f16_v<A> && is_f16_v<B>, float,
                                  conditional_t<is_f16_v<A>, A,
                                                conditional_t<is_f16_v<B>, B, decltype(A() + B())>>>>>
      type;
};
template <class A, class B>
struct common<A, B, enable_if_t<is_scalar_v<A> && is_scalar_v<B> && !is_same_v<A, B>>> {
  typedef typename scalar_common<A, B>::type type;
};
template <class A, class B>
struct common<A, B, enable_if_t<vinfo<A>::is && is_scalar_v<B>>> { typedef conditional_t<is_same_v<hv_t<A>, void>, A, hv_t<A>> type; };
template <class A, class B>
struct common<A, B, enable_if_t<is_scalar_v<A> && vinfo<B>::is>> { typedef conditional_t<is_same_v<hv_t<B>, void>, B, hv_t<B>> type; };

template <class B, class C, class X> KS_INLINE constexpr decltype(auto) tc(X&& x) {
  typedef val_t<B> VB;
  typedef val_t<C> VC;
  if constexpr (is_same_v<decay_t<B>, decay_t<C>>) {
    if constexpr (is_reference<X>::value) return static_cast<X&&>(x);
    else return decay_t<X>(static_cast<X&&>(x));
  } else {
    typedef common_t<VB, VC> R;
    return R(static_cast<X&&>(x));
  }
}
// `auto v = <threadgroup element>` must copy the value, not the reference to threadgroup memory.
template <class X> KS_INLINE constexpr auto val(X&& x) {
  typedef decay_t<X> D;
  if constexpr (is_same_v<val_t<D>, D>) return static_cast<X&&>(x);
  else return val_t<D>(x);
}

// ---- type codes for the Python side's argument checks: kind | size << 8 ----
enum : int { kTypeOther = 0, kTypeFloat = 1, kTypeSigned = 2, kTypeUnsigned = 3, kTypeBool = 4, kTypeHalf = 5,
             kTypeBfloat = 6 };
template <class T> KS_INLINE constexpr int type_code() {
  typedef remove_cv_t<T> U;
  int kind = is_same_v<U, half> ? kTypeHalf
             : is_same_v<U, bfloat> ? kTypeBfloat
             : is_same_v<U, bool> ? kTypeBool
             : is_builtin_float_v<U> ? kTypeFloat
             : is_integral_v<U> ? (is_signed_v<U> ? kTypeSigned : kTypeUnsigned)
             : kTypeOther;
  return kind | (int)(sizeof(U) << 8);
}
}  // namespace ks

// ---- the MSL vector type names ----
#define KS_VEC(T, NAME) \
  typedef ks::vec<T, 2> NAME##2; typedef ks::vec<T, 3> NAME##3; typedef ks::vec<T, 4> NAME##4;
KS_VEC(float, float) KS_VEC(half, half) KS_VEC(bfloat, bfloat) KS_VEC(int, int) KS_VEC(uint, uint)
KS_VEC(short, short) KS_VEC(ushort, ushort) KS_VEC(char, char) KS_VEC(uchar, uchar) KS_VEC(long, long)
KS_VEC(ulong, ulong) KS_VEC(bool, bool)
#undef KS_VEC
typedef float2 packed_float2 __attribute__((aligned(4)));
typedef float4 packed_float4 __attribute__((aligned(4)));
typedef int2 packed_int2 __attribute__((aligned(4)));
typedef int4 packed_int4 __attribute__((aligned(4)));
typedef uint2 packed_uint2 __attribute__((aligned(4)));
typedef uint4 packed_uint4 __attribute__((aligned(4)));
typedef ks::hvec<half, 2> packed_half2;
typedef ks::hvec<half, 4> packed_half4 __attribute__((aligned(2)));
