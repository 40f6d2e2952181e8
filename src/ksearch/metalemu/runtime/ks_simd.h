// ksearch Metal emulation: barriers and SIMD-group / quad-group functions.
// A SIMD-group function blocks its thread; the scheduler (core.cpp) runs it once every lane of the SIMD-group is
// blocked, with the lanes waiting at the same call site as the active lanes. Reading a lane that is not active (it
// returned, waits elsewhere, or does not exist in a partial SIMD-group) gives an undefined value on hardware: here
// every byte of it is 0xFF (a NaN for floating types). An explicit lane index outside the SIMD-group (quad) is an
// error. Every call site passes its source line (default arguments) for the scheduler's messages.
#pragma once
#include "ks_mem.h"

namespace metal {
enum class mem_flags : unsigned {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16
};
KS_INLINE constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }
KS_INLINE constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) & unsigned(b)); }

KS_INLINE void threadgroup_barrier(mem_flags f, int line = __builtin_LINE(), int col = __builtin_COLUMN()) {
  ks_barrier(ks::kWaitTg, (unsigned)f, line, col);
}
KS_INLINE void simdgroup_barrier(mem_flags f, int line = __builtin_LINE(), int col = __builtin_COLUMN()) {
  ks_barrier(ks::kWaitSgBar, (unsigned)f, line, col);
}
KS_INLINE void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope_device) {}
}  // namespace metal

namespace ks {
template <class T> KS_INLINE void slot_put(u8* s, const T& v) {
  static_assert(sizeof(T) <= kSlot, "SIMD-group function on a value larger than 64 bytes");
  __builtin_memcpy(s, &v, sizeof(T));
}
template <class T> KS_INLINE T slot_get(const u8* s) {
  T v;
  __builtin_memcpy((void*)&v, s, sizeof(T));
  return v;
}
typedef int (*Exec)(Worker*, Fiber* const*, int);

template <class T, class X> KS_INLINE T collective(Exec exec, const X& x, u32 arg, int line, int col) {
  Fiber* f = ks_fiber();
  slot_put<T>(f->in, T(x));
  f->arg = arg;
  ks_collective(f, exec, line, col);
  return slot_get<T>(f->out);
}

struct op_sum {
  template <class T> static KS_INLINE T f(const T& a, const T& b) { return T(a + b); }
  template <class T> static KS_INLINE T id() { return T(0); }
};
struct op_product {
  template <class T> static KS_INLINE T f(const T& a, const T& b) { return T(a * b); }
  template <class T> static KS_INLINE T id() { return T(1); }
};
struct op_min {
  template <class T> static KS_INLINE T f(const T& a, const T& b) { return T(metal::min(a, b)); }
};
struct op_max {
  template <class T> static KS_INLINE T f(const T& a, const T& b) { return T(metal::max(a, b)); }
};
struct op_and {
  template <class T> static KS_INLINE T f(const T& a, const T& b) { return T(a & b); }
};
struct op_or {
  template <class T> static KS_INLINE T f(const T& a, const T& b) { return T(a | b); }
};
struct op_xor {
  template <class T> static KS_INLINE T f(const T& a, const T& b) { return T(a ^ b); }
};

template <class T, class Op, int W> int exec_reduce(Worker*, Fiber* const* L, int) {
  for (int base = 0; base < kSimd; base += W) {
    T acc{};
    bool first = true;
    for (int l = base; l < base + W; ++l)
      if (L[l]) {
        T v = slot_get<T>(L[l]->in);
        acc = first ? v : Op::f(acc, v);
        first = false;
      }
    for (int l = base; l < base + W; ++l)
      if (L[l]) slot_put<T>(L[l]->out, acc);
  }
  return 0;
}
template <class T, class Op, bool Inclusive, int W> int exec_prefix(Worker*, Fiber* const* L, int) {
  for (int base = 0; base < kSimd; base += W) {
    T acc = Op::template id<T>();
    for (int l = base; l < base + W; ++l)
      if (L[l]) {
        T v = slot_get<T>(L[l]->in);
        if (Inclusive) acc = Op::f(acc, v);
        slot_put<T>(L[l]->out, acc);
        if (!Inclusive) acc = Op::f(acc, v);
      }
  }
  return 0;
}

enum { kShIdx, kShXor, kShUp, kShDown, kShRotUp, kShRotDown, kShBcast, kShFirst, kShFillUp, kShFillDown };
KS_INLINE const char* shuffle_name(int kind, int w) {
  static const char* simd[] = {"simd_shuffle", "simd_shuffle_xor", "simd_shuffle_up", "simd_shuffle_down",
                               "simd_shuffle_rotate_up", "simd_shuffle_rotate_down", "simd_broadcast",
                               "simd_broadcast_first", "simd_shuffle_and_fill_up", "simd_shuffle_and_fill_down"};
  static const char* quad[] = {"quad_shuffle", "quad_shuffle_xor", "quad_shuffle_up", "quad_shuffle_down",
                               "quad_shuffle_rotate_up", "quad_shuffle_rotate_down", "quad_broadcast",
                               "quad_broadcast_first", "quad_shuffle_and_fill_up", "quad_shuffle_and_fill_down"};
  return w == kSimd ? simd[kind] : quad[kind];
}
KS_INLINE int shuffle_error(Worker* w, Fiber* f, int kind, int width, u32 lane) {
  return ks_lane_error(w, f, shuffle_name(kind, width), width, lane);
}

template <class T, int Kind, int W> int exec_shuffle(Worker* w, Fiber* const* L, int) {
  for (int l = 0; l < kSimd; ++l) {
    Fiber* f = L[l];
    if (!f) continue;
    u32 a = f->arg;
    int base = l - l % W, li = l % W, src = l;
    bool fill = false;
    switch (Kind) {
      case kShIdx:
      case kShBcast:
        if (a >= (u32)W) return shuffle_error(w, f, Kind, W, a);
        src = base + (int)a;
        break;
      case kShXor:
        if (((u32)li ^ a) >= (u32)W) return shuffle_error(w, f, Kind, W, (u32)li ^ a);
        src = base + (int)((u32)li ^ a);
        break;
      case kShUp: src = (u32)li >= a ? l - (int)a : l; break;
      case kShDown: src = (u32)li + a < (u32)W ? l + (int)a : l; break;
      case kShRotUp: src = base + (int)(((u32)li + (u32)W - a % W) % W); break;
      case kShRotDown: src = base + (int)(((u32)li + a) % W); break;
      case kShFirst:
        src = -1;
        for (int k = base; k < base + W && src < 0; ++k)
          if (L[k]) src = k;
        break;
      case kShFillUp:
        if ((u32)li >= a) {
          src = l - (int)a;
        } else {
          src = base + W - (int)a + li;
          fill = true;
        }
        break;
      case kShFillDown:
        if ((u32)li + a < (u32)W) {
          src = l + (int)a;
        } else {
          src = base + li + (int)a - W;
          fill = true;
        }
        break;
    }
    const Fiber* s = (src >= base && src < base + W) ? L[src] : nullptr;
    if (!s) __builtin_memset(f->out, 0xFF, sizeof(T));
    else __builtin_memcpy(f->out, fill ? s->in2 : s->in, sizeof(T));
  }
  return 0;
}

enum { kVoteBallot, kVoteAll, kVoteAny, kVoteActive, kVoteFirst };
template <int Kind, int W> int exec_vote(Worker*, Fiber* const* L, int) {
  for (int base = 0; base < kSimd; base += W) {
    u64 set = 0, act = 0;
    int first = -1;
    for (int l = base; l < base + W; ++l)
      if (L[l]) {
        act |= 1ul << (l - base);
        if (L[l]->in[0]) set |= 1ul << (l - base);
        if (first < 0) first = l;
      }
    for (int l = base; l < base + W; ++l) {
      if (!L[l]) continue;
      u64 r[2] = {0, act};
      switch (Kind) {
        case kVoteBallot: r[0] = set; break;
        case kVoteAll: r[0] = set == act; break;
        case kVoteAny: r[0] = set != 0; break;
        case kVoteActive: r[0] = act; break;
        case kVoteFirst: r[0] = l == first; break;
      }
      __builtin_memcpy(L[l]->out, r, sizeof r);
    }
  }
  return 0;
}
template <int Kind, int W> KS_INLINE u64 vote(bool b, u64* act, int line, int col) {
  Fiber* f = ks_fiber();
  f->in[0] = b;
  ks_collective(f, exec_vote<Kind, W>, line, col);
  u64 r[2];
  __builtin_memcpy(r, f->out, sizeof r);
  if (act) *act = r[1];
  return r[0];
}
}  // namespace ks

namespace metal {
struct simd_vote {
  typedef ulong vote_t;
  vote_t v;
  vote_t act;
  KS_INLINE constexpr explicit simd_vote(vote_t x = 0) : v(x), act(~0ul) {}
  KS_INLINE constexpr simd_vote(vote_t x, vote_t a) : v(x), act(a) {}
  KS_INLINE constexpr explicit operator vote_t() const { return v; }
  KS_INLINE constexpr bool all() const { return (v & act) == act; }
  KS_INLINE constexpr bool any() const { return v != 0; }
};
struct quad_vote {
  typedef ushort vote_t;
  vote_t v;
  vote_t act;
  KS_INLINE constexpr explicit quad_vote(vote_t x = 0) : v(x), act(0xF) {}
  KS_INLINE constexpr quad_vote(vote_t x, vote_t a) : v(x), act(a) {}
  KS_INLINE constexpr explicit operator vote_t() const { return v; }
  KS_INLINE constexpr bool all() const { return (v & act) == act; }
  KS_INLINE constexpr bool any() const { return v != 0; }
};

#define KS_LINE int line = __builtin_LINE(), int col = __builtin_COLUMN()
#define KS_REDUCE(name, op, W)                                                                                     \
  template <class X> KS_INLINE auto name(const X& x, KS_LINE) {                                                    \
    typedef ks::val_t<X> T;                                                                                        \
    return ks::collective<T>(ks::exec_reduce<T, ks::op, W>, x, 0, line, col);                                      \
  }
#define KS_PREFIX(name, op, incl, W)                                                                               \
  template <class X> KS_INLINE auto name(const X& x, KS_LINE) {                                                    \
    typedef ks::val_t<X> T;                                                                                        \
    return ks::collective<T>(ks::exec_prefix<T, ks::op, incl, W>, x, 0, line, col);                                \
  }
#define KS_SHUFFLE(name, kind, W)                                                                                  \
  template <class X, class I> KS_INLINE auto name(const X& x, I lane, KS_LINE) {                                   \
    typedef ks::val_t<X> T;                                                                                        \
    return ks::collective<T>(ks::exec_shuffle<T, ks::kind, W>, x, (ks::u32)(ks::val_t<I>)lane, line, col);          \
  }
#define KS_FILL(name, kind, W)                                                                                     \
  template <class X, class Y, class I> KS_INLINE auto name(const X& x, const Y& fill, I delta, KS_LINE) {          \
    typedef ks::val_t<X> T;                                                                                        \
    ks::slot_put<T>(ks_fiber()->in2, T(fill));                                                                     \
    return ks::collective<T>(ks::exec_shuffle<T, ks::kind, W>, x, (ks::u32)(ks::val_t<I>)delta, line, col);         \
  }
#define KS_GROUP_FUNCS(P, W)                                                                                       \
  KS_REDUCE(P##_sum, op_sum, W) KS_REDUCE(P##_product, op_product, W) KS_REDUCE(P##_min, op_min, W)                \
  KS_REDUCE(P##_max, op_max, W) KS_REDUCE(P##_and, op_and, W) KS_REDUCE(P##_or, op_or, W)                          \
  KS_REDUCE(P##_xor, op_xor, W)                                                                                    \
  KS_PREFIX(P##_prefix_inclusive_sum, op_sum, true, W) KS_PREFIX(P##_prefix_exclusive_sum, op_sum, false, W)       \
  KS_PREFIX(P##_prefix_inclusive_product, op_product, true, W)                                                     \
  KS_PREFIX(P##_prefix_exclusive_product, op_product, false, W)                                                    \
  KS_SHUFFLE(P##_shuffle, kShIdx, W) KS_SHUFFLE(P##_shuffle_xor, kShXor, W) KS_SHUFFLE(P##_shuffle_up, kShUp, W)   \
  KS_SHUFFLE(P##_shuffle_down, kShDown, W) KS_SHUFFLE(P##_shuffle_rotate_up, kShRotUp, W)                          \
  KS_SHUFFLE(P##_shuffle_rotate_down, kShRotDown, W) KS_SHUFFLE(P##_broadcast, kShBcast, W)                        \
  KS_FILL(P##_shuffle_and_fill_up, kShFillUp, W) KS_FILL(P##_shuffle_and_fill_down, kShFillDown, W)                \
  template <class X> KS_INLINE auto P##_broadcast_first(const X& x, KS_LINE) {                                     \
    typedef ks::val_t<X> T;                                                                                        \
    return ks::collective<T>(ks::exec_shuffle<T, ks::kShFirst, W>, x, 0, line, col);                               \
  }                                                                                                                \
  KS_INLINE bool P##_all(bool b, KS_LINE) { return ks::vote<ks::kVoteAll, W>(b, nullptr, line, col); }              \
  KS_INLINE bool P##_any(bool b, KS_LINE) { return ks::vote<ks::kVoteAny, W>(b, nullptr, line, col); }              \
  KS_INLINE bool P##_is_first(KS_LINE) { return ks::vote<ks::kVoteFirst, W>(true, nullptr, line, col); }
KS_GROUP_FUNCS(simd, ks::kSimd)
KS_GROUP_FUNCS(quad, 4)
#undef KS_GROUP_FUNCS
#undef KS_REDUCE
#undef KS_PREFIX
#undef KS_SHUFFLE
#undef KS_FILL
KS_INLINE simd_vote simd_ballot(bool b, KS_LINE) {
  ks::u64 act;
  ks::u64 v = ks::vote<ks::kVoteBallot, ks::kSimd>(b, &act, line, col);
  return simd_vote(v, act);
}
KS_INLINE simd_vote simd_active_threads_mask(KS_LINE) {
  ks::u64 act;
  ks::u64 v = ks::vote<ks::kVoteActive, ks::kSimd>(true, &act, line, col);
  return simd_vote(v, act);
}
KS_INLINE quad_vote quad_ballot(bool b, KS_LINE) {
  ks::u64 act;
  ks::u64 v = ks::vote<ks::kVoteBallot, 4>(b, &act, line, col);
  return quad_vote((ushort)v, (ushort)act);
}
KS_INLINE quad_vote quad_active_threads_mask(KS_LINE) {
  ks::u64 act;
  ks::u64 v = ks::vote<ks::kVoteActive, 4>(true, &act, line, col);
  return quad_vote((ushort)v, (ushort)act);
}
#undef KS_LINE
}  // namespace metal
