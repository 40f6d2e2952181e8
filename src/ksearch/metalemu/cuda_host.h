// ksearch: the CUDA builtins the Metal emulation's translated kernels use, for a plain C++20 compiler on the host.
// Two uses: checking a translation without nvcc (-fsyntax-only), and running one on the CPU, block by block, one OS
// thread per CUDA thread, with real barriers (ks_host::launch): __syncthreads waits for the block's threads that have
// not returned, warp intrinsics for the live lanes of the warp, as on sm_70+.
#pragma once
#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __host__
#define __device__
#define __global__
#define __shared__ static
#define __constant__ static
#define __forceinline__ inline
#define __grid_constant__
#define MAX_NDIM 10
#define WARP_SIZE 32

struct __half { unsigned short x; };  // the storage MLX's kernel signature names; the emulation reads it as metal::half
struct __nv_bfloat16 { unsigned short x; };
struct ks_dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local ks_dim3 threadIdx, blockIdx;
inline ks_dim3 blockDim, gridDim;
namespace cooperative_groups {}
namespace mlx::core::cu {
using Shape = std::array<int32_t, MAX_NDIM>;
using Strides = std::array<int64_t, MAX_NDIM>;
}

namespace ks_host {
struct Warp {
  std::unique_ptr<std::barrier<>> bar;
  unsigned long long slot[32] = {};
  bool alive[32] = {};
};
struct Block {
  std::unique_ptr<std::barrier<>> bar;
  std::vector<Warp> warps;
};
inline Block* block = nullptr;
inline Warp& warp() { return block->warps[threadIdx.x / 32]; }
inline unsigned lane() { return threadIdx.x & 31u; }
inline unsigned alive_mask() {
  unsigned m = 0;
  for (unsigned l = 0; l < 32; ++l) m |= warp().alive[l] ? (1u << l) : 0u;
  return m;
}
// Every live lane posts its value, then reads the source lane's; the second wait keeps slots until all have read.
inline unsigned long long exchange(unsigned long long v, unsigned src) {
  Warp& w = warp();
  w.slot[lane()] = v;
  w.bar->arrive_and_wait();
  const unsigned long long r = w.slot[src & 31u];
  w.bar->arrive_and_wait();
  return r;
}
// Run kernel(...) over a grid of blocks (one after another), one thread per CUDA thread.
inline void launch(ks_dim3 grid, ks_dim3 blk, const std::function<void()>& kernel) {
  gridDim = grid;
  blockDim = blk;
  const unsigned threads = blk.x * blk.y * blk.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Block b;
        b.bar = std::make_unique<std::barrier<>>(threads);
        b.warps.resize((threads + 31) / 32);
        for (unsigned w = 0; w < b.warps.size(); ++w) {
          const unsigned n = std::min(32u, threads - 32 * w);
          b.warps[w].bar = std::make_unique<std::barrier<>>(n);
          for (unsigned l = 0; l < n; ++l) b.warps[w].alive[l] = true;
        }
        block = &b;
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t) {
          pool.emplace_back([&, t] {
            threadIdx = ks_dim3{t % blk.x, (t / blk.x) % blk.y, t / (blk.x * blk.y)};
            blockIdx = ks_dim3{bx, by, bz};
            kernel();
            Warp& w = b.warps[t / 32];  // a returning thread no longer counts at barriers
            w.alive[t % 32] = false;
            w.bar->arrive_and_drop();
            b.bar->arrive_and_drop();
          });
        }
        for (auto& th : pool) th.join();
      }
  block = nullptr;
}
}  // namespace ks_host

inline void __syncthreads() { ks_host::block->bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ks_host::warp().bar->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned __activemask() { return ks_host::alive_mask(); }
inline unsigned __shfl_sync(unsigned, unsigned v, int src, int width = 32) {
  const unsigned base = ks_host::lane() & ~(unsigned)(width - 1);
  return (unsigned)ks_host::exchange(v, base + ((unsigned)src & (unsigned)(width - 1)));
}
inline unsigned __shfl_xor_sync(unsigned, unsigned v, int m, int width = 32) {
  const unsigned l = ks_host::lane(), base = l & ~(unsigned)(width - 1), s = l ^ (unsigned)m;
  const unsigned r = (unsigned)ks_host::exchange(v, s < base + (unsigned)width ? s : l);
  return s < base + (unsigned)width ? r : v;
}
inline unsigned __shfl_up_sync(unsigned, unsigned v, unsigned d, int width = 32) {
  const unsigned l = ks_host::lane(), base = l & ~(unsigned)(width - 1);
  const bool in = l >= base + d;
  const unsigned r = (unsigned)ks_host::exchange(v, in ? l - d : l);
  return in ? r : v;
}
inline unsigned __shfl_down_sync(unsigned, unsigned v, unsigned d, int width = 32) {
  const unsigned l = ks_host::lane(), base = l & ~(unsigned)(width - 1);
  const bool in = l + d < base + (unsigned)width;
  const unsigned r = (unsigned)ks_host::exchange(v, in ? l + d : l);
  return in ? r : v;
}
inline unsigned __ballot_sync(unsigned, int p) {
  ks_host::Warp& w = ks_host::warp();
  w.slot[ks_host::lane()] = p ? 1u : 0u;
  w.bar->arrive_and_wait();
  unsigned m = 0;
  for (unsigned l = 0; l < 32; ++l) m |= (w.alive[l] && w.slot[l]) ? (1u << l) : 0u;
  w.bar->arrive_and_wait();
  return m;
}
inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == ks_host::alive_mask(); }
inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0u; }

// Atomics on plain pointers (GCC/Clang builtins).
template <class T> inline T ks_cas_loop(T* p, T v, T (*f)(T, T)) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, f(old, v), false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
  return old;
}
template <class T> inline T atomicAdd(T* p, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    static_assert(sizeof(T) == 4, "float atomics");
    unsigned* u = reinterpret_cast<unsigned*>(p);
    unsigned old = __atomic_load_n(u, __ATOMIC_RELAXED);
    while (true) {
      float f;
      std::memcpy(&f, &old, 4);
      f += v;
      unsigned nu;
      std::memcpy(&nu, &f, 4);
      if (__atomic_compare_exchange_n(u, &old, nu, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) break;
    }
    float r;
    std::memcpy(&r, &old, 4);
    return r;
  } else {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
  }
}
template <class T> inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
template <class T> inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }
template <class T> inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
template <class T> inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }
template <class T> inline T atomicMax(T* p, T v) { return ks_cas_loop<T>(p, v, [](T a, T b) { return a < b ? b : a; }); }
template <class T> inline T atomicMin(T* p, T v) { return ks_cas_loop<T>(p, v, [](T a, T b) { return b < a ? b : a; }); }
template <class T> inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
template <class T> inline T atomicCAS(T* p, T cmp, T v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return cmp;
}

// Math intrinsics and bit functions.
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float sinpif(float x) { return std::sin(3.14159265358979323846f * x); }
inline float cospif(float x) { return std::cos(3.14159265358979323846f * x); }
using std::signbit;
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
