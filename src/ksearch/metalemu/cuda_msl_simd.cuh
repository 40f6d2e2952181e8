// ksearch Metal emulation on CUDA, part 4 of 5: the dispatch geometry, barriers, SIMD-group and quad-group
// functions, atomics.
//
// A Metal threadgroup runs as one CUDA block of tx*ty*tz threads (1-D): thread i of the block is the thread whose
// thread_index_in_threadgroup is i, so SIMD-group s is exactly warp s. The last threadgroup along a dimension where the
// grid is not a multiple of the threadgroup is smaller (Metal's dispatchThreads): its threads past the group's real
// size leave before the body runs (CUDA's __syncthreads and warp intrinsics count only threads that have not exited,
// from sm_70 on), and SIMD-group functions work on the live lanes of the last, partial warp.
// SIMD-group functions need the whole SIMD-group to call them together (uniform control flow), as on Apple GPUs.
namespace metal {
enum class mem_flags : unsigned {
  mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8,
  mem_object_data = 16
};
KS_HD constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }
KS_HD constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) & unsigned(b)); }
enum memory_order {
  memory_order_relaxed = 0, memory_order_acquire = 2, memory_order_release = 3, memory_order_acq_rel = 4,
  memory_order_seq_cst = 5
};
enum thread_scope { thread_scope_thread = 0, thread_scope_simdgroup = 1, thread_scope_threadgroup = 2, thread_scope_device = 3 };

namespace detail {
__shared__ unsigned live_threads;  // threads of this threadgroup that are inside the grid

// Metal's view of the dispatch, from [grid.xyz, threadgroup.xyz] (threads; threadgroup already clamped to the grid).
struct launch {
  uint3 thread_position_in_grid, threadgroup_position_in_grid, thread_position_in_threadgroup;
  uint3 threads_per_threadgroup, dispatch_threads_per_threadgroup, threadgroups_per_grid, threads_per_grid;
  uint3 grid_size, grid_origin;
  uint thread_index_in_threadgroup, thread_index_in_simdgroup, simdgroup_index_in_threadgroup;
  uint simdgroups_per_threadgroup, dispatch_simdgroups_per_threadgroup, threads_per_simdgroup;
  uint thread_execution_width, thread_index_in_quadgroup, quadgroup_index_in_threadgroup;
  uint quadgroups_per_threadgroup, dispatch_quadgroups_per_threadgroup;
  uint live;
  bool in_grid;
};

KS_D launch make_launch(const int* m) {
  launch L{};
  const uint3 grid = uint3((uint)m[0], (uint)m[1], (uint)m[2]), tg = uint3((uint)m[3], (uint)m[4], (uint)m[5]);
  const uint3 groups = (grid + tg - 1u) / tg;
  const unsigned long long block =
      blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
  const unsigned long long nblocks = (unsigned long long)groups.x * groups.y * groups.z;
  L.threads_per_grid = L.grid_size = grid;
  L.grid_origin = uint3(0u);
  L.dispatch_threads_per_threadgroup = tg;
  L.threadgroups_per_grid = groups;
  L.threads_per_simdgroup = L.thread_execution_width = 32u;
  const uint dispatched = tg.x * tg.y * tg.z;
  L.dispatch_simdgroups_per_threadgroup = (dispatched + 31u) / 32u;
  L.dispatch_quadgroups_per_threadgroup = (dispatched + 3u) / 4u;
  if (block >= nblocks) {  // a padding block of the CUDA grid
    L.live = 0u;
    L.in_grid = false;
    return L;
  }
  const uint3 g = uint3((uint)(block % groups.x), (uint)((block / groups.x) % groups.y),
                        (uint)(block / ((unsigned long long)groups.x * groups.y)));
  const uint3 actual = min(tg, grid - g * tg);  // the last threadgroup along a dimension may be smaller
  const uint index = threadIdx.x;
  L.live = actual.x * actual.y * actual.z;
  L.in_grid = index < L.live;
  L.threadgroup_position_in_grid = g;
  L.threads_per_threadgroup = actual;
  L.thread_position_in_threadgroup = uint3(index % actual.x, (index / actual.x) % actual.y, index / (actual.x * actual.y));
  L.thread_position_in_grid = g * tg + L.thread_position_in_threadgroup;
  L.thread_index_in_threadgroup = index;
  L.thread_index_in_simdgroup = index % 32u;
  L.simdgroup_index_in_threadgroup = index / 32u;
  L.simdgroups_per_threadgroup = (L.live + 31u) / 32u;
  L.thread_index_in_quadgroup = index % 4u;
  L.quadgroup_index_in_threadgroup = index / 4u;
  L.quadgroups_per_threadgroup = (L.live + 3u) / 4u;
  return L;
}

// Publish the live-thread count to the block, then let the threads outside the grid go.
KS_D bool enter(const launch& L) {
  if (threadIdx.x == 0) live_threads = L.live;
  __syncthreads();
  return L.in_grid;
}

KS_D unsigned lane_id() { return threadIdx.x & 31u; }
KS_D unsigned live_lanes() {
  const int n = (int)live_threads - (int)(threadIdx.x & ~31u);
  return n >= 32 ? 32u : (n < 0 ? 0u : (unsigned)n);
}
KS_D unsigned live_mask() {
  const unsigned n = live_lanes();
  return n >= 32u ? 0xffffffffu : ((1u << n) - 1u);
}

// Shuffles of any trivially copyable value, 32 bits at a time.
template <class T> struct words { unsigned w[(sizeof(T) + 3) / 4]; };
// Byte by byte: NVRTC has no __builtin_memcpy; the compiler folds a copy of this fixed size into moves.
template <class T> KS_D words<T> to_words(const T& v) {
  words<T> r{};
  const unsigned char* from = reinterpret_cast<const unsigned char*>(&v);
  unsigned char* to = reinterpret_cast<unsigned char*>(r.w);
  for (unsigned i = 0; i < sizeof(T); ++i) to[i] = from[i];
  return r;
}
template <class T> KS_D T from_words(const words<T>& r) {
  T v;
  const unsigned char* from = reinterpret_cast<const unsigned char*>(r.w);
  unsigned char* to = reinterpret_cast<unsigned char*>(&v);
  for (unsigned i = 0; i < sizeof(T); ++i) to[i] = from[i];
  return v;
}
template <class T> KS_D T shfl(const T& v, int src, int width = 32) {
  words<T> r = to_words(v);
  for (unsigned& w : r.w) w = __shfl_sync(live_mask(), w, src, width);
  return from_words<T>(r);
}
template <class T> KS_D T shfl_xor(const T& v, int m, int width = 32) {
  words<T> r = to_words(v);
  for (unsigned& w : r.w) w = __shfl_xor_sync(live_mask(), w, m, width);
  return from_words<T>(r);
}
template <class T> KS_D T shfl_up(const T& v, unsigned d, int width = 32) {
  words<T> r = to_words(v);
  for (unsigned& w : r.w) w = __shfl_up_sync(live_mask(), w, d, width);
  return from_words<T>(r);
}
template <class T> KS_D T shfl_down(const T& v, unsigned d, int width = 32) {
  words<T> r = to_words(v);
  for (unsigned& w : r.w) w = __shfl_down_sync(live_mask(), w, d, width);
  return from_words<T>(r);
}

// Reduction over a segment of W lanes (32: SIMD-group, 4: quad-group); every live lane gets the result.
template <int W, class T, class Op> KS_D T seg_reduce(T v, Op op) {
  const unsigned lane = lane_id(), base = lane & ~(unsigned)(W - 1);
  const int n = (int)live_lanes() - (int)base;
  if (n >= W) {
    for (int o = W / 2; o > 0; o >>= 1) v = op(v, shfl_xor(v, o, W));
    return v;
  }
  // A partial segment (the end of a smaller last threadgroup): a tree towards its first lane, then a broadcast.
  for (int o = W / 2; o > 0; o >>= 1) {
    const T u = shfl_down(v, (unsigned)o, W);
    if ((int)(lane - base) + o < n) v = op(v, u);
  }
  return shfl(v, 0, W);
}
template <int W, class T, class Op> KS_D T seg_scan(T v, Op op) {
  const unsigned j = lane_id() & (unsigned)(W - 1);
  for (int o = 1; o < W; o <<= 1) {
    const T u = shfl_up(v, (unsigned)o, W);
    if (j >= (unsigned)o) v = op(u, v);
  }
  return v;
}
template <int W, class T, class Op> KS_D T seg_scan_excl(T v, Op op, T identity) {
  const T inc = seg_scan<W>(v, op);
  const T r = shfl_up(inc, 1u, W);
  return (lane_id() & (unsigned)(W - 1)) == 0 ? identity : r;
}
template <int W, class T> KS_D T seg_down(const T& v, unsigned d) {
  const T r = shfl_down(v, d, W);
  const unsigned lane = lane_id(), base = lane & ~(unsigned)(W - 1);
  const unsigned n = live_lanes() - base < (unsigned)W ? live_lanes() - base : (unsigned)W;
  return (lane - base) + d < n ? r : v;  // no live source lane: keep the own value
}
struct add_op { template <class T> KS_D T operator()(const T& a, const T& b) const { return T(a + b); } };
struct mul_op { template <class T> KS_D T operator()(const T& a, const T& b) const { return T(a * b); } };
struct min_op { template <class T> KS_D T operator()(const T& a, const T& b) const { return ::metal::min(a, b); } };
struct max_op { template <class T> KS_D T operator()(const T& a, const T& b) const { return ::metal::max(a, b); } };
struct and_op { template <class T> KS_D T operator()(const T& a, const T& b) const { return T(a & b); } };
struct or_op { template <class T> KS_D T operator()(const T& a, const T& b) const { return T(a | b); } };
struct xor_op { template <class T> KS_D T operator()(const T& a, const T& b) const { return T(a ^ b); } };
}  // namespace detail

// ---- barriers ----
KS_D void threadgroup_barrier(mem_flags flags = mem_flags::mem_none) { (void)flags; __syncthreads(); }
KS_D void simdgroup_barrier(mem_flags flags = mem_flags::mem_none) { (void)flags; __syncwarp(detail::live_mask()); }
KS_D void atomic_thread_fence(mem_flags flags, memory_order order, thread_scope scope = thread_scope_device) {
  (void)flags;
  (void)order;
  if (scope == thread_scope_device) __threadfence(); else __threadfence_block();
}

// ---- SIMD-group functions ----
struct simd_vote {
  typedef ulong vote_t;
  vote_t v;
  KS_HD explicit constexpr simd_vote(vote_t bits = 0) : v(bits) {}
  KS_HD explicit constexpr operator vote_t() const { return v; }
  KS_D bool all() const { return (v & detail::live_mask()) == detail::live_mask(); }
  KS_D bool any() const { return v != 0; }
};
#define KS_REDUCE(NAME, W, OP) template <class T> KS_D T NAME(T v) { return detail::seg_reduce<W>(v, detail::OP{}); }
KS_REDUCE(simd_sum, 32, add_op) KS_REDUCE(simd_product, 32, mul_op) KS_REDUCE(simd_min, 32, min_op)
KS_REDUCE(simd_max, 32, max_op) KS_REDUCE(simd_and, 32, and_op) KS_REDUCE(simd_or, 32, or_op)
KS_REDUCE(simd_xor, 32, xor_op)
KS_REDUCE(quad_sum, 4, add_op) KS_REDUCE(quad_product, 4, mul_op) KS_REDUCE(quad_min, 4, min_op)
KS_REDUCE(quad_max, 4, max_op) KS_REDUCE(quad_and, 4, and_op) KS_REDUCE(quad_or, 4, or_op)
KS_REDUCE(quad_xor, 4, xor_op)
#undef KS_REDUCE
template <class T> KS_D T simd_prefix_inclusive_sum(T v) { return detail::seg_scan<32>(v, detail::add_op{}); }
template <class T> KS_D T simd_prefix_inclusive_product(T v) { return detail::seg_scan<32>(v, detail::mul_op{}); }
template <class T> KS_D T simd_prefix_exclusive_sum(T v) { return detail::seg_scan_excl<32>(v, detail::add_op{}, T(0)); }
template <class T> KS_D T simd_prefix_exclusive_product(T v) { return detail::seg_scan_excl<32>(v, detail::mul_op{}, T(1)); }
template <class T> KS_D T quad_prefix_inclusive_sum(T v) { return detail::seg_scan<4>(v, detail::add_op{}); }
template <class T> KS_D T quad_prefix_inclusive_product(T v) { return detail::seg_scan<4>(v, detail::mul_op{}); }
template <class T> KS_D T quad_prefix_exclusive_sum(T v) { return detail::seg_scan_excl<4>(v, detail::add_op{}, T(0)); }
template <class T> KS_D T quad_prefix_exclusive_product(T v) { return detail::seg_scan_excl<4>(v, detail::mul_op{}, T(1)); }

template <class T> KS_D T simd_shuffle(T v, uint lane) { return detail::shfl(v, (int)lane); }
template <class T> KS_D T simd_broadcast(T v, uint lane) { return detail::shfl(v, (int)lane); }
template <class T> KS_D T simd_broadcast_first(T v) { return detail::shfl(v, __ffs(__activemask() & detail::live_mask()) - 1); }
template <class T> KS_D T simd_shuffle_xor(T v, uint mask) { return detail::shfl_xor(v, (int)mask); }
template <class T> KS_D T simd_shuffle_up(T v, uint delta) { return detail::shfl_up(v, delta); }
template <class T> KS_D T simd_shuffle_down(T v, uint delta) { return detail::seg_down<32>(v, delta); }
template <class T> KS_D T simd_shuffle_rotate_up(T v, uint delta) {
  return detail::shfl(v, (int)((detail::lane_id() - delta) & 31u));
}
template <class T> KS_D T simd_shuffle_rotate_down(T v, uint delta) {
  return detail::shfl(v, (int)((detail::lane_id() + delta) & 31u));
}
// Lanes shifted in from outside the segment of `modulo` lanes take `filling` from the other end.
template <class T> KS_D T simd_shuffle_and_fill_up(T data, T filling, uint delta, uint modulo = 32) {
  const int lane = (int)detail::lane_id(), j = lane % (int)modulo, base = lane - j, s = j - (int)delta;
  const T a = detail::shfl(data, base + (s >= 0 ? s : 0));
  const T b = detail::shfl(filling, base + (s >= 0 ? 0 : s + (int)modulo));
  return s >= 0 ? a : b;
}
template <class T> KS_D T simd_shuffle_and_fill_down(T data, T filling, uint delta, uint modulo = 32) {
  const int lane = (int)detail::lane_id(), j = lane % (int)modulo, base = lane - j, s = j + (int)delta;
  const T a = detail::shfl(data, base + (s < (int)modulo ? s : 0));
  const T b = detail::shfl(filling, base + (s < (int)modulo ? 0 : s - (int)modulo));
  return s < (int)modulo ? a : b;
}
KS_D simd_vote simd_ballot(bool p) { return simd_vote(__ballot_sync(detail::live_mask(), p)); }
KS_D bool simd_all(bool p) { return __all_sync(detail::live_mask(), p) != 0; }
KS_D bool simd_any(bool p) { return __any_sync(detail::live_mask(), p) != 0; }
KS_D simd_vote simd_active_threads_mask() { return simd_vote(__activemask() & detail::live_mask()); }
KS_D bool simd_is_first() { return (int)detail::lane_id() == __ffs(__activemask() & detail::live_mask()) - 1; }

// ---- quad-group functions (4 lanes) ----
template <class T> KS_D T quad_shuffle(T v, uint lane) { return detail::shfl(v, (int)lane, 4); }
template <class T> KS_D T quad_broadcast(T v, uint lane) { return detail::shfl(v, (int)lane, 4); }
template <class T> KS_D T quad_broadcast_first(T v) { return detail::shfl(v, 0, 4); }
template <class T> KS_D T quad_shuffle_xor(T v, uint mask) { return detail::shfl_xor(v, (int)mask, 4); }
template <class T> KS_D T quad_shuffle_up(T v, uint delta) { return detail::shfl_up(v, delta, 4); }
template <class T> KS_D T quad_shuffle_down(T v, uint delta) { return detail::seg_down<4>(v, delta); }
template <class T> KS_D T quad_shuffle_rotate_up(T v, uint delta) {
  return detail::shfl(v, (int)((detail::lane_id() - delta) & 3u), 4);
}
template <class T> KS_D T quad_shuffle_rotate_down(T v, uint delta) {
  return detail::shfl(v, (int)((detail::lane_id() + delta) & 3u), 4);
}
KS_D bool quad_all(bool p) {
  const unsigned base = detail::lane_id() & ~3u, own = (detail::live_mask() >> base) & 0xfu;
  return ((__ballot_sync(detail::live_mask(), p) >> base) & own) == own;
}
KS_D bool quad_any(bool p) { return ((__ballot_sync(detail::live_mask(), p) >> (detail::lane_id() & ~3u)) & 0xfu) != 0u; }

// ---- atomics (device or threadgroup memory) ----
template <class T> struct atomic { T value; };
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;
namespace detail {
// The type CUDA's atomics take for T: 64-bit adds exist only unsigned (two's complement makes them right for
// signed values too); min and max need the signedness kept.
template <class T> struct cuda_atom { typedef T type; };
template <> struct cuda_atom<ulong> { typedef unsigned long long type; };
template <> struct cuda_atom<long> { typedef unsigned long long type; };
template <class T> struct cuda_order { typedef typename cuda_atom<T>::type type; };
template <> struct cuda_order<long> { typedef long long type; };
template <int S> struct bits_of {};
template <> struct bits_of<4> { typedef unsigned type; };
template <> struct bits_of<8> { typedef unsigned long long type; };
template <class T, class C = typename cuda_atom<T>::type> KS_D C* ptr(volatile atomic<T>* o) {
  return reinterpret_cast<C*>(const_cast<T*>(&o->value));
}
template <class T> KS_D typename bits_of<sizeof(T)>::type* bits(volatile atomic<T>* o) {
  return reinterpret_cast<typename bits_of<sizeof(T)>::type*>(const_cast<T*>(&o->value));
}
}  // namespace detail
#define KS_ATOMIC_RMW(NAME, CALL, MAP)                                                                           \
  template <class T, class U> KS_D T NAME(volatile atomic<T>* o, U v, memory_order order = memory_order_relaxed) { \
    (void)order;                                                                                                 \
    typedef typename detail::MAP<T>::type C;                                                                     \
    return (T)CALL(detail::ptr<T, C>(o), (C)(T)v);                                                               \
  }
KS_ATOMIC_RMW(atomic_fetch_add_explicit, atomicAdd, cuda_atom)
KS_ATOMIC_RMW(atomic_fetch_max_explicit, atomicMax, cuda_order)
KS_ATOMIC_RMW(atomic_fetch_min_explicit, atomicMin, cuda_order)
KS_ATOMIC_RMW(atomic_fetch_and_explicit, atomicAnd, cuda_atom)
KS_ATOMIC_RMW(atomic_fetch_or_explicit, atomicOr, cuda_atom)
KS_ATOMIC_RMW(atomic_fetch_xor_explicit, atomicXor, cuda_atom)
#undef KS_ATOMIC_RMW
template <class T, class U> KS_D T atomic_fetch_sub_explicit(volatile atomic<T>* o, U v, memory_order = memory_order_relaxed) {
  typedef typename detail::cuda_atom<T>::type C;
  if constexpr (detail::same<T, float>::value) { return atomicAdd(detail::ptr(o), -(float)v); }
  else { return (T)atomicAdd(detail::ptr(o), (C)(0 - (C)(T)v)); }  // two's complement: add the negation
}
template <class T, class U> KS_D T atomic_exchange_explicit(volatile atomic<T>* o, U v, memory_order = memory_order_relaxed) {
  typedef typename detail::bits_of<sizeof(T)>::type B;
  return as_type<T>(atomicExch(detail::bits(o), as_type<B>((T)v)));
}
template <class T> KS_D T atomic_load_explicit(const volatile atomic<T>* o, memory_order = memory_order_relaxed) {
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    typedef typename detail::bits_of<sizeof(T)>::type B;
    return as_type<T>(atomicOr(detail::bits(const_cast<volatile atomic<T>*>(o)), (B)0));  // leaves memory as it is
  } else {
    return o->value;
  }
}
template <class T, class U> KS_D void atomic_store_explicit(volatile atomic<T>* o, U v, memory_order = memory_order_relaxed) {
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    typedef typename detail::bits_of<sizeof(T)>::type B;
    atomicExch(detail::bits(o), as_type<B>((T)v));
  } else {
    o->value = (T)v;
  }
}
template <class T, class U> KS_D bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* o, T* expected, U desired,
                                                                            memory_order = memory_order_relaxed,
                                                                            memory_order = memory_order_relaxed) {
  typedef typename detail::bits_of<sizeof(T)>::type B;
  const B want = as_type<B>(*expected);
  const B old = atomicCAS(detail::bits(o), want, as_type<B>((T)desired));
  if (old == want) return true;
  *expected = as_type<T>(old);
  return false;
}
template <class T, class U> KS_D bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* o, T* expected, U desired,
                                                                              memory_order a = memory_order_relaxed,
                                                                              memory_order b = memory_order_relaxed) {
  return atomic_compare_exchange_weak_explicit(o, expected, desired, a, b);  // CUDA's CAS never fails spuriously
}
}  // namespace metal
