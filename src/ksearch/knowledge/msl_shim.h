// ksearch: an MSL shim (with msl_scalars.h beside it) so that clang (>= 14) can syntax- and type-check Metal kernel
// bodies on Linux.
// Compile with: clang++ -std=c++17 -fsyntax-only --target=aarch64-linux-gnu -flax-vector-conversions=none
//   -Xclang -cl-single-precision-constant -Wno-user-defined-literals -Wno-duplicate-decl-specifier -include msl_shim.h
// Written from the MSL specification's rules (see shared/reference/msl-checking.md): address spaces are erased
// (`constant` keeps `const`, so writes to constant data still fail), vectors are clang ext-vectors (real swizzle
// rules), vector constructors are function-like macros, and only declarations exist: nothing here ever runs.
#pragma once
#define __METAL_VERSION__ 310
#define __METAL__ 1
#define kernel
#define device
#define thread
#define threadgroup
#define threadgroup_imageblock
#define constant const
#define METAL_FUNC inline
#define MTL_CONST const
#define MLX_MTL_PRAGMA_UNROLL _Pragma("unroll")

#include "msl_scalars.h"  // the scalar type names, shared with the Metal emulation
typedef _Float16 half;

namespace metal {
// ---- type traits (MSL has no std::) ----
// Kept apart from the emulation's traits (metalemu/runtime/ks_types.h): MSL code names these metal::, while the
// runtime's own C++ uses a larger set in its namespace ks.
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;
template <class A, class B> struct is_same { static constexpr bool value = false; };
template <class A> struct is_same<A, A> { static constexpr bool value = true; };
template <class A, class B> constexpr bool is_same_v = is_same<A, B>::value;
template <class T> struct remove_cv { typedef T type; };
template <class T> struct remove_cv<const T> { typedef T type; };
template <class T> using remove_cv_t = typename remove_cv<T>::type;
template <bool B, class T, class F> struct conditional { typedef T type; };
template <class T, class F> struct conditional<false, T, F> { typedef F type; };
template <bool B, class T, class F> using conditional_t = typename conditional<B, T, F>::type;

template <class T, int N> using vec = T __attribute__((ext_vector_type(N)));

// ---- bfloat: converts implicitly only TO float, explicitly from float (MSL's rule) ----
struct bfloat {
  unsigned short bits;
  bfloat() = default;
  explicit bfloat(float f);
  explicit bfloat(half h);
  explicit bfloat(int i);
  operator float() const;
};
bfloat operator+(bfloat, bfloat); bfloat operator-(bfloat, bfloat); bfloat operator*(bfloat, bfloat);
bfloat operator/(bfloat, bfloat); bfloat operator-(bfloat);
bfloat& operator+=(bfloat&, bfloat); bfloat& operator*=(bfloat&, bfloat);

template <class T> struct numeric_limits {
  static constexpr T max() { return T(0); }
  static constexpr T min() { return T(0); }
  static constexpr T lowest() { return T(0); }
  static constexpr T infinity() { return T(0); }
  static constexpr T quiet_NaN() { return T(0); }
  static constexpr T epsilon() { return T(0); }
};
}  // namespace metal

// ---- vector types ----
#define KS_VEC(T, NAME)                                                                                     \
  typedef metal::vec<T, 2> NAME##2; typedef metal::vec<T, 3> NAME##3; typedef metal::vec<T, 4> NAME##4;
KS_VEC(float, float) KS_VEC(half, half) KS_VEC(int, int) KS_VEC(uint, uint) KS_VEC(short, short)
KS_VEC(ushort, ushort) KS_VEC(char, char) KS_VEC(uchar, uchar) KS_VEC(long, long) KS_VEC(ulong, ulong)
typedef float packed_float2 __attribute__((ext_vector_type(2)));
typedef half packed_half2 __attribute__((ext_vector_type(2)));
typedef float4 packed_float4;
typedef half4 packed_half4;
typedef metal::bfloat bfloat;
typedef struct { bfloat x, y; } bfloat2;
typedef struct { bfloat x, y, z, w; } bfloat4;

namespace ks {
template <class X> struct vlen { static constexpr int n = 1; };
template <class T, int N> struct vlen<metal::vec<T, N>> { static constexpr int n = N; };
template <class... A> constexpr int total() { return (0 + ... + vlen<A>::n); }
template <class T, int N, class X> inline void put(metal::vec<T, N>& out, int& i, X x) {
  if constexpr (vlen<X>::n == 1) { out[i++] = static_cast<T>(x); }
  else { for (int k = 0; k < vlen<X>::n; ++k) out[i++] = static_cast<T>(x[k]); }
}
// MSL vector construction: a single scalar splats; otherwise the components must add up to exactly N.
template <class T, int N, class... A> inline metal::vec<T, N> make(A... a) {
  static_assert(sizeof...(A) == 1 ? (total<A...>() == 1 || total<A...>() == N) : total<A...>() == N,
                "MSL vector constructor: the number of components does not match the vector size");
  metal::vec<T, N> out;
  int i = 0;
  if constexpr (sizeof...(A) == 1 && total<A...>() == 1) { ((out = static_cast<T>(a)), ...); }
  else { (put(out, i, a), ...); }
  return out;
}
}  // namespace ks
// Function-like macros expand only before '(': `float4 x;` and `static_cast<float4>(y)` stay type uses.
#define float2(...) (::ks::make<float, 2>(__VA_ARGS__))
#define float3(...) (::ks::make<float, 3>(__VA_ARGS__))
#define float4(...) (::ks::make<float, 4>(__VA_ARGS__))
#define half2(...) (::ks::make<half, 2>(__VA_ARGS__))
#define half3(...) (::ks::make<half, 3>(__VA_ARGS__))
#define half4(...) (::ks::make<half, 4>(__VA_ARGS__))
#define int2(...) (::ks::make<int, 2>(__VA_ARGS__))
#define int3(...) (::ks::make<int, 3>(__VA_ARGS__))
#define int4(...) (::ks::make<int, 4>(__VA_ARGS__))
#define uint2(...) (::ks::make<uint, 2>(__VA_ARGS__))
#define uint3(...) (::ks::make<uint, 3>(__VA_ARGS__))
#define uint4(...) (::ks::make<uint, 4>(__VA_ARGS__))
#define ulong2(...) (::ks::make<ulong, 2>(__VA_ARGS__))

constexpr half operator"" h(long double v) { return static_cast<half>(v); }
constexpr half operator"" h(unsigned long long v) { return static_cast<half>(v); }

#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define MAXFLOAT 3.402823466e+38f
#define HUGE_VALF __builtin_inff()
#define FLT_MAX 3.402823466e+38f
#define M_PI_F 3.14159265358979323846264338327950288f
#define M_E_F 2.71828182845904523536028747135266250f
#define M_LOG2E_F 1.44269504088896340735992468100189214f
#define M_LN2_F 0.693147180559945309417232121458176568f
#define M_SQRT2_F 1.41421356237309504880168872420969808f
#define M_PI_H ((half)3.140625)

namespace metal {
// ---- math: float and half scalars plus their vectors; int arguments are ambiguous, as in Metal ----
#define KS_UN(f)                                                                                            \
  float f(float); half f(half);                                                                             \
  template <int N> vec<float, N> f(vec<float, N>); template <int N> vec<half, N> f(vec<half, N>);
#define KS_BIN(f)                                                                                           \
  float f(float, float); half f(half, half);                                                                \
  template <int N> vec<float, N> f(vec<float, N>, vec<float, N>);                                           \
  template <int N> vec<half, N> f(vec<half, N>, vec<half, N>);
#define KS_TER(f)                                                                                           \
  float f(float, float, float); half f(half, half, half);                                                   \
  template <int N> vec<float, N> f(vec<float, N>, vec<float, N>, vec<float, N>);
#define KS_MATH                                                                                             \
  KS_UN(exp) KS_UN(exp2) KS_UN(exp10) KS_UN(log) KS_UN(log2) KS_UN(log10) KS_UN(sqrt) KS_UN(rsqrt)          \
  KS_UN(sin) KS_UN(cos) KS_UN(tan) KS_UN(tanh) KS_UN(sinh) KS_UN(cosh) KS_UN(asin) KS_UN(acos) KS_UN(atan)  \
  KS_UN(fabs) KS_UN(floor) KS_UN(ceil) KS_UN(round) KS_UN(rint) KS_UN(trunc) KS_UN(fract) KS_UN(saturate)   \
  KS_UN(sign) KS_UN(asinh) KS_UN(acosh) KS_UN(atanh) KS_UN(sinpi) KS_UN(cospi)                              \
  KS_BIN(pow) KS_BIN(powr) KS_BIN(fmax) KS_BIN(fmin) KS_BIN(fmod) KS_BIN(atan2) KS_BIN(copysign)            \
  KS_BIN(divide) KS_BIN(step) KS_BIN(fdim)                                                                  \
  KS_TER(fma) KS_TER(clamp) KS_TER(mix) KS_TER(fmax3) KS_TER(fmin3) KS_TER(smoothstep)
KS_MATH
namespace fast { KS_MATH }
namespace precise { KS_MATH }
// abs/min/max/clamp also exist for integers.
int abs(int); float abs(float); half abs(half);
template <int N> vec<float, N> abs(vec<float, N>);
#define KS_MINMAX(f)                                                                                        \
  float f(float, float); half f(half, half); int f(int, int); uint f(uint, uint); short f(short, short);     \
  ushort f(ushort, ushort); long f(long, long); ulong f(ulong, ulong);                                      \
  template <int N> vec<float, N> f(vec<float, N>, vec<float, N>);                                           \
  template <int N> vec<half, N> f(vec<half, N>, vec<half, N>);                                              \
  template <int N> vec<int, N> f(vec<int, N>, vec<int, N>); template <int N> vec<uint, N> f(vec<uint, N>, vec<uint, N>);
KS_MINMAX(min) KS_MINMAX(max)
int clamp(int, int, int); uint clamp(uint, uint, uint);
float max3(float, float, float); float min3(float, float, float);
int max3(int, int, int); int min3(int, int, int);
uint popcount(uint); int popcount(int); ulong popcount(ulong);
uint clz(uint); uint ctz(uint); uint mulhi(uint, uint);
bool isnan(float); bool isnan(half); bool isinf(float); bool isinf(half); bool isfinite(float); bool signbit(float);
template <class T> T select(T a, T b, bool c);
template <int N> float dot(vec<float, N>, vec<float, N>); template <int N> half dot(vec<half, N>, vec<half, N>);
template <int N> float length(vec<float, N>);
template <int N> bool all(vec<int, N>); template <int N> bool any(vec<int, N>);
bool all(bool); bool any(bool);

template <class T, class U> inline T as_type(U u) {
  static_assert(sizeof(T) == sizeof(U), "as_type: source and destination must have the same size");
  return __builtin_bit_cast(T, u);
}

// ---- synchronisation ----
enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4,
                                  mem_threadgroup_imageblock = 8, mem_object_data = 16 };
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }
void threadgroup_barrier(mem_flags flags);
void simdgroup_barrier(mem_flags flags);
enum memory_order { memory_order_relaxed = 0, memory_order_seq_cst = 5 };
enum thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope_device);

// ---- SIMD-group functions (not valid on bool/long/ulong/size_t: the static_assert mirrors that) ----
template <class T> struct simd_ok { static constexpr bool value = !is_same_v<T, bool> && !is_same_v<T, long> &&
                                                               !is_same_v<T, unsigned long>; };
#define KS_SIMD1(f) template <class T> T f(T v) { static_assert(simd_ok<T>::value, #f ": unsupported type"); return v; }
#define KS_SIMD2(f) template <class T> T f(T v, ushort) { static_assert(simd_ok<T>::value, #f ": unsupported type"); return v; }
KS_SIMD1(simd_sum) KS_SIMD1(simd_product) KS_SIMD1(simd_min) KS_SIMD1(simd_max) KS_SIMD1(simd_and)
KS_SIMD1(simd_or) KS_SIMD1(simd_xor) KS_SIMD1(simd_broadcast_first)
KS_SIMD1(simd_prefix_inclusive_sum) KS_SIMD1(simd_prefix_exclusive_sum)
KS_SIMD1(simd_prefix_inclusive_product) KS_SIMD1(simd_prefix_exclusive_product)
KS_SIMD1(quad_sum) KS_SIMD1(quad_max) KS_SIMD1(quad_min)
KS_SIMD2(simd_shuffle) KS_SIMD2(simd_broadcast) KS_SIMD2(simd_shuffle_xor) KS_SIMD2(simd_shuffle_up)
KS_SIMD2(simd_shuffle_down) KS_SIMD2(simd_shuffle_rotate_up) KS_SIMD2(simd_shuffle_rotate_down)
KS_SIMD2(quad_shuffle) KS_SIMD2(quad_shuffle_xor) KS_SIMD2(quad_broadcast)
template <class T> T simd_shuffle_and_fill_up(T data, T fill, ushort delta);
template <class T> T simd_shuffle_and_fill_down(T data, T fill, ushort delta);
struct simd_vote { typedef ulong vote_t; explicit operator vote_t() const; bool all() const; bool any() const; };
bool simd_all(bool); bool simd_any(bool); simd_vote simd_ballot(bool); simd_vote simd_active_threads_mask();
bool simd_is_first();

// ---- atomics ----
template <class T> struct _atomic { T value; };
template <class T> using atomic = _atomic<T>;
typedef _atomic<int> atomic_int; typedef _atomic<uint> atomic_uint; typedef _atomic<float> atomic_float;
typedef _atomic<bool> atomic_bool; typedef _atomic<ulong> atomic_ulong;
#define KS_ATOMIC(f) template <class T, class U> T f(volatile _atomic<T>* obj, U arg, memory_order order);  \
                     template <class T, class U> T f(_atomic<T>* obj, U arg, memory_order order);
KS_ATOMIC(atomic_fetch_add_explicit) KS_ATOMIC(atomic_fetch_sub_explicit) KS_ATOMIC(atomic_fetch_max_explicit)
KS_ATOMIC(atomic_fetch_min_explicit) KS_ATOMIC(atomic_fetch_and_explicit) KS_ATOMIC(atomic_fetch_or_explicit)
KS_ATOMIC(atomic_fetch_xor_explicit) KS_ATOMIC(atomic_exchange_explicit)
template <class T> T atomic_load_explicit(const volatile _atomic<T>* obj, memory_order order);
template <class T, class U> void atomic_store_explicit(volatile _atomic<T>* obj, U v, memory_order order);
template <class T, class U> bool atomic_compare_exchange_weak_explicit(volatile _atomic<T>* obj, T* expected,
                                                                       U desired, memory_order, memory_order);

// ---- simdgroup_matrix: only 8x8 of half / float / bfloat ----
template <class T, int C, int R> struct simdgroup_matrix {
  static_assert(C == 8 && R == 8, "simdgroup_matrix must be 8x8");
  static_assert(is_same_v<T, float> || is_same_v<T, half> || is_same_v<T, bfloat>,
                "simdgroup_matrix element type must be half, float or bfloat");
  simdgroup_matrix() = default;
  explicit simdgroup_matrix(T diagonal);
  // a reference, as Metal's: MLX's steel kernels assign through it (`m.thread_elements()[0] = x`)
  vec<T, 2>& thread_elements();
  const vec<T, 2>& thread_elements() const;
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
template <class T, int C, int R> simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T v);
template <class T, int C, int R> void simdgroup_load(simdgroup_matrix<T, C, R>& d, const T* src,
                                                     ulong elements_per_row = C, ulong2 origin = 0,
                                                     bool transpose = false);
template <class T, int C, int R> void simdgroup_store(simdgroup_matrix<T, C, R> a, T* dst,
                                                      ulong elements_per_row = C, ulong2 origin = 0,
                                                      bool transpose = false);
template <class T, class A, class B, int C, int R, int K>
void simdgroup_multiply(simdgroup_matrix<T, C, R>& d, simdgroup_matrix<A, K, R> a, simdgroup_matrix<B, C, K> b);
template <class T, class A, class B, class U, int C, int R, int K>
void simdgroup_multiply_accumulate(simdgroup_matrix<T, C, R>& d, simdgroup_matrix<A, K, R> a,
                                   simdgroup_matrix<B, C, K> b, simdgroup_matrix<U, C, R> c);
}  // namespace metal
using namespace metal;

// ---- the names MLX's Metal preamble gives a kernel body (hand-written equivalents) ----
typedef half float16_t;
typedef bfloat bfloat16_t;
template <class T> struct Limits {
  static constexpr T max = T(0);
  static constexpr T min = T(0);
  static constexpr T finite_max = T(0);
  static constexpr T finite_min = T(0);
};
template <class T, class U> inline T ceildiv(T n, U m) { return (n + m - 1) / m; }
template <class IdxT = int64_t>
IdxT elem_to_loc(IdxT elem, const int* shape, const int64_t* strides, int ndim);
template <class IdxT = int64_t>
IdxT elem_to_loc(uint3 elem, const int* shape, const int64_t* strides, int ndim);
float log1p(float);
template <class U, class T> inline U cast_to(T x) { return static_cast<U>(x); }
