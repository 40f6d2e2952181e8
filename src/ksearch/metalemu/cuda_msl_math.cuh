// ksearch Metal emulation on CUDA, part 3 of 5: the MSL math library (metal::, metal::fast::, metal::precise::).
//
// Float functions take float, half, bfloat and their vectors (half and bfloat are computed in float and rounded);
// an integer argument finds no overload, as in MSL. metal:: and metal::precise:: use CUDA's accurate functions,
// metal::fast:: its intrinsics (__expf, __logf, __fdividef, ...).
namespace metal {
namespace detail {
template <class X> struct is_fl { static constexpr bool value = same<X, float>::value || is_f16<X>::value; };
template <class X> struct floatlike { static constexpr bool value = is_fl<typename vt<X>::elem>::value; };
template <class X> struct intlike { static constexpr bool value = is_int<typename vt<X>::elem>::value; };
template <class X> struct numlike { static constexpr bool value = floatlike<X>::value || intlike<X>::value; };
template <class X> using if_float = typename enable_if<floatlike<X>::value, int>::type;
template <class X> using if_num = typename enable_if<numlike<X>::value, int>::type;
template <class X> using if_int = typename enable_if<intlike<X>::value, int>::type;

template <class X, class F> KS_D X map1(const X& x, F f) {
  typedef typename vt<X>::elem E;
  if constexpr (vt<X>::is_vec) {
    X r{};
    for (int i = 0; i < vt<X>::n; ++i) r.set(i, E(f(x.get(i))));
    return r;
  } else {
    return X(f(x));
  }
}
// b and c may be scalars when x is a vector (clamp(v, 0.0f, 1.0f), mix(a, b, t)).
template <class X, class B, class F> KS_D X map2(const X& x, const B& b, F f) {
  typedef typename vt<X>::elem E;
  if constexpr (vt<X>::is_vec) {
    X r{};
    for (int i = 0; i < vt<X>::n; ++i) r.set(i, E(f(x.get(i), comp<E>(b, i))));
    return r;
  } else {
    return X(f(x, E(b)));
  }
}
template <class X, class B, class C, class F> KS_D X map3(const X& x, const B& b, const C& c, F f) {
  typedef typename vt<X>::elem E;
  if constexpr (vt<X>::is_vec) {
    X r{};
    for (int i = 0; i < vt<X>::n; ++i) r.set(i, E(f(x.get(i), comp<E>(b, i), comp<E>(c, i))));
    return r;
  } else {
    return X(f(x, E(b), E(c)));
  }
}
template <class X, class F> KS_D vec<bool, vt<X>::n> test1(const X& x, F f) {
  vec<bool, vt<X>::n> r{};
  for (int i = 0; i < vt<X>::n; ++i) r.set(i, f(float(x.get(i))));
  return r;
}
KS_D float sign1(float v) { return v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : (v == v ? v : 0.0f)); }
KS_D float fract1(float v) { return fminf(v - floorf(v), 0x1.fffffep-1f); }
KS_D float sat1(float v) { return fminf(fmaxf(v, 0.0f), 1.0f); }
}  // namespace detail

#define KS_F1(NAME, EXPR)                                                                                        \
  template <class X, detail::if_float<X> = 0> KS_D X NAME(const X& x) {                                          \
    return detail::map1(x, [](float v) -> float { return EXPR; });                                               \
  }
#define KS_F2(NAME, EXPR)                                                                                        \
  template <class X, class Y, detail::if_float<X> = 0> KS_D X NAME(const X& x, const Y& y) {                     \
    return detail::map2(x, y, [](float v, float w) -> float { return EXPR; });                                   \
  }
#define KS_F3(NAME, EXPR)                                                                                        \
  template <class X, class Y, class Z, detail::if_float<X> = 0> KS_D X NAME(const X& x, const Y& y, const Z& z) { \
    return detail::map3(x, y, z, [](float v, float w, float u) -> float { return EXPR; });                       \
  }
// One set of float functions; FAST picks the intrinsic spellings for metal::fast.
#define KS_FLOAT_MATH(EXP, EXP2, EXP10, LOG, LOG2, LOG10, SIN, COS, TAN, POW, DIV)                                 \
  KS_F1(exp, EXP(v)) KS_F1(exp2, EXP2(v)) KS_F1(exp10, EXP10(v)) KS_F1(log, LOG(v)) KS_F1(log2, LOG2(v))         \
  KS_F1(log10, LOG10(v)) KS_F1(sqrt, sqrtf(v)) KS_F1(rsqrt, rsqrtf(v)) KS_F1(sin, SIN(v)) KS_F1(cos, COS(v))      \
  KS_F1(tan, TAN(v)) KS_F1(asin, asinf(v)) KS_F1(acos, acosf(v)) KS_F1(atan, atanf(v)) KS_F1(sinh, sinhf(v))     \
  KS_F1(cosh, coshf(v)) KS_F1(tanh, tanhf(v)) KS_F1(asinh, asinhf(v)) KS_F1(acosh, acoshf(v))                    \
  KS_F1(atanh, atanhf(v)) KS_F1(sinpi, sinpif(v)) KS_F1(cospi, cospif(v)) KS_F1(tanpi, sinpif(v) / cospif(v))    \
  KS_F1(fabs, fabsf(v)) KS_F1(floor, floorf(v)) KS_F1(ceil, ceilf(v)) KS_F1(round, roundf(v))                    \
  KS_F1(rint, rintf(v)) KS_F1(trunc, truncf(v)) KS_F1(fract, detail::fract1(v)) KS_F1(saturate, detail::sat1(v)) \
  KS_F1(sign, detail::sign1(v))                                                                                  \
  KS_F2(pow, POW(v, w)) KS_F2(powr, POW(v, w)) KS_F2(fmax, fmaxf(v, w)) KS_F2(fmin, fminf(v, w))                 \
  KS_F2(fmod, fmodf(v, w)) KS_F2(atan2, atan2f(v, w)) KS_F2(copysign, copysignf(v, w)) KS_F2(fdim, fdimf(v, w))  \
  KS_F2(divide, DIV(v, w)) KS_F2(nextafter, nextafterf(v, w))                                                    \
  KS_F3(fma, fmaf(v, w, u)) KS_F3(fmax3, fmaxf(fmaxf(v, w), u)) KS_F3(fmin3, fminf(fminf(v, w), u))              \
  KS_F3(fmedian3, fmaxf(fminf(v, w), fminf(fmaxf(v, w), u)))
#define KS_IDENT(x) x
#define KS_DIVIDE(a, b) ((a) / (b))
KS_FLOAT_MATH(expf, exp2f, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, KS_DIVIDE)
namespace precise {
KS_FLOAT_MATH(expf, exp2f, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, KS_DIVIDE)
}
namespace fast {
KS_FLOAT_MATH(__expf, exp2f, __exp10f, __logf, __log2f, __log10f, __sinf, __cosf, __tanf, __powf, __fdividef)
}

// step / smoothstep / mix: edge and weight may be scalars for vector x.
template <class E, class X, detail::if_float<X> = 0> KS_D X step(const E& edge, const X& x) {
  typedef typename detail::vt<X>::elem T;
  return detail::map2(x, edge, [](T v, T e) -> T { return T(float(v) < float(e) ? 0.0f : 1.0f); });
}
template <class E0, class E1, class X, detail::if_float<X> = 0> KS_D X smoothstep(const E0& e0, const E1& e1, const X& x) {
  return detail::map3(x, e0, e1, [](float v, float a, float b) -> float {
    const float t = detail::sat1((v - a) / (b - a));
    return t * t * (3.0f - 2.0f * t);
  });
}
template <class X, class Y, class A, detail::if_float<X> = 0> KS_D X mix(const X& x, const Y& y, const A& a) {
  return detail::map3(x, y, a, [](float v, float w, float t) -> float { return v + (w - v) * t; });
}
template <class X, detail::if_float<X> = 0> KS_D X ldexp(const X& x, int k) {
  return detail::map2(x, k, [](float v, float kk) -> float { return ldexpf(v, (int)kk); });
}

// Functions on integers and floats alike: abs, min, max, clamp, min3, max3, median3, absdiff.
template <class X, detail::if_num<X> = 0> KS_D X abs(const X& x) {
  typedef typename detail::vt<X>::elem E;
  return detail::map1(x, [](E v) -> E {
    if constexpr (detail::is_fl<E>::value) { return E(fabsf(float(v))); } else { return v < E(0) ? E(-v) : v; }
  });
}
template <class X, detail::if_num<X> = 0> KS_D X max(const X& a, const X& b) {
  typedef typename detail::vt<X>::elem E;
  return detail::map2(a, b, [](E v, E w) -> E {
    if constexpr (detail::is_fl<E>::value) { return E(fmaxf(float(v), float(w))); } else { return v < w ? w : v; }
  });
}
template <class X, detail::if_num<X> = 0> KS_D X min(const X& a, const X& b) {
  typedef typename detail::vt<X>::elem E;
  return detail::map2(a, b, [](E v, E w) -> E {
    if constexpr (detail::is_fl<E>::value) { return E(fminf(float(v), float(w))); } else { return w < v ? w : v; }
  });
}
template <class X, class L, class H, detail::if_num<X> = 0> KS_D X clamp(const X& x, const L& lo, const H& hi) {
  typedef typename detail::vt<X>::elem E;
  return detail::map3(x, lo, hi, [](E v, E a, E b) -> E {
    if constexpr (detail::is_fl<E>::value) {
      return E(fminf(fmaxf(float(v), float(a)), float(b)));
    } else {
      return v < a ? a : (b < v ? b : v);
    }
  });
}
template <class X, detail::if_num<X> = 0> KS_D X max3(const X& a, const X& b, const X& c) { return max(max(a, b), c); }
template <class X, detail::if_num<X> = 0> KS_D X min3(const X& a, const X& b, const X& c) { return min(min(a, b), c); }
template <class X, detail::if_num<X> = 0> KS_D X median3(const X& a, const X& b, const X& c) {
  return max(min(a, b), min(max(a, b), c));
}
template <class X, detail::if_int<X> = 0> KS_D X absdiff(const X& a, const X& b) {
  typedef typename detail::vt<X>::elem E;
  return detail::map2(a, b, [](E v, E w) -> E { return v < w ? E(w - v) : E(v - w); });
}

// Classification: scalars give bool, vectors bool vectors.
#define KS_TEST(NAME, EXPR)                                                                                      \
  template <class X, detail::if_float<X> = 0> KS_D auto NAME(const X& x) {                                       \
    if constexpr (detail::vt<X>::is_vec) {                                                                       \
      return detail::test1(x, [](float v) -> bool { return EXPR; });                                             \
    } else {                                                                                                     \
      const float v = float(x);                                                                                  \
      return (bool)(EXPR);                                                                                       \
    }                                                                                                            \
  }
KS_TEST(isnan, v != v) KS_TEST(isinf, fabsf(v) == detail::u2f(0x7f800000u)) KS_TEST(isfinite, fabsf(v) < detail::u2f(0x7f800000u))
KS_TEST(isnormal, fabsf(v) >= 1.175494351e-38f && fabsf(v) < detail::u2f(0x7f800000u)) KS_TEST(signbit, (detail::f2u(v) >> 31) != 0u)
#undef KS_TEST

// select(a, b, c): c ? b : a, per component for vectors.
template <class X> KS_D X select(const X& a, const X& b, bool c) { return c ? b : a; }
template <class T, int N> KS_D vec<T, N> select(const vec<T, N>& a, const vec<T, N>& b, const vec<bool, N>& c) {
  vec<T, N> r{};
  for (int i = 0; i < N; ++i) r.set(i, c.get(i) ? b.get(i) : a.get(i));
  return r;
}
KS_D bool all(bool b) { return b; }
KS_D bool any(bool b) { return b; }
template <class T, int N> KS_D bool all(const vec<T, N>& v) {
  for (int i = 0; i < N; ++i) if (!v.get(i)) return false;
  return true;
}
template <class T, int N> KS_D bool any(const vec<T, N>& v) {
  for (int i = 0; i < N; ++i) if (v.get(i)) return true;
  return false;
}

// Geometric functions on float vectors (accumulated in float).
template <class T, int N, detail::if_float<T> = 0> KS_D T dot(const vec<T, N>& a, const vec<T, N>& b) {
  float s = 0.0f;
  for (int i = 0; i < N; ++i) s += float(a.get(i)) * float(b.get(i));
  return T(s);
}
template <class T, int N, detail::if_float<T> = 0> KS_D T length_squared(const vec<T, N>& a) { return dot(a, a); }
template <class T, int N, detail::if_float<T> = 0> KS_D T length(const vec<T, N>& a) { return T(sqrtf(float(dot(a, a)))); }
template <class T, int N, detail::if_float<T> = 0> KS_D T distance(const vec<T, N>& a, const vec<T, N>& b) {
  return length(a - b);
}
template <class T, int N, detail::if_float<T> = 0> KS_D T distance_squared(const vec<T, N>& a, const vec<T, N>& b) {
  return length_squared(a - b);
}
template <class T, int N, detail::if_float<T> = 0> KS_D vec<T, N> normalize(const vec<T, N>& a) {
  return a * T(rsqrtf(float(dot(a, a))));
}
template <class T, detail::if_float<T> = 0> KS_D vec<T, 3> cross(const vec<T, 3>& a, const vec<T, 3>& b) {
  return vec<T, 3>(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}

// Integer bit functions.
template <class X, detail::if_int<X> = 0> KS_D X popcount(const X& x) {
  typedef typename detail::vt<X>::elem E;
  return detail::map1(x, [](E v) -> E {
    if constexpr (sizeof(E) == 8) { return E(__popcll((unsigned long long)v)); }
    else { return E(__popc((unsigned)v & (sizeof(E) == 4 ? 0xffffffffu : ((1u << (8 * sizeof(E))) - 1u)))); }
  });
}
template <class X, detail::if_int<X> = 0> KS_D X clz(const X& x) {
  typedef typename detail::vt<X>::elem E;
  return detail::map1(x, [](E v) -> E {
    if constexpr (sizeof(E) == 8) { return E(__clzll((long long)v)); }
    else { return E(__clz((int)((unsigned)v << (32 - 8 * sizeof(E)))) - (v == 0 ? 32 - 8 * (int)sizeof(E) : 0)); }
  });
}
template <class X, detail::if_int<X> = 0> KS_D X ctz(const X& x) {
  typedef typename detail::vt<X>::elem E;
  return detail::map1(x, [](E v) -> E {
    if constexpr (sizeof(E) == 8) { return v == 0 ? E(64) : E(__ffsll((long long)v) - 1); }
    else { return v == 0 ? E(8 * sizeof(E)) : E(__ffs((int)(unsigned)v) - 1); }
  });
}
KS_D int mulhi(int a, int b) { return __mulhi(a, b); }
KS_D uint mulhi(uint a, uint b) { return __umulhi(a, b); }
KS_D long mulhi(long a, long b) { return (long)__mul64hi((long long)a, (long long)b); }
KS_D ulong mulhi(ulong a, ulong b) { return (ulong)__umul64hi((unsigned long long)a, (unsigned long long)b); }
KS_D uint reverse_bits(uint x) { return __brev(x); }
#undef KS_F1
#undef KS_F2
#undef KS_F3
#undef KS_FLOAT_MATH
#undef KS_IDENT
#undef KS_DIVIDE
}  // namespace metal
