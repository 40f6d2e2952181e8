// ksearch Metal emulation: checked pointers.
//  dptr<T>   a device/constant pointer: carries the bounds of its buffer; every access is bounds- and
//            alignment-checked.
//  tgptr<T>  a threadgroup pointer, tgref<T> a threadgroup element: carry the bounds of their threadgroup variable;
//            reads and writes go through the shadow memory of the running threadgroup (ks_abi.h, Shadow), which
//            catches reads of memory no thread wrote and unordered accesses by two threads (races).
#pragma once
#include "ks_math.h"

namespace ks {
// ---------------------------------------------------------------------------------------------------------------------
// device and constant memory

template <class T> struct dptr {
  T* p;
  char* lo;
  char* hi;
  dptr() = default;
  KS_INLINE constexpr dptr(decltype(nullptr)) : p(nullptr), lo(nullptr), hi(nullptr) {}
  KS_INLINE dptr(T* q, char* l, char* h) : p(q), lo(l), hi(h) {}
  // A raw pointer (from `&buf[i]`) recovers the bounds of the buffer it points into.
  KS_INLINE dptr(T* q) : p(q), lo(nullptr), hi(nullptr) {
    if (q && !ks_find_buffer((const void*)q, &lo, &hi)) lo = hi = nullptr;
  }
  // `(device atomic_uint*)&out[i]`: a raw pointer of another type, reinterpreted.
  template <class U, enable_if_t<!__is_convertible_to(U*, T*), int> = 0>
  KS_INLINE explicit dptr(U* q) : dptr((T*)(void*)q) {}
  template <class U, enable_if_t<__is_convertible_to(U*, T*), int> = 0>
  KS_INLINE dptr(const dptr<U>& o) : p(o.p), lo(o.lo), hi(o.hi) {}
  template <class U, enable_if_t<!__is_convertible_to(U*, T*), int> = 0>
  KS_INLINE explicit dptr(const dptr<U>& o) : p((T*)(void*)o.p), lo(o.lo), hi(o.hi) {}

  KS_INLINE T* check(T* q) const {
    u64 off = (u64)((char*)q - lo);
    // Alignment relative to the buffer: Metal buffers start aligned (the launcher aligns the host arrays to 64).
    if (KS_UNLIKELY(off + sizeof(T) > (u64)(hi - lo) || (off & (alignof(T) - 1))))
      ks_dev_fail(lo, hi, (const char*)q, sizeof(T), alignof(T), is_const<T>::value);
    return q;
  }
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE T& operator[](I i) const {
    return *check(p + i);
  }
  KS_INLINE T& operator*() const { return *check(p); }
  KS_INLINE T* operator->() const { return check(p); }
  KS_INLINE explicit operator bool() const { return p != nullptr; }
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE dptr operator+(I i) const {
    return dptr(p + i, lo, hi);
  }
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE friend dptr operator+(I i, const dptr& d) {
    return dptr(d.p + i, d.lo, d.hi);
  }
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE dptr operator-(I i) const {
    return dptr(p - i, lo, hi);
  }
  KS_INLINE ptrdiff_t operator-(const dptr& o) const { return p - o.p; }
  template <class I> KS_INLINE dptr& operator+=(I i) { p += i; return *this; }
  template <class I> KS_INLINE dptr& operator-=(I i) { p -= i; return *this; }
  KS_INLINE dptr& operator++() { ++p; return *this; }
  KS_INLINE dptr& operator--() { --p; return *this; }
  KS_INLINE dptr operator++(int) { dptr o = *this; ++p; return o; }
  KS_INLINE dptr operator--(int) { dptr o = *this; --p; return o; }
  KS_INLINE bool operator==(const dptr& o) const { return p == o.p; }
  KS_INLINE bool operator!=(const dptr& o) const { return p != o.p; }
  KS_INLINE bool operator<(const dptr& o) const { return p < o.p; }
  KS_INLINE bool operator>(const dptr& o) const { return p > o.p; }
  KS_INLINE bool operator<=(const dptr& o) const { return p <= o.p; }
  KS_INLINE bool operator>=(const dptr& o) const { return p >= o.p; }
};

// ---------------------------------------------------------------------------------------------------------------------
// threadgroup memory

template <class T> struct tgref;
template <class T> struct tgptr;

// The shadow-memory protocol (one Shadow per 2 bytes). A write or read by thread t of simdgroup s conflicts with an
// earlier access by another thread u of the same threadgroup epoch (no threadgroup_barrier with mem_threadgroup in
// between) unless u is in s and a simdgroup_barrier with mem_threadgroup separates them.
KS_INLINE void tg_access(Meta* m, const void* vp, u64 n, bool write) {
  const char* p = (const char*)vp;
  if (KS_UNLIKELY(p < m->lo || p + n > m->hi)) ks_tg_fail(m, kErrTgOOB, p, write, -1);
  Worker* w = m->w;
  if (!w->checks) return;
  u64 off = (u64)(p - w->tgmem), g1 = (off + n + 1) >> 1;
  int tid = w->tid, sg = tid >> 5;
  u32 ge = w->gepoch;
  u16 se = (u16)w->sgep[sg];
  for (u64 g = off >> 1; g < g1; ++g) {
    Shadow& s = w->shadow[g];
    bool ordered_w = s.wtid == tid || s.wep != ge || ((s.wtid >> 5) == sg && s.wsg != se);
    if (!write) {
      if (KS_UNLIKELY(s.wep < w->gbase)) {
        if (!w->pend) ks_tg_uninit(m, p);
      } else if (KS_UNLIKELY(!ordered_w)) {
        ks_tg_fail(m, kErrTgRace, p, 0, s.wtid);
      }
      if (s.rep != ge) {
        s.rep = ge;
        s.rtid = (u16)tid;
        s.rsgid = (u16)sg;
        s.rmulti = 0;
      } else if (s.rtid != tid) {
        s.rmulti = 1;
        if (s.rsgid != sg) s.rsgid = 0xFFFF;
        s.rtid = (u16)tid;
      }
      s.rsg = se;
    } else {
      if (KS_UNLIKELY(!ordered_w)) ks_tg_fail(m, kErrTgRace, p, 1, s.wtid);
      if (KS_UNLIKELY(s.rep == ge && (s.rtid != tid || s.rmulti) && !(s.rsgid == sg && s.rsg != se)))
        ks_tg_fail(m, kErrTgRace, p, 2, s.rmulti ? -1 : s.rtid);
      s.wep = ge;
      s.wtid = (u16)tid;
      s.wsg = se;
      s.rep = 0;
    }
  }
}
// Atomic operations on threadgroup memory are ordered among themselves; they count as a write by "an atomic".
KS_INLINE void tg_atomic(Meta* m, const void* vp, u64 n, bool needs_value) {
  const char* p = (const char*)vp;
  if (KS_UNLIKELY(p < m->lo || p + n > m->hi)) ks_tg_fail(m, kErrTgOOB, p, 1, -1);
  Worker* w = m->w;
  if (!w->checks) return;
  u64 off = (u64)(p - w->tgmem);
  for (u64 g = off >> 1; g < (off + n + 1) >> 1; ++g) {
    Shadow& s = w->shadow[g];
    if (KS_UNLIKELY(needs_value && s.wep < w->gbase) && !w->pend) ks_tg_uninit(m, p);
    if (KS_UNLIKELY(s.wep == w->gepoch && s.wtid != 0xFFFF && s.wtid != w->tid))
      ks_tg_fail(m, kErrTgRace, p, 1, s.wtid);
    s.wep = w->gepoch;
    s.wtid = 0xFFFF;
    s.rep = 0;
  }
}

template <class T> struct tgref {
  T* p;
  Meta* m;
  KS_INLINE tgref(T* q, Meta* mm) : p(q), m(mm) {}
  KS_INLINE T get() const {
    tg_access(m, p, sizeof(T), false);
    return *p;
  }
  KS_INLINE operator T() const { return get(); }
  // A half/bfloat element converts to the builtin types directly (MSL's half does; here half is a class).
  template <class U, enable_if_t<is_f16_v<T> && is_builtin_arith_v<U>, int> = 0> KS_INLINE operator U() const {
    return U(float(get()));
  }
  KS_INLINE const tgref& set(const T& v) const {
    tg_access(m, p, sizeof(T), true);
    *p = v;
    return *this;
  }
  KS_INLINE const tgref& operator=(const T& v) const { return set(v); }
  KS_INLINE const tgref& operator=(const tgref& o) const { return set(o.get()); }
  template <class U, enable_if_t<!is_same_v<decay_t<U>, T> && !is_same_v<decay_t<U>, tgref>, int> = 0>
  KS_INLINE const tgref& operator=(const U& v) const {
    return set(T(val_t<U>(v)));
  }
#define KS_TGREF_OP(op)                                                                                            \
  template <class U> KS_INLINE const tgref& operator op##=(const U& v) const {                                     \
    T cur = get();                                                                                                 \
    cur op## = val_t<U>(v);                                                                                        \
    return set(cur);                                                                                               \
  }
  KS_TGREF_OP(+) KS_TGREF_OP(-) KS_TGREF_OP(*) KS_TGREF_OP(/) KS_TGREF_OP(%) KS_TGREF_OP(&) KS_TGREF_OP(|)
  KS_TGREF_OP(^) KS_TGREF_OP(<<) KS_TGREF_OP(>>)
#undef KS_TGREF_OP
  KS_INLINE const tgref& operator++() const { T c = get(); ++c; return set(c); }
  KS_INLINE const tgref& operator--() const { T c = get(); --c; return set(c); }
  KS_INLINE T operator++(int) const { T c = get(), o = c; ++c; set(c); return o; }
  KS_INLINE T operator--(int) const { T c = get(), o = c; --c; set(c); return o; }
  KS_INLINE tgptr<T> operator&() const { return tgptr<T>(p, m); }
  // Component of a vector element: read only (a write needs the whole element: assign a vector).
  template <class I, enable_if_t<is_integral_v<I> && vinfo<remove_cv_t<T>>::is, int> = 0>
  KS_INLINE auto operator[](I i) const { return get()[i]; }
};
template <class T> struct proxy_value<tgref<T>> { typedef remove_cv_t<T> type; };
template <class T> struct is_tgref : false_type {};
template <class T> struct is_tgref<tgref<T>> : true_type {};
// Operators on elements work on their values (an exact match, so that no conversion path is ambiguous).
#define KS_TGREF_BIN(op)                                                                                           \
  template <class T, class U> KS_INLINE auto operator op(const tgref<T>& a, const U& b)                            \
      -> decltype(declval<remove_cv_t<T>>() op declval<val_t<U>>()) {                                              \
    return a.get() op val_t<U>(b);                                                                                 \
  }                                                                                                                \
  template <class U, class T, enable_if_t<!is_tgref<U>::value, int> = 0>                                           \
  KS_INLINE auto operator op(const U& a, const tgref<T>& b) -> decltype(declval<U>() op declval<remove_cv_t<T>>()) { \
    return a op b.get();                                                                                           \
  }
KS_TGREF_BIN(+) KS_TGREF_BIN(-) KS_TGREF_BIN(*) KS_TGREF_BIN(/) KS_TGREF_BIN(%) KS_TGREF_BIN(&) KS_TGREF_BIN(|)
KS_TGREF_BIN(^) KS_TGREF_BIN(<<) KS_TGREF_BIN(>>) KS_TGREF_BIN(<) KS_TGREF_BIN(>) KS_TGREF_BIN(<=)
KS_TGREF_BIN(>=) KS_TGREF_BIN(==) KS_TGREF_BIN(!=)
#undef KS_TGREF_BIN
template <class T> KS_INLINE auto operator-(const tgref<T>& a) -> decltype(-declval<remove_cv_t<T>>()) {
  return -a.get();
}
template <class T> KS_INLINE auto operator!(const tgref<T>& a) -> decltype(!declval<remove_cv_t<T>>()) {
  return !a.get();
}
template <class T> KS_INLINE auto operator~(const tgref<T>& a) -> decltype(~declval<remove_cv_t<T>>()) {
  return ~a.get();
}

template <class T> struct tgptr {
  T* p;
  Meta* m;
  tgptr() = default;
  KS_INLINE constexpr tgptr(decltype(nullptr)) : p(nullptr), m(nullptr) {}
  KS_INLINE tgptr(T* q, Meta* mm) : p(q), m(mm) {}
  template <class U, enable_if_t<__is_convertible_to(U*, T*), int> = 0>
  KS_INLINE tgptr(const tgptr<U>& o) : p(o.p), m(o.m) {}
  template <class U, enable_if_t<!__is_convertible_to(U*, T*), int> = 0>
  KS_INLINE explicit tgptr(const tgptr<U>& o) : p((T*)(void*)o.p), m(o.m) {}

  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE auto operator[](I i) const {
    if constexpr (is_array<remove_cv_t<T>>::value) {
      typedef remove_reference_t<decltype((*p)[0])> E;
      return tgptr<E>((E*)(p + i), m);
    } else {
      return tgref<T>(p + i, m);
    }
  }
  KS_INLINE auto operator*() const { return (*this)[0]; }
  KS_INLINE T* operator->() const {
    tg_access(m, p, sizeof(T), false);  // member access: counted as a read of the whole element
    return p;
  }
  KS_INLINE explicit operator bool() const { return p != nullptr; }
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE tgptr operator+(I i) const {
    return tgptr(p + i, m);
  }
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE friend tgptr operator+(I i, const tgptr& d) {
    return tgptr(d.p + i, d.m);
  }
  template <class I, enable_if_t<is_integral_v<I>, int> = 0> KS_INLINE tgptr operator-(I i) const {
    return tgptr(p - i, m);
  }
  KS_INLINE ptrdiff_t operator-(const tgptr& o) const { return p - o.p; }
  template <class I> KS_INLINE tgptr& operator+=(I i) { p += i; return *this; }
  template <class I> KS_INLINE tgptr& operator-=(I i) { p -= i; return *this; }
  KS_INLINE tgptr& operator++() { ++p; return *this; }
  KS_INLINE tgptr& operator--() { --p; return *this; }
  KS_INLINE tgptr operator++(int) { tgptr o = *this; ++p; return o; }
  KS_INLINE tgptr operator--(int) { tgptr o = *this; --p; return o; }
  KS_INLINE bool operator==(const tgptr& o) const { return p == o.p; }
  KS_INLINE bool operator!=(const tgptr& o) const { return p != o.p; }
  KS_INLINE bool operator<(const tgptr& o) const { return p < o.p; }
  KS_INLINE bool operator>(const tgptr& o) const { return p > o.p; }
  KS_INLINE bool operator<=(const tgptr& o) const { return p <= o.p; }
  KS_INLINE bool operator>=(const tgptr& o) const { return p >= o.p; }
};

// `threadgroup T name[N][M];` becomes a tgptr<T[M]> (a scalar `threadgroup T name;` a tgref<T>), placed at a
// compile-time offset of the threadgroup's memory.
template <class A> struct tg_decay { typedef tgref<A> type; typedef A elem; };
template <class E, unsigned long N> struct tg_decay<E[N]> { typedef tgptr<E> type; typedef E elem; };
template <class A> using tg_decay_t = typename tg_decay<A>::type;
template <class A> struct tg_scalar { typedef A type; };
template <class E, unsigned long N> struct tg_scalar<E[N]> { typedef typename tg_scalar<E>::type type; };
KS_INLINE constexpr unsigned long tg_align_up(unsigned long x, unsigned long a) { return (x + a - 1) / a * a; }
template <class A> KS_INLINE constexpr unsigned long tg_end(unsigned long prev) {
  return tg_align_up(prev, alignof(A) < 16 ? 16 : alignof(A)) + sizeof(A);
}
template <unsigned long Used, unsigned long Limit> struct tg_fits {
  static_assert(Used <= Limit, "ksearch: threadgroup memory of this kernel exceeds the limit");
};
template <class A> KS_INLINE tg_decay_t<A> tg_decl(unsigned long end, const char* name) {
  Worker* w = ks_worker();
  char* lo = w->tgmem + end - sizeof(A);
  Meta* m = ks_meta(w, lo, lo + sizeof(A), name, (u32)sizeof(typename tg_scalar<A>::type));
  return tg_decay_t<A>((typename tg_decay<A>::elem*)lo, m);
}

// ---------------------------------------------------------------------------------------------------------------------
// atomics

template <class T> struct atomic_cell {
  static_assert(is_same_v<T, int> || is_same_v<T, uint> || is_same_v<T, bool> || is_same_v<T, float> ||
                    is_same_v<T, ulong> || is_same_v<T, long>,
                "Metal has atomic<T> only for T = int, uint, bool, ulong and float");
  T v;
};

// The value storage behind an atomic pointer, after the checks of its address space.
template <class A> KS_INLINE auto atomic_at(A* p, bool) { return &p->v; }
template <class A> KS_INLINE auto atomic_at(const dptr<A>& p, bool) { return &p.check(p.p)->v; }
template <class A> KS_INLINE auto atomic_at(const tgptr<A>& p, bool needs_value) {
  tg_atomic(p.m, p.p, sizeof(A), needs_value);
  return &p.p->v;
}
template <class A> KS_INLINE auto atomic_at(const tgref<A>& p, bool needs_value) {
  tg_atomic(p.m, p.p, sizeof(A), needs_value);
  return &p.p->v;
}

template <class T> KS_INLINE T atomic_rmw(volatile T* a, T v, int op) {
  if constexpr (is_float_v<T> || sizeof(T) < 4) {
    typedef conditional_t<sizeof(T) == 8, u64, conditional_t<sizeof(T) == 4, u32, conditional_t<sizeof(T) == 2, u16, u8>>> B;
    volatile B* cell = (volatile B*)a;
    B old = __atomic_load_n(cell, __ATOMIC_RELAXED);
    for (;;) {
      T cur = __builtin_bit_cast(T, old), nv;
      switch (op) {
        case 0: nv = T(cur + v); break;
        case 1: nv = T(cur - v); break;
        case 2: nv = v < cur ? v : cur; break;
        case 3: nv = cur < v ? v : cur; break;
        case 7: nv = v; break;
        default: {
          if constexpr (is_integral_v<T>) {
            nv = op == 4 ? T(cur & v) : op == 5 ? T(cur | v) : T(cur ^ v);
          } else {
            nv = cur;
          }
        }
      }
      if (__atomic_compare_exchange_n(cell, &old, __builtin_bit_cast(B, nv), false, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED))
        return cur;
    }
  } else {
    switch (op) {
      case 0: return __atomic_fetch_add(a, v, __ATOMIC_RELAXED);
      case 1: return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED);
      case 2: return __atomic_fetch_min(a, v, __ATOMIC_RELAXED);
      case 3: return __atomic_fetch_max(a, v, __ATOMIC_RELAXED);
      case 4: return __atomic_fetch_and(a, v, __ATOMIC_RELAXED);
      case 5: return __atomic_fetch_or(a, v, __ATOMIC_RELAXED);
      case 6: return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED);
      default: return __atomic_exchange_n(a, v, __ATOMIC_RELAXED);
    }
  }
}
template <class P> struct atomic_value {
  typedef remove_cv_t<remove_reference_t<decltype(*atomic_at(declval<P>(), false))>> type;
};
}  // namespace ks

namespace metal {
enum memory_order {
  memory_order_relaxed = 0,
  memory_order_consume = 1,
  memory_order_acquire = 2,
  memory_order_release = 3,
  memory_order_acq_rel = 4,
  memory_order_seq_cst = 5
};
enum thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
template <class T> using atomic = ks::atomic_cell<T>;
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<bool> atomic_bool;
typedef atomic<float> atomic_float;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;

#define KS_ATOMIC_RMW(name, op)                                                                                    \
  template <class P, class U> KS_INLINE auto name##_explicit(P obj, U arg, memory_order = memory_order_relaxed,    \
                                                             thread_scope = thread_scope_device) {                 \
    auto* a = ks::atomic_at(obj, true);                                                                            \
    typedef typename ks::atomic_value<P>::type T;                                                                  \
    return ks::atomic_rmw<T>(a, T(ks::val_t<U>(arg)), op);                                                         \
  }                                                                                                                \
  template <class P, class U> KS_INLINE auto name(P obj, U arg) { return name##_explicit(obj, arg); }
KS_ATOMIC_RMW(atomic_fetch_add, 0)
KS_ATOMIC_RMW(atomic_fetch_sub, 1)
KS_ATOMIC_RMW(atomic_fetch_min, 2)
KS_ATOMIC_RMW(atomic_fetch_max, 3)
KS_ATOMIC_RMW(atomic_fetch_and, 4)
KS_ATOMIC_RMW(atomic_fetch_or, 5)
KS_ATOMIC_RMW(atomic_fetch_xor, 6)
KS_ATOMIC_RMW(atomic_exchange, 7)
#undef KS_ATOMIC_RMW
template <class P, class U>
KS_INLINE void atomic_store_explicit(P obj, U v, memory_order = memory_order_relaxed, thread_scope = thread_scope_device) {
  auto* a = ks::atomic_at(obj, false);
  typedef typename ks::atomic_value<P>::type T;
  T t = T(ks::val_t<U>(v));
  __atomic_store(a, &t, __ATOMIC_RELAXED);
}
template <class P>
KS_INLINE auto atomic_load_explicit(P obj, memory_order = memory_order_relaxed, thread_scope = thread_scope_device) {
  auto* a = ks::atomic_at(obj, true);
  typedef typename ks::atomic_value<P>::type T;
  T t;
  __atomic_load(a, &t, __ATOMIC_RELAXED);
  return t;
}
template <class P, class E, class U>
KS_INLINE bool atomic_compare_exchange_weak_explicit(P obj, E* expected, U desired, memory_order = memory_order_relaxed,
                                                     memory_order = memory_order_relaxed,
                                                     thread_scope = thread_scope_device) {
  auto* a = ks::atomic_at(obj, true);
  typedef typename ks::atomic_value<P>::type T;
  T d = T(ks::val_t<U>(desired));
  return __atomic_compare_exchange(a, (T*)expected, &d, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
template <class P, class E, class U>
KS_INLINE bool atomic_compare_exchange_strong_explicit(P obj, E* expected, U desired,
                                                       memory_order s = memory_order_relaxed,
                                                       memory_order f = memory_order_relaxed) {
  return atomic_compare_exchange_weak_explicit(obj, expected, desired, s, f);
}
template <class P, class U> KS_INLINE void atomic_store(P obj, U v) { atomic_store_explicit(obj, v); }
template <class P> KS_INLINE auto atomic_load(P obj) { return atomic_load_explicit(obj); }
}  // namespace metal
