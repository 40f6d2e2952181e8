// ksearch Metal emulation on CUDA, part 2 of 5: vector types (vec<T,N>, packed_vec<T,N>) and swizzles.
//
// Layout as in MSL: vec<T,3> has the size and alignment of vec<T,4> (a float3 is 16 bytes), packed_vec<T,N> is N
// tightly packed elements aligned as T. Swizzles: the translator rewrites `v.xy` to `v.template swz<0, 1>()` (a value)
// and `v.xy = w` to `v.template swz_ref<0, 1>() = w` (a reference proxy); single components are real members.
namespace metal {
template <class T, int N> struct vec;
template <class T, int N> struct packed_vec;

namespace detail {
template <class V> struct vt { static constexpr bool is_vec = false; static constexpr int n = 1; typedef V elem; };
template <class T, int N> struct vt<vec<T, N>> { static constexpr bool is_vec = true; static constexpr int n = N; typedef T elem; };
template <class T, int N> struct vt<packed_vec<T, N>> {
  static constexpr bool is_vec = true;
  static constexpr int n = N;
  typedef T elem;
};
template <class V> struct vt<const V> : vt<V> {};

// Component i of a scalar (broadcast) or of a vector, converted to E.
template <class E, class X> KS_HD constexpr E comp(const X& x, int i) {
  if constexpr (vt<X>::is_vec) { return E(x.get(i)); } else { (void)i; return E(x); }
}
template <class... X> struct ncomp { static constexpr int value = 0; };
template <class X, class... R> struct ncomp<X, R...> { static constexpr int value = vt<X>::n + ncomp<R...>::value; };
template <class X> struct usable { static constexpr bool value = vt<X>::is_vec || is_scalar<X>::value; };
template <class... X> struct all_usable { static constexpr bool value = true; };
template <class X, class... R> struct all_usable<X, R...> {
  static constexpr bool value = usable<X>::value && all_usable<R...>::value;
};

// The result type of a binary operator: vector op vector of one shape and element type, or vector op scalar.
template <class A, class B, bool AV = vt<A>::is_vec, bool BV = vt<B>::is_vec> struct binres {};
template <class A, class B> struct binres<A, B, true, true>
    : enable_if<vt<A>::n == vt<B>::n && same<typename vt<A>::elem, typename vt<B>::elem>::value,
                vec<typename vt<A>::elem, vt<A>::n>> {};
template <class A, class B> struct binres<A, B, true, false>
    : enable_if<is_scalar<B>::value, vec<typename vt<A>::elem, vt<A>::n>> {};
template <class A, class B> struct binres<A, B, false, true>
    : enable_if<is_scalar<A>::value, vec<typename vt<B>::elem, vt<B>::n>> {};
}  // namespace detail

// A swizzle written to: `v.zyx = w`, `v.xy += 1`.
template <class V, int... I> struct swizzle_ref {
  typedef typename detail::vt<V>::elem T;
  static constexpr int M = sizeof...(I);
  V& v;
  KS_HD operator vec<T, M>() const { return vec<T, M>(v.get(I)...); }
  template <class X> KS_HD swizzle_ref& operator=(const X& x) {
    const vec<T, M> val(x);  // evaluate first: `v.xy = v.yx` reads before it writes
    const int idx[M] = {I...};
    for (int k = 0; k < M; ++k) v.set(idx[k], val.get(k));
    return *this;
  }
  template <class X> KS_HD swizzle_ref& operator+=(const X& x) { return *this = vec<T, M>(*this) + x; }
  template <class X> KS_HD swizzle_ref& operator-=(const X& x) { return *this = vec<T, M>(*this) - x; }
  template <class X> KS_HD swizzle_ref& operator*=(const X& x) { return *this = vec<T, M>(*this) * x; }
  template <class X> KS_HD swizzle_ref& operator/=(const X& x) { return *this = vec<T, M>(*this) / x; }
};

// The members every vector type has; SELF is the class, INIT its member initialisers.
#define KS_VEC_BODY(SELF, N, ...)                                                                                \
  typedef T value_type;                                                                                          \
  SELF() = default;                                                                                              \
  template <class S, typename detail::enable_if<detail::is_scalar<S>::value, int>::type = 0>                     \
  KS_HD constexpr SELF(S s) : __VA_ARGS__ { for (int i = 0; i < N; ++i) set(i, T(s)); }                          \
  template <class A, class B, class... R,                                                                        \
            typename detail::enable_if<detail::all_usable<A, B, R...>::value &&                                  \
                                       detail::ncomp<A, B, R...>::value == N, int>::type = 0>                    \
  KS_HD constexpr SELF(const A& a, const B& b, const R&... r) : __VA_ARGS__ {                                   \
    int i = 0;                                                                                                   \
    fill(i, a);                                                                                                  \
    fill(i, b);                                                                                                  \
    (fill(i, r), ...);                                                                                           \
  }                                                                                                              \
  template <class U, typename detail::enable_if<!detail::same<U, T>::value, int>::type = 0>                      \
  KS_HD explicit constexpr SELF(const vec<U, N>& o) : __VA_ARGS__ {                                              \
    for (int i = 0; i < N; ++i) set(i, T(o.get(i)));                                                            \
  }                                                                                                              \
  template <class U, typename detail::enable_if<!detail::same<U, T>::value, int>::type = 0>                      \
  KS_HD explicit constexpr SELF(const packed_vec<U, N>& o) : __VA_ARGS__ {                                       \
    for (int i = 0; i < N; ++i) set(i, T(o.get(i)));                                                            \
  }                                                                                                              \
  template <class X> KS_HD constexpr void fill(int& i, const X& x) {                                             \
    if constexpr (detail::vt<X>::is_vec) {                                                                       \
      for (int k = 0; k < detail::vt<X>::n; ++k) set(i++, T(x.get(k)));                                          \
    } else {                                                                                                     \
      set(i++, T(x));                                                                                            \
    }                                                                                                            \
  }                                                                                                              \
  KS_HD T& operator[](int i) { return (&x)[i]; }                                                                 \
  KS_HD constexpr const T& operator[](int i) const { return (&x)[i]; }                                           \
  template <int... I> KS_HD constexpr vec<T, sizeof...(I)> swz() const { return vec<T, sizeof...(I)>(get(I)...); } \
  template <int... I> KS_HD swizzle_ref<SELF, I...> swz_ref() { return swizzle_ref<SELF, I...>{*this}; }          \
  template <class X> KS_HD SELF& operator+=(const X& o) { return *this = SELF(*this + o); }                      \
  template <class X> KS_HD SELF& operator-=(const X& o) { return *this = SELF(*this - o); }                      \
  template <class X> KS_HD SELF& operator*=(const X& o) { return *this = SELF(*this * o); }                      \
  template <class X> KS_HD SELF& operator/=(const X& o) { return *this = SELF(*this / o); }                      \
  template <class X> KS_HD SELF& operator%=(const X& o) { return *this = SELF(*this % o); }                      \
  template <class X> KS_HD SELF& operator&=(const X& o) { return *this = SELF(*this & o); }                      \
  template <class X> KS_HD SELF& operator|=(const X& o) { return *this = SELF(*this | o); }                      \
  template <class X> KS_HD SELF& operator^=(const X& o) { return *this = SELF(*this ^ o); }                      \
  template <class X> KS_HD SELF& operator<<=(const X& o) { return *this = SELF(*this << o); }                    \
  template <class X> KS_HD SELF& operator>>=(const X& o) { return *this = SELF(*this >> o); }

#define KS_GET2 KS_HD constexpr T get(int i) const { return i == 0 ? x : y; }                                    \
  KS_HD constexpr void set(int i, T v) { if (i == 0) x = v; else y = v; }
#define KS_GET3 KS_HD constexpr T get(int i) const { return i == 0 ? x : i == 1 ? y : z; }                       \
  KS_HD constexpr void set(int i, T v) { if (i == 0) x = v; else if (i == 1) y = v; else z = v; }
#define KS_GET4 KS_HD constexpr T get(int i) const { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }          \
  KS_HD constexpr void set(int i, T v) { if (i == 0) x = v; else if (i == 1) y = v; else if (i == 2) z = v; else w = v; }

template <class T> struct alignas(2 * sizeof(T)) vec<T, 2> {
  T x, y;
  KS_GET2
  KS_VEC_BODY(vec, 2, x(), y())
  KS_HD constexpr vec(const packed_vec<T, 2>& p);
};
template <class T> struct alignas(4 * sizeof(T)) vec<T, 3> {
  T x, y, z;
  KS_GET3
  KS_VEC_BODY(vec, 3, x(), y(), z())
  KS_HD constexpr vec(const packed_vec<T, 3>& p);
};
template <class T> struct alignas(4 * sizeof(T)) vec<T, 4> {
  T x, y, z, w;
  KS_GET4
  KS_VEC_BODY(vec, 4, x(), y(), z(), w())
  KS_HD constexpr vec(const packed_vec<T, 4>& p);
};
template <class T> struct packed_vec<T, 2> {
  T x, y;
  KS_GET2
  KS_VEC_BODY(packed_vec, 2, x(), y())
  KS_HD constexpr packed_vec(const vec<T, 2>& v) : x(v.x), y(v.y) {}
};
template <class T> struct packed_vec<T, 3> {
  T x, y, z;
  KS_GET3
  KS_VEC_BODY(packed_vec, 3, x(), y(), z())
  KS_HD constexpr packed_vec(const vec<T, 3>& v) : x(v.x), y(v.y), z(v.z) {}
};
template <class T> struct packed_vec<T, 4> {
  T x, y, z, w;
  KS_GET4
  KS_VEC_BODY(packed_vec, 4, x(), y(), z(), w())
  KS_HD constexpr packed_vec(const vec<T, 4>& v) : x(v.x), y(v.y), z(v.z), w(v.w) {}
};
template <class T> KS_HD constexpr vec<T, 2>::vec(const packed_vec<T, 2>& p) : x(p.x), y(p.y) {}
template <class T> KS_HD constexpr vec<T, 3>::vec(const packed_vec<T, 3>& p) : x(p.x), y(p.y), z(p.z) {}
template <class T> KS_HD constexpr vec<T, 4>::vec(const packed_vec<T, 4>& p) : x(p.x), y(p.y), z(p.z), w(p.w) {}
#undef KS_VEC_BODY
#undef KS_GET2
#undef KS_GET3
#undef KS_GET4

// Element-wise operators on vectors (and vector op scalar); comparisons give bool vectors.
#define KS_VOP(op)                                                                                               \
  template <class A, class B, class R = typename detail::binres<A, B>::type>                                     \
  KS_HD constexpr R operator op(const A& a, const B& b) {                                                        \
    typedef typename detail::vt<R>::elem E;                                                                      \
    R r{};                                                                                                       \
    for (int i = 0; i < detail::vt<R>::n; ++i) r.set(i, E(detail::comp<E>(a, i) op detail::comp<E>(b, i)));      \
    return r;                                                                                                    \
  }
#define KS_VCMP(op)                                                                                              \
  template <class A, class B, class R = typename detail::binres<A, B>::type>                                     \
  KS_HD constexpr vec<bool, detail::vt<R>::n> operator op(const A& a, const B& b) {                              \
    typedef typename detail::vt<R>::elem E;                                                                      \
    vec<bool, detail::vt<R>::n> r{};                                                                             \
    for (int i = 0; i < detail::vt<R>::n; ++i) r.set(i, detail::comp<E>(a, i) op detail::comp<E>(b, i));        \
    return r;                                                                                                    \
  }
KS_VOP(+) KS_VOP(-) KS_VOP(*) KS_VOP(/) KS_VOP(%) KS_VOP(&) KS_VOP(|) KS_VOP(^) KS_VOP(<<) KS_VOP(>>)
KS_VCMP(==) KS_VCMP(!=) KS_VCMP(<) KS_VCMP(>) KS_VCMP(<=) KS_VCMP(>=) KS_VCMP(&&) KS_VCMP(||)
#undef KS_VOP
#undef KS_VCMP
template <class T, int N> KS_HD constexpr vec<T, N> operator-(const vec<T, N>& a) {
  vec<T, N> r{};
  for (int i = 0; i < N; ++i) r.set(i, T(-a.get(i)));
  return r;
}
template <class T, int N> KS_HD constexpr vec<T, N> operator+(const vec<T, N>& a) { return a; }
template <class T, int N> KS_HD constexpr vec<T, N> operator~(const vec<T, N>& a) {
  vec<T, N> r{};
  for (int i = 0; i < N; ++i) r.set(i, T(~a.get(i)));
  return r;
}
template <class T, int N> KS_HD constexpr vec<bool, N> operator!(const vec<T, N>& a) {
  vec<bool, N> r{};
  for (int i = 0; i < N; ++i) r.set(i, !a.get(i));
  return r;
}

#define KS_VEC_TYPES(T, NAME)                                                                                    \
  typedef vec<T, 2> NAME##2; typedef vec<T, 3> NAME##3; typedef vec<T, 4> NAME##4;                               \
  typedef packed_vec<T, 2> packed_##NAME##2; typedef packed_vec<T, 3> packed_##NAME##3;                          \
  typedef packed_vec<T, 4> packed_##NAME##4;
KS_VEC_TYPES(float, float) KS_VEC_TYPES(half, half) KS_VEC_TYPES(bfloat, bfloat) KS_VEC_TYPES(int, int)
KS_VEC_TYPES(uint, uint) KS_VEC_TYPES(short, short) KS_VEC_TYPES(ushort, ushort) KS_VEC_TYPES(char, char)
KS_VEC_TYPES(uchar, uchar) KS_VEC_TYPES(long, long) KS_VEC_TYPES(ulong, ulong) KS_VEC_TYPES(bool, bool)
#undef KS_VEC_TYPES
}  // namespace metal
