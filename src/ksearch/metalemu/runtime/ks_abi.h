// ksearch Metal emulation: the interface between a translated kernel (compiled per kernel source) and the scheduler
// core (core.cpp, compiled once into a shared library loaded RTLD_GLOBAL before any kernel).
// No system header here: the kernel side includes this file next to user MSL code, whose names must not collide
// with the C library's. The Python mirror of Launch and Err lives in ksearch/metalemu/launch.py: change both.
#pragma once

namespace ks {
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long u64;
typedef long i64;
typedef int i32;

enum : int { kMaxBufs = 64, kSimd = 32, kMaxThreads = 1024, kMaxSimdgroups = kMaxThreads / kSimd, kSlot = 64,
             kMaxMeta = 128 };

// Error codes reported to Python (launch.py keeps the same table).
enum : int {
  kErrNone = 0,
  kErrDeviceOOB = 1,     // device/constant buffer access outside the buffer
  kErrMisaligned = 2,    // device access not aligned to its type
  kErrTgOOB = 3,         // threadgroup array index outside the array
  kErrTgUninit = 4,      // threadgroup memory read before any thread of the group wrote it
  kErrTgRace = 5,        // conflicting threadgroup accesses by two threads with no barrier between
  kErrBarrier = 6,       // a barrier not reached by every thread (divergence, early return)
  kErrShuffle = 7,       // a simd/quad shuffle from a lane outside the simdgroup/quad
  kErrMatrix = 8,        // simdgroup_matrix operation without the full simdgroup
  kErrArgs = 9,          // buffer too small for the type the kernel declares
  kErrNull = 10,         // access through a null or unknown device pointer
  kErrInternal = 11,
  kErrPrivateOOB = 12,   // index outside a thread-private array
};

// Why a fiber stopped.
enum : int { kReady = 0, kWaitTg = 1, kWaitSgBar = 2, kWaitSimd = 3, kExited = 4, kDead = 5 };

enum : u32 { kMemNone = 0, kMemDevice = 1, kMemThreadgroup = 2, kMemTexture = 4 };

struct Buf {
  char* ptr;
  i64 bytes;
};

struct Attrs;

struct Launch {
  Buf bufs[kMaxBufs];
  i64 nbufs;
  i64 ngroups;
  i64 next;  // the next threadgroup to run, taken atomically by the workers
  u32 grid[3];
  u32 tg[3];
  i32 stop;    // set by a worker that failed: the others stop before their next threadgroup
  i32 checks;  // 0: threadgroup shadow checks off (device bounds checks stay on)
  i32 fibers;  // 1: the kernel synchronises (barriers, simd functions): one fiber per thread
  i32 tg_limit;
  void (*entry)(const Launch*, const Attrs*);
};

struct Err {
  i32 code;
  i32 line;  // MSL line when the runtime knows it (barriers, simd functions); 0: symbolise pc
  i64 pc;    // return address in the kernel library, relative to its load base (0: none)
  i64 group;
  u32 gpos[3];
  u32 tpos[3];
  i32 buf;  // buffer index for device errors, else -1
  i32 pad;
  i64 pc2;  // the earlier access of a race, when known (0: none)
  char msg[1024];
};

struct Attrs {
  u32 thread_position_in_grid[3];
  u32 thread_position_in_threadgroup[3];
  u32 threadgroup_position_in_grid[3];
  u32 threads_per_threadgroup[3];
  u32 threads_per_grid[3];
  u32 threadgroups_per_grid[3];
  u32 dispatch_threads_per_threadgroup[3];
  u32 grid_origin[3];
  u32 grid_size[3];
  u32 thread_index_in_threadgroup;
  u32 thread_index_in_simdgroup;
  u32 simdgroup_index_in_threadgroup;
  u32 simdgroups_per_threadgroup;
  u32 threads_per_simdgroup;
  u32 thread_execution_width;
  u32 thread_index_in_quadgroup;
  u32 quadgroup_index_in_threadgroup;
  u32 quadgroups_per_threadgroup;
  u32 dispatch_simdgroups_per_threadgroup;
  u32 dispatch_quadgroups_per_threadgroup;
};

// Shadow state of 2 bytes of threadgroup memory (the smallest element, half, is 2 bytes).
struct Shadow {
  u32 wep;    // threadgroup epoch of the last write (epochs < Worker::gbase: not written in this threadgroup)
  u32 rep;    // threadgroup epoch of the last reads
  u16 wtid;   // last writer (0xFFFF: an atomic operation)
  u16 wsg;    // the writer's simdgroup epoch at the write
  u16 rtid;   // last reader
  u16 rsg;    // the latest reader's simdgroup epoch at its read
  u16 rsgid;  // simdgroup of all readers of this epoch (0xFFFF: several)
  u16 rmulti; // more than one thread read in this epoch
};

struct Worker;

// A threadgroup variable of the running kernel: bounds and name, for checks and messages.
struct Meta {
  char* lo;
  char* hi;
  const char* name;
  Worker* w;
  u32 elem;  // element size, for messages
  u32 pad;
};

struct Group;

struct Fiber {
  void* sp;
  i32 state;
  i32 tid;   // linear index in the threadgroup
  i32 lane;
  i32 sg;
  // where it waits (barrier or collective)
  i32 line;
  i32 col;
  u64 pc;
  u32 flags;
  u32 seq;  // collectives this thread took part in
  int (*exec)(Worker*, Fiber* const* bylane, int n);
  alignas(16) u8 in[kSlot];
  alignas(16) u8 in2[kSlot];
  alignas(16) u8 out[kSlot];
  u32 arg;
  u32 arg2;
  void* ptrs[4];
};

struct Worker {
  // --- read by kernel code (hot)
  i32 tid;  // running thread
  i32 checks;
  u32 gepoch;  // threadgroup-memory epoch: increments at each threadgroup_barrier ordering threadgroup memory
  u32 gbase;   // epoch at the start of the running threadgroup
  u32 sgep[kMaxSimdgroups];
  char* tgmem;
  Shadow* shadow;
  i64 tgbytes;
  Fiber* cur;
  const Launch* L;
  Err* E;
  Meta meta[kMaxMeta];
  i32 nmeta;
  // the first read of threadgroup memory no thread had written yet (reported at the next barrier, or as a race
  // when another thread writes the location before it)
  i32 pend;
  i32 pend_tid;
  Meta* pend_meta;
  const char* pend_p;
  u64 pend_pc;
  // --- core only
  i32 failed;
  Fiber* fib;
  Attrs* attrs;
  void* sched_sp;
  char* stacks;
  u64 stack_size;
  i32 nstacks;
  i32 nthreads;
  i64 group;
  u32 gpos[3];
  u32 gsize[3];
};

}  // namespace ks

extern "C" {
ks::Worker* ks_worker();
ks::Fiber* ks_fiber();
ks::Meta* ks_meta(ks::Worker* w, char* lo, char* hi, const char* name, ks::u32 elem);
// Failures: each records the error with its caller's address and abandons the running thread (never returns).
[[noreturn]] void ks_dev_fail(const char* lo, const char* hi, const char* p, ks::u64 size, ks::u64 align, int is_const);
[[noreturn]] void ks_tg_fail(ks::Meta* m, int code, const char* p, int write, int other);
[[noreturn]] void ks_fail_msg(int code, const char* msg);
// Records a read of threadgroup memory that no thread has written yet (the first one; execution goes on).
void ks_tg_uninit(ks::Meta* m, const char* p);
// Blocking points: the running thread waits at a barrier or a collective (site = caller's address).
void ks_barrier(int kind, ks::u32 flags, int line, int col);
void ks_collective(ks::Fiber* f, int (*exec)(ks::Worker*, ks::Fiber* const*, int), int line, int col);
// Recorded by a collective's exec (runs in the scheduler): returns the error code to hand back.
int ks_collective_error(ks::Worker* w, ks::Fiber* f, int code, const char* msg);
int ks_lane_error(ks::Worker* w, ks::Fiber* f, const char* fn, int width, ks::u32 lane);
int ks_matrix_error(ks::Worker* w, ks::Fiber* f, const char* fn, int active);
// Finds the device buffer holding p (for a raw pointer turned back into a checked one); 0 when none.
int ks_find_buffer(const void* p, char** lo, char** hi);
int ks_run(ks::Launch* L, ks::Err* E);
}
