// ksearch Metal emulation on CUDA, part 1 of 5: macros, type traits, half and bfloat.
//
// The five parts (scalar, vector, math, simd, mlx) form the header that every translated kernel is compiled with
// (mx.fast.cuda_kernel's header=). They implement the Metal standard library the translator maps MSL names onto:
// every public name here is listed by a concept row of knowledge/data/concepts.yaml (field `msl`).
// Written for NVRTC as MLX runs it (C++17, device code by default) and for plain C++ with cuda_host.h in front.
#ifdef inf
#undef inf  // MLX-CUDA defines `inf` as a macro; Metal code may use the name
#endif
#define KS_HD __host__ __device__ inline
#define KS_D __device__ inline

// Macros MSL sources and MLX's Metal preamble may use.
#undef __METAL_VERSION__
#define __METAL_VERSION__ 310
#undef __METAL__
#define __METAL__ 1
// By their bits: NVRTC, unlike gcc and clang, has no __builtin_huge_valf or __builtin_nanf (both failed every
// kernel's compile on the GPU); __builtin_bit_cast it has.
#undef INFINITY
#define INFINITY (::metal::detail::u2f(0x7f800000u))
#undef NAN
#define NAN (::metal::detail::u2f(0x7fc00000u))
#undef HUGE_VALF
#define HUGE_VALF (::metal::detail::u2f(0x7f800000u))
#undef MAXFLOAT
#define MAXFLOAT 3.402823466e+38f
#undef FLT_MAX
#define FLT_MAX 3.402823466e+38f
#undef FLT_MIN
#define FLT_MIN 1.175494351e-38f
#undef FLT_EPSILON
#define FLT_EPSILON 1.1920928955e-07f
#undef HALF_MAX
#define HALF_MAX ::metal::half::from_bits(0x7bff)
#undef HALF_MIN
#define HALF_MIN ::metal::half::from_bits(0x0400)
#undef M_PI_F
#define M_PI_F 3.14159265358979323846264338327950288f
#undef M_PI_2_F
#define M_PI_2_F 1.57079632679489661923132169163975144f
#undef M_PI_4_F
#define M_PI_4_F 0.785398163397448309615660845819875721f
#undef M_1_PI_F
#define M_1_PI_F 0.318309886183790671537767526745028724f
#undef M_2_PI_F
#define M_2_PI_F 0.636619772367581343075535053490057448f
#undef M_2_SQRTPI_F
#define M_2_SQRTPI_F 1.12837916709551257389615890312154517f
#undef M_E_F
#define M_E_F 2.71828182845904523536028747135266250f
#undef M_LOG2E_F
#define M_LOG2E_F 1.44269504088896340735992468100189214f
#undef M_LOG10E_F
#define M_LOG10E_F 0.434294481903251827651128918916605082f
#undef M_LN2_F
#define M_LN2_F 0.693147180559945309417232121458176568f
#undef M_LN10_F
#define M_LN10_F 2.30258509299404568401799145468436421f
#undef M_SQRT2_F
#define M_SQRT2_F 1.41421356237309504880168872420969808f
#undef M_SQRT1_2_F
#define M_SQRT1_2_F 0.707106781186547524400844362104849039f
#undef METAL_FUNC
#define METAL_FUNC inline
#undef MLX_MTL_PRAGMA_UNROLL
#define MLX_MTL_PRAGMA_UNROLL _Pragma("unroll")

namespace metal {
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;  // 64-bit on both Apple GPUs and CUDA's LP64 hosts

namespace detail {
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <class A, class B> struct same { static constexpr bool value = false; };
template <class A> struct same<A, A> { static constexpr bool value = true; };
template <class T> struct remove_cv { typedef T type; };
template <class T> struct remove_cv<const T> { typedef T type; };
template <class T> struct remove_cv<volatile T> { typedef T type; };
template <class T> struct remove_cv<const volatile T> { typedef T type; };

template <class T> struct is_int { static constexpr bool value = false; };
#define KS_INT(T) template <> struct is_int<T> { static constexpr bool value = true; };
KS_INT(bool) KS_INT(char) KS_INT(signed char) KS_INT(unsigned char) KS_INT(short) KS_INT(unsigned short)
KS_INT(int) KS_INT(unsigned int) KS_INT(long) KS_INT(unsigned long) KS_INT(long long) KS_INT(unsigned long long)
#undef KS_INT

KS_HD constexpr unsigned f2u(float f) { return __builtin_bit_cast(unsigned, f); }
KS_HD constexpr float u2f(unsigned u) { return __builtin_bit_cast(float, u); }

// float -> binary16, round to nearest even (subnormals, overflow to inf, NaN kept quiet).
KS_HD constexpr unsigned short f2h_soft(float f) {
  const unsigned x = f2u(f);
  const unsigned sign = (x >> 16) & 0x8000u;
  const unsigned ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds past 65504
  if (ax < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    if (ax < 0x33000000u) return (unsigned short)sign;  // below half the smallest subnormal
    const unsigned e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    const unsigned shift = 126u - e;  // 14 + 23 - 10 - (e - 127) + 1
    const unsigned q = m >> shift, rem = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1u);
    const unsigned r = q + ((rem > half_ulp || (rem == half_ulp && (q & 1u))) ? 1u : 0u);
    return (unsigned short)(sign | r);
  }
  const unsigned rounded = ax + 0xfffu + ((ax >> 13) & 1u);
  return (unsigned short)(sign | ((rounded - 0x38000000u) >> 13));
}

KS_HD constexpr float h2f_soft(unsigned short h) {
  const unsigned sign = (unsigned)(h & 0x8000u) << 16;
  const unsigned e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return u2f(sign);
    float v = (float)m * 5.9604644775390625e-08f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

KS_HD constexpr unsigned short f2h(float f) {
#ifdef __CUDA_ARCH__
  if (!__builtin_is_constant_evaluated()) return __half_as_ushort(__float2half_rn(f));
#endif
  return f2h_soft(f);
}
KS_HD constexpr float h2f(unsigned short h) {
#ifdef __CUDA_ARCH__
  if (!__builtin_is_constant_evaluated()) return __half2float(__ushort_as_half(h));
#endif
  return h2f_soft(h);
}
// float -> bfloat16, round to nearest even; NaN stays NaN.
KS_HD constexpr unsigned short f2bf(float f) {
  const unsigned x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
KS_HD constexpr float bf2f(unsigned short b) { return u2f((unsigned)b << 16); }
}  // namespace detail

struct bfloat;

// MSL half: binary16 storage; half op half -> half (computed in float and rounded: exact for + - * /),
// half op float -> float, half op integer -> half.
struct half {
  unsigned short bits;
  half() = default;
  KS_HD constexpr half(float f) : bits(detail::f2h(f)) {}
  KS_HD constexpr half(double d) : bits(detail::f2h((float)d)) {}
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>
  KS_HD constexpr half(I i) : bits(detail::f2h((float)i)) {}
  KS_HD explicit constexpr half(bfloat b);
  KS_HD constexpr operator float() const { return detail::h2f(bits); }
  KS_HD static constexpr half from_bits(unsigned short b) { half h{}; h.bits = b; return h; }
};

// MSL bfloat: converts implicitly to float only; arithmetic as for half.
struct bfloat {
  unsigned short bits;
  bfloat() = default;
  KS_HD constexpr bfloat(float f) : bits(detail::f2bf(f)) {}
  KS_HD constexpr bfloat(double d) : bits(detail::f2bf((float)d)) {}
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>
  KS_HD constexpr bfloat(I i) : bits(detail::f2bf((float)i)) {}
  KS_HD explicit constexpr bfloat(half h) : bits(detail::f2bf((float)h)) {}
  KS_HD constexpr operator float() const { return detail::bf2f(bits); }
  KS_HD static constexpr bfloat from_bits(unsigned short b) { bfloat h{}; h.bits = b; return h; }
};
KS_HD constexpr half::half(bfloat b) : bits(detail::f2h((float)b)) {}

typedef half float16_t;
typedef bfloat bfloat16_t;

namespace detail {
template <class T> struct is_f16 { static constexpr bool value = same<T, half>::value || same<T, bfloat>::value; };
template <class T> struct is_scalar {
  static constexpr bool value = is_int<T>::value || is_f16<T>::value || same<T, float>::value || same<T, double>::value;
};
}  // namespace detail

// Binary operators of half / bfloat with themselves, float and integers (exact overloads, so that no builtin
// candidate reached through a conversion makes a call ambiguous).
#define KS_F16_OPS(H)                                                                                          \
  KS_HD constexpr H operator+(H a, H b) { return H((float)a + (float)b); }                                     \
  KS_HD constexpr H operator-(H a, H b) { return H((float)a - (float)b); }                                     \
  KS_HD constexpr H operator*(H a, H b) { return H((float)a * (float)b); }                                     \
  KS_HD constexpr H operator/(H a, H b) { return H((float)a / (float)b); }                                     \
  KS_HD constexpr H operator-(H a) { return H::from_bits((unsigned short)(a.bits ^ 0x8000u)); }               \
  KS_HD constexpr H operator+(H a) { return a; }                                                               \
  KS_HD constexpr float operator+(H a, float b) { return (float)a + b; }                                       \
  KS_HD constexpr float operator-(H a, float b) { return (float)a - b; }                                       \
  KS_HD constexpr float operator*(H a, float b) { return (float)a * b; }                                       \
  KS_HD constexpr float operator/(H a, float b) { return (float)a / b; }                                       \
  KS_HD constexpr float operator+(float a, H b) { return a + (float)b; }                                       \
  KS_HD constexpr float operator-(float a, H b) { return a - (float)b; }                                       \
  KS_HD constexpr float operator*(float a, H b) { return a * (float)b; }                                       \
  KS_HD constexpr float operator/(float a, H b) { return a / (float)b; }                                       \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr H operator+(H a, I b) { return a + H(b); }                                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr H operator-(H a, I b) { return a - H(b); }                                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr H operator*(H a, I b) { return a * H(b); }                                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr H operator/(H a, I b) { return a / H(b); }                                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr H operator+(I a, H b) { return H(a) + b; }                                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr H operator-(I a, H b) { return H(a) - b; }                                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr H operator*(I a, H b) { return H(a) * b; }                                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr H operator/(I a, H b) { return H(a) / b; }                                                   \
  KS_HD H& operator+=(H& a, H b) { return a = a + b; }                                                         \
  KS_HD H& operator-=(H& a, H b) { return a = a - b; }                                                         \
  KS_HD H& operator*=(H& a, H b) { return a = a * b; }                                                         \
  KS_HD H& operator/=(H& a, H b) { return a = a / b; }                                                         \
  KS_HD H& operator+=(H& a, float b) { return a = H((float)a + b); }                                           \
  KS_HD H& operator-=(H& a, float b) { return a = H((float)a - b); }                                           \
  KS_HD H& operator*=(H& a, float b) { return a = H((float)a * b); }                                           \
  KS_HD H& operator/=(H& a, float b) { return a = H((float)a / b); }                                           \
  KS_HD float& operator+=(float& a, H b) { return a += (float)b; }                                             \
  KS_HD float& operator-=(float& a, H b) { return a -= (float)b; }                                             \
  KS_HD float& operator*=(float& a, H b) { return a *= (float)b; }                                             \
  KS_HD float& operator/=(float& a, H b) { return a /= (float)b; }                                             \
  KS_HD H& operator++(H& a) { return a = a + H(1.0f); }                                                        \
  KS_HD H& operator--(H& a) { return a = a - H(1.0f); }                                                        \
  KS_HD H operator++(H& a, int) { H o = a; a = a + H(1.0f); return o; }                                        \
  KS_HD H operator--(H& a, int) { H o = a; a = a - H(1.0f); return o; }                                        \
  KS_HD constexpr bool operator==(H a, H b) { return (float)a == (float)b; }                                   \
  KS_HD constexpr bool operator!=(H a, H b) { return (float)a != (float)b; }                                   \
  KS_HD constexpr bool operator<(H a, H b) { return (float)a < (float)b; }                                     \
  KS_HD constexpr bool operator>(H a, H b) { return (float)a > (float)b; }                                     \
  KS_HD constexpr bool operator<=(H a, H b) { return (float)a <= (float)b; }                                   \
  KS_HD constexpr bool operator>=(H a, H b) { return (float)a >= (float)b; }                                   \
  KS_HD constexpr bool operator==(H a, float b) { return (float)a == b; }                                      \
  KS_HD constexpr bool operator!=(H a, float b) { return (float)a != b; }                                      \
  KS_HD constexpr bool operator<(H a, float b) { return (float)a < b; }                                        \
  KS_HD constexpr bool operator>(H a, float b) { return (float)a > b; }                                        \
  KS_HD constexpr bool operator<=(H a, float b) { return (float)a <= b; }                                      \
  KS_HD constexpr bool operator>=(H a, float b) { return (float)a >= b; }                                      \
  KS_HD constexpr bool operator==(float a, H b) { return a == (float)b; }                                      \
  KS_HD constexpr bool operator!=(float a, H b) { return a != (float)b; }                                      \
  KS_HD constexpr bool operator<(float a, H b) { return a < (float)b; }                                        \
  KS_HD constexpr bool operator>(float a, H b) { return a > (float)b; }                                        \
  KS_HD constexpr bool operator<=(float a, H b) { return a <= (float)b; }                                      \
  KS_HD constexpr bool operator>=(float a, H b) { return a >= (float)b; }                                      \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr bool operator==(H a, I b) { return (float)a == (float)b; }                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr bool operator!=(H a, I b) { return (float)a != (float)b; }                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr bool operator<(H a, I b) { return (float)a < (float)b; }                                     \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr bool operator>(H a, I b) { return (float)a > (float)b; }                                     \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr bool operator<=(H a, I b) { return (float)a <= (float)b; }                                   \
  template <class I, typename detail::enable_if<detail::is_int<I>::value, int>::type = 0>                      \
  KS_HD constexpr bool operator>=(H a, I b) { return (float)a >= (float)b; }
KS_F16_OPS(half)
KS_F16_OPS(bfloat)
#undef KS_F16_OPS

namespace detail {
// The conditional operator's common type where MSL's arithmetic conversions differ from what C++ can see through the
// library's classes: half or bfloat with float is float, with an integer half or bfloat. void: leave as it is.
template <class T> struct bare { typedef typename remove_cv<T>::type type; };
template <class T> struct bare<T&> { typedef typename remove_cv<T>::type type; };
template <class T> struct bare<T&&> { typedef typename remove_cv<T>::type type; };
template <class A, class B, bool AI = is_int<A>::value, bool BI = is_int<B>::value> struct tern_to { typedef void type; };
template <> struct tern_to<half, float, false, false> { typedef float type; };
template <> struct tern_to<float, half, false, false> { typedef float type; };
template <> struct tern_to<bfloat, float, false, false> { typedef float type; };
template <> struct tern_to<float, bfloat, false, false> { typedef float type; };
template <class I> struct tern_to<half, I, false, true> { typedef half type; };
template <class I> struct tern_to<I, half, true, false> { typedef half type; };
template <class I> struct tern_to<bfloat, I, false, true> { typedef bfloat type; };
template <class I> struct tern_to<I, bfloat, true, false> { typedef bfloat type; };
template <class A, class B, class X> KS_HD constexpr decltype(auto) tern(X&& x) {
  typedef typename tern_to<typename bare<A>::type, typename bare<B>::type>::type R;
  if constexpr (same<R, void>::value) { return static_cast<X&&>(x); } else { return R(x); }
}
}  // namespace detail

// metal::numeric_limits for the scalar types MSL has.
template <class T> struct numeric_limits;
#define KS_LIMITS(T, LO, HI, LOWEST, EPS, INF, QNAN)                                                           \
  template <> struct numeric_limits<T> {                                                                       \
    static constexpr bool is_specialized = true;                                                               \
    KS_HD static constexpr T min() { return LO; }                                                              \
    KS_HD static constexpr T max() { return HI; }                                                              \
    KS_HD static constexpr T lowest() { return LOWEST; }                                                       \
    KS_HD static constexpr T epsilon() { return EPS; }                                                         \
    KS_HD static constexpr T infinity() { return INF; }                                                        \
    KS_HD static constexpr T quiet_NaN() { return QNAN; }                                                      \
  };
KS_LIMITS(float, 1.175494351e-38f, 3.402823466e+38f, -3.402823466e+38f, 1.1920928955e-07f, detail::u2f(0x7f800000u),
          detail::u2f(0x7fc00000u))
KS_LIMITS(half, half::from_bits(0x0400), half::from_bits(0x7bff), half::from_bits(0xfbff), half::from_bits(0x1400),
          half::from_bits(0x7c00), half::from_bits(0x7e00))
KS_LIMITS(bfloat, bfloat::from_bits(0x0080), bfloat::from_bits(0x7f7f), bfloat::from_bits(0xff7f),
          bfloat::from_bits(0x3c00), bfloat::from_bits(0x7f80), bfloat::from_bits(0x7fc0))
KS_LIMITS(bool, false, true, false, false, false, false)
KS_LIMITS(char, (char)(-128), (char)127, (char)(-128), 0, 0, 0)
KS_LIMITS(signed char, (signed char)(-128), (signed char)127, (signed char)(-128), 0, 0, 0)
KS_LIMITS(unsigned char, 0, 255, 0, 0, 0, 0)
KS_LIMITS(short, (short)(-32768), (short)32767, (short)(-32768), 0, 0, 0)
KS_LIMITS(unsigned short, 0, 65535, 0, 0, 0, 0)
KS_LIMITS(int, (-2147483647 - 1), 2147483647, (-2147483647 - 1), 0, 0, 0)
KS_LIMITS(unsigned int, 0u, 4294967295u, 0u, 0u, 0u, 0u)
KS_LIMITS(long, (-9223372036854775807L - 1), 9223372036854775807L, (-9223372036854775807L - 1), 0, 0, 0)
KS_LIMITS(unsigned long, 0ul, 18446744073709551615ul, 0ul, 0ul, 0ul, 0ul)
KS_LIMITS(long long, (-9223372036854775807LL - 1), 9223372036854775807LL, (-9223372036854775807LL - 1), 0, 0, 0)
KS_LIMITS(unsigned long long, 0ull, 18446744073709551615ull, 0ull, 0ull, 0ull, 0ull)
#undef KS_LIMITS

// as_type<T>(x): bit reinterpretation between types of one size.
template <class T, class U> KS_HD constexpr T as_type(const U& u) {
  static_assert(sizeof(T) == sizeof(U), "as_type: source and destination must have the same size");
  return __builtin_bit_cast(T, u);
}
}  // namespace metal
