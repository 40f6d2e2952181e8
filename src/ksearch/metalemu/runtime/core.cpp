// ksearch Metal emulation: the scheduler core. Runs the threadgroups of a launch; inside a threadgroup every thread is
// a fiber that runs until it blocks at a barrier or a SIMD-group function, so that
//  - a threadgroup_barrier releases only when every thread of the threadgroup waits at it,
//  - a simdgroup_barrier releases when every lane of the SIMD-group that has not returned waits at it,
//  - a SIMD-group function executes once every lane of the SIMD-group is blocked; the lanes waiting at the same call
//    site are its active lanes (lanes that returned, or wait elsewhere, are inactive, as on a diverged SIMD-group);
//    among several waiting call sites the earliest in the source runs first.
// Compiled once (per compiler and runtime version) into a shared library; kernels resolve its symbols at load time.
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ks_abi.h"

using namespace ks;

// ---------------------------------------------------------------------------------------------------------------------
// Context switch: save the callee-saved registers on the current stack, store its pointer, load the other one.

#if defined(__x86_64__) && !defined(__APPLE__)
extern "C" void ks_ctx_swap(void** save_sp, void* to_sp);
extern "C" void ks_ctx_start();
asm(R"(
.text
.p2align 4
.globl ks_ctx_swap
.hidden ks_ctx_swap
.type ks_ctx_swap,@function
ks_ctx_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size ks_ctx_swap, .-ks_ctx_swap
.globl ks_ctx_start
.hidden ks_ctx_start
.type ks_ctx_start,@function
ks_ctx_start:
    movq %r12, %rdi
    callq *%r13
    ud2
.size ks_ctx_start, .-ks_ctx_start
)");

// The floating-point control words are not switched: kernel code never changes them.
static void ctx_make(void** slot, char* top, u64, void (*fn)(void*), void* arg) {
  u64* sp = (u64*)((u64)top & ~15UL) - 8;  // 7 words + padding: rsp is 16-aligned after `ret` into ks_ctx_start
  sp[0] = 0;
  sp[1] = 0;  // r15
  sp[2] = 0;  // r14
  sp[3] = (u64)fn;   // r13
  sp[4] = (u64)arg;  // r12
  sp[5] = 0;  // rbx
  sp[6] = 0;  // rbp
  sp[7] = (u64)&ks_ctx_start;
  *slot = sp + 1;
}
static inline void ctx_switch(void** from, void** to) { ks_ctx_swap(from, *to); }

#elif defined(__aarch64__) && !defined(__APPLE__)
extern "C" void ks_ctx_swap(void** save_sp, void* to_sp);
extern "C" void ks_ctx_start();
asm(R"(
.text
.p2align 4
.globl ks_ctx_swap
.hidden ks_ctx_swap
.type ks_ctx_swap,%function
ks_ctx_swap:
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    ret
.size ks_ctx_swap, .-ks_ctx_swap
.globl ks_ctx_start
.hidden ks_ctx_start
.type ks_ctx_start,%function
ks_ctx_start:
    mov x0, x19
    blr x20
    brk #0
.size ks_ctx_start, .-ks_ctx_start
)");

static void ctx_make(void** slot, char* top, u64, void (*fn)(void*), void* arg) {
  u64* sp = (u64*)(((u64)top & ~15UL) - 176);
  memset(sp, 0, 176);
  sp[0] = (u64)arg;                 // x19
  sp[1] = (u64)fn;                  // x20
  sp[11] = (u64)&ks_ctx_start;      // x30
  *slot = sp;
}
static inline void ctx_switch(void** from, void** to) { ks_ctx_swap(from, *to); }

#else
// Any other platform: ucontext (correct, about ten times slower per switch).
#include <ucontext.h>
static void ctx_make(void** slot, char* top, u64 size, void (*fn)(void*), void* arg) {
  ucontext_t* uc = (ucontext_t*)*slot;
  if (!uc) *slot = uc = (ucontext_t*)calloc(1, sizeof(ucontext_t));
  getcontext(uc);
  uc->uc_stack.ss_sp = top - size + 4096;
  size -= 4096;
  uc->uc_stack.ss_size = size;
  uc->uc_link = nullptr;
  makecontext(uc, (void (*)())fn, 1, arg);
}
static inline void ctx_switch(void** from, void** to) {
  if (!*from) *from = calloc(1, sizeof(ucontext_t));
  swapcontext((ucontext_t*)*from, (ucontext_t*)*to);
}
#endif

// ---------------------------------------------------------------------------------------------------------------------

static thread_local Worker* tls_w;
static const u64 kFiberStack = 256 * 1024;     // per thread of a synchronising kernel (virtual; touched pages only)
static const u64 kSoloStack = 8 * 1024 * 1024;  // the one stack of a kernel without barriers

extern "C" Worker* ks_worker() { return tls_w; }
extern "C" Fiber* ks_fiber() { return tls_w->cur; }

static i64 rel_pc(const void* pc) {
  Dl_info info;
  if (pc && dladdr(pc, &info) && info.dli_fbase) return (i64)((const char*)pc - (const char*)info.dli_fbase);
  return 0;
}

static void vset_err(Worker* w, int code, int line, const void* pc, int tid, const char* fmt, va_list ap) {
  w->failed = 1;
  Err* E = w->E;
  E->code = code;
  E->line = line;
  E->pc = rel_pc(pc);
  E->pc2 = 0;
  E->group = w->group;
  E->buf = -1;
  for (int d = 0; d < 3; ++d) {
    E->gpos[d] = w->gpos[d];
    E->tpos[d] = tid >= 0 ? w->attrs[tid].thread_position_in_threadgroup[d] : 0;
  }
  vsnprintf(E->msg, sizeof(E->msg), fmt, ap);
}

static void set_err_tid(Worker* w, int code, int line, const void* pc, int tid, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset_err(w, code, line, pc, tid, fmt, ap);
  va_end(ap);
}

// The first read of unwritten threadgroup memory, once it is known that no other thread wrote it in time.
static void report_pending(Worker* w) {
  Meta* m = w->pend_meta;
  long elem = m->elem ? (long)m->elem : 1, idx = (long)(w->pend_p - m->lo) / elem;
  w->pend = 0;
  set_err_tid(w, kErrTgUninit, 0, (const void*)w->pend_pc, w->pend_tid,
              "read of threadgroup memory `%s[%ld]` by thread %d, which no thread of this threadgroup has written",
              m->name, idx, w->pend_tid);
}

// Records the error unless one is recorded already. A pending uninitialised read, the likely cause of what went
// wrong after it, wins over anything but a race (which explains it better).
static void set_err(Worker* w, int code, int line, const void* pc, const Fiber* f, const char* fmt, ...) {
  if (w->failed) return;
  if (w->pend && code != kErrTgRace) {
    report_pending(w);
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vset_err(w, code, line, pc, f ? f->tid : -1, fmt, ap);
  va_end(ap);
}

[[noreturn]] static void abandon(Worker* w) {
  Fiber* f = w->cur;
  f->state = kDead;
  ctx_switch(&f->sp, &w->sched_sp);
  __builtin_trap();
}

static int buffer_of(const Launch* L, const char* lo) {
  for (int i = 0; i < L->nbufs; ++i)
    if (L->bufs[i].ptr == lo) return i;
  return -1;
}

extern "C" int ks_find_buffer(const void* p, char** lo, char** hi) {
  const Launch* L = tls_w->L;
  for (int i = 0; i < L->nbufs; ++i) {
    char* b = L->bufs[i].ptr;
    if (b && (const char*)p >= b && (const char*)p <= b + L->bufs[i].bytes) {
      *lo = b;
      *hi = b + L->bufs[i].bytes;
      return 1;
    }
  }
  return 0;
}

extern "C" [[noreturn]] void ks_dev_fail(const char* lo, const char* hi, const char* p, u64 size, u64 align,
                                         int is_const) {
  void* pc = __builtin_return_address(0);
  Worker* w = tls_w;
  const char* what = is_const ? "read" : "access";
  if (!lo) {
    set_err(w, kErrNull, 0, pc, w->cur, "%s through a null device pointer (or one that points into no buffer)", what);
  } else if (p >= lo && p + size <= hi) {
    set_err(w, kErrMisaligned, 0, pc, w->cur,
            "misaligned %s: a %lu-byte value at byte offset %ld needs %lu-byte alignment", what, size,
            (long)(p - lo), align);
    if (w->E->code != kErrTgUninit) w->E->buf = buffer_of(w->L, lo);
  } else {
    long off = (long)(p - lo), bytes = (long)(hi - lo);
    set_err(w, kErrDeviceOOB, 0, pc, w->cur,
            "out-of-bounds %s: element %ld (bytes %ld..%ld) of a buffer of %ld elements (%ld bytes)", what,
            off >= 0 ? off / (long)size : -((-off + (long)size - 1) / (long)size), off, off + (long)size - 1,
            bytes / (long)size, bytes);
    if (w->E->code != kErrTgUninit) w->E->buf = buffer_of(w->L, lo);
  }
  abandon(w);
}

extern "C" [[noreturn]] void ks_tg_fail(Meta* m, int code, const char* p, int kind, int other) {
  void* pc = __builtin_return_address(0);
  Worker* w = tls_w;
  long off = (long)(p - m->lo), elem = m->elem ? (long)m->elem : 1;
  long idx = off >= 0 ? off / elem : -((-off + elem - 1) / elem);
  int me = w->tid;
  if (code == kErrTgOOB) {
    set_err(w, code, 0, pc, w->cur, "out-of-bounds access of threadgroup array `%s`: element %ld of %ld", m->name,
            idx, (long)(m->hi - m->lo) / elem);
  } else if (code == kErrTgUninit) {
    set_err(w, code, 0, pc, w->cur,
            "read of threadgroup memory `%s[%ld]` (thread %d) that no thread of this threadgroup has written", m->name,
            idx, me);
  } else if (w->pend && kind == 2 && (w->pend_p - w->tgmem) / 2 == (p - w->tgmem) / 2) {
    int reader = w->pend_tid;
    const void* rpc = (const void*)w->pend_pc;
    w->pend = 0;
    set_err_tid(w, code, 0, pc, me,
                "threadgroup memory race on `%s[%ld]`: read by thread %d (simdgroup %d) before any thread wrote it, "
                "then written by thread %d (simdgroup %d) with no threadgroup_barrier(mem_flags::mem_threadgroup) "
                "between (a missing barrier between the write and the read?)",
                m->name, idx, reader, reader / kSimd, me, me / kSimd);
    w->E->pc2 = rel_pc(rpc);
  } else {
    static const char* first[] = {"written", "written", "read"};
    static const char* second[] = {"read", "written", "written"};
    char who[64];
    if (other == 0xFFFF)
      snprintf(who, sizeof who, "an atomic operation");
    else if (other < 0)
      snprintf(who, sizeof who, "several threads");
    else
      snprintf(who, sizeof who, "thread %d (simdgroup %d)", other, other / kSimd);
    set_err(w, code, 0, pc, w->cur,
            "threadgroup memory race on `%s[%ld]`: %s by %s, then %s by thread %d (simdgroup %d) with no "
            "threadgroup_barrier(mem_flags::mem_threadgroup) between%s",
            m->name, idx, first[kind], who, second[kind], me, me / kSimd,
            (other >= 0 && other != 0xFFFF && other / kSimd == me / kSimd) ? " (nor a simdgroup_barrier)" : "");
  }
  abandon(w);
}

extern "C" [[noreturn]] void ks_fail_msg(int code, const char* msg) {
  void* pc = __builtin_return_address(0);
  Worker* w = tls_w;
  set_err(w, code, 0, pc, w->cur, "%s", msg);
  abandon(w);
}

// clang's -fsanitize=array-bounds calls these for an index outside a thread-private array of known size (the
// layout of the data is the sanitizer ABI's: the source location first).
struct UbsanLocation {
  const char* file;
  u32 line;
  u32 column;
};
struct UbsanOutOfBounds {
  UbsanLocation loc;
  const void* array_type;
  const void* index_type;
};
extern "C" [[noreturn]] void __ubsan_handle_out_of_bounds_abort(UbsanOutOfBounds* d, u64 index) {
  Worker* w = tls_w;
  int line = d && d->loc.file && strstr(d->loc.file, "kernel.metal") ? (int)d->loc.line : 0;
  set_err(w, kErrPrivateOOB, line, nullptr, w->cur,
          "out-of-bounds index %ld into a thread-private array (thread %d)", (long)index, w->tid);
  abandon(w);
}
extern "C" void __ubsan_handle_out_of_bounds(UbsanOutOfBounds* d, u64 index) {
  __ubsan_handle_out_of_bounds_abort(d, index);
}

extern "C" void ks_tg_uninit(Meta* m, const char* p) {
  Worker* w = tls_w;
  if (w->pend) return;
  w->pend = 1;
  w->pend_meta = m;
  w->pend_p = p;
  w->pend_tid = w->tid;
  w->pend_pc = (u64)__builtin_return_address(0);
}

extern "C" Meta* ks_meta(Worker* w, char* lo, char* hi, const char* name, u32 elem) {
  for (int i = 0; i < w->nmeta; ++i)
    if (w->meta[i].lo == lo && w->meta[i].name == name) return &w->meta[i];
  int i = w->nmeta < kMaxMeta ? w->nmeta++ : kMaxMeta - 1;
  w->meta[i] = Meta{lo, hi, name, w, elem, 0};
  return &w->meta[i];
}

extern "C" void ks_barrier(int kind, u32 flags, int line, int col) {
  Worker* w = tls_w;
  Fiber* f = w->cur;
  f->state = kind;
  f->flags = flags;
  f->line = line;
  f->col = col;
  f->pc = (u64)__builtin_return_address(0);
  ctx_switch(&f->sp, &w->sched_sp);
}

extern "C" void ks_collective(Fiber* f, int (*exec)(Worker*, Fiber* const*, int), int line, int col) {
  Worker* w = tls_w;
  f->state = kWaitSimd;
  f->exec = exec;
  f->line = line;
  f->col = col;
  f->pc = (u64)__builtin_return_address(0);
  ctx_switch(&f->sp, &w->sched_sp);
}

extern "C" int ks_collective_error(Worker* w, Fiber* f, int code, const char* msg) {
  set_err(w, code, f->line, nullptr, f, "%s", msg);
  return code;
}

extern "C" int ks_lane_error(Worker* w, Fiber* f, const char* fn, int width, u32 lane) {
  set_err(w, kErrShuffle, f->line, nullptr, f, "%s from lane %u (thread %d): outside the %s (lanes 0-%d)", fn, lane,
          f->tid, width == kSimd ? "simdgroup" : "quad", width - 1);
  return kErrShuffle;
}

extern "C" int ks_matrix_error(Worker* w, Fiber* f, const char* fn, int active) {
  set_err(w, kErrMatrix, f->line, nullptr, f,
          "%s with %d of the 32 lanes of simdgroup %d active: simdgroup_matrix operations need the whole simdgroup", fn,
          active, f->sg);
  return kErrMatrix;
}

// ---------------------------------------------------------------------------------------------------------------------
// Scheduling

static void fiber_main(void* arg) {
  Worker* w = (Worker*)arg;
  Fiber* f = w->cur;
  w->L->entry(w->L, &w->attrs[f->tid]);
  f->state = kExited;
  ctx_switch(&f->sp, &w->sched_sp);
  __builtin_trap();
}

static void run_fiber(Worker* w, Fiber* f) {
  w->cur = f;
  w->tid = f->tid;
  ctx_switch(&w->sched_sp, &f->sp);
}

// "3-5, 9" for the threads whose bit is set.
static void ranges(const unsigned char* set, int n, char* out, int cap) {
  int len = 0;
  out[0] = 0;
  for (int i = 0; i < n && len < cap - 24;) {
    if (!set[i]) { ++i; continue; }
    int j = i;
    while (j + 1 < n && set[j + 1]) ++j;
    len += snprintf(out + len, cap - len, len ? ", %d" : "%d", i);
    if (j > i) len += snprintf(out + len, cap - len, "-%d", j);
    i = j + 1;
  }
}

static bool site_less(const Fiber* a, const Fiber* b) {
  if (a->line != b->line) return a->line < b->line;
  if (a->col != b->col) return a->col < b->col;
  return a->pc < b->pc;
}

// Runs the lanes of one SIMD-group until each has returned or waits at a threadgroup barrier. 0, or 1 on error.
static int run_simdgroup(Worker* w, int sg) {
  int lo = sg * kSimd, hi = lo + kSimd < w->nthreads ? lo + kSimd : w->nthreads;
  for (;;) {
    for (int t = lo; t < hi; ++t) {
      Fiber* f = &w->fib[t];
      if (f->state == kReady) {
        run_fiber(w, f);
        if (w->failed) return 1;
      }
    }
    Fiber* pick = nullptr;
    for (int t = lo; t < hi; ++t)
      if (w->fib[t].state == kWaitSimd && (!pick || site_less(&w->fib[t], pick))) pick = &w->fib[t];
    if (pick) {
      Fiber* bylane[kSimd] = {};
      int n = 0;
      for (int t = lo; t < hi; ++t)
        if (w->fib[t].state == kWaitSimd && w->fib[t].pc == pick->pc) {
          bylane[t - lo] = &w->fib[t];
          ++n;
        }
      if (pick->exec(w, bylane, n)) return 1;
      for (int l = 0; l < kSimd; ++l)
        if (bylane[l]) {
          bylane[l]->state = kReady;
          bylane[l]->seq++;
        }
      continue;
    }
    int nbar = 0, ntg = 0;
    u32 flags = 0;
    Fiber *fb = nullptr, *ft = nullptr;
    for (int t = lo; t < hi; ++t) {
      Fiber* f = &w->fib[t];
      if (f->state == kWaitSgBar) {
        ++nbar;
        flags |= f->flags;
        if (!fb || site_less(f, fb)) fb = f;
      } else if (f->state == kWaitTg) {
        ++ntg;
        if (!ft) ft = f;
      }
    }
    if (!nbar) return 0;
    if (ntg) {
      unsigned char a[kSimd] = {}, b[kSimd] = {};
      for (int t = lo; t < hi; ++t) {
        a[t - lo] = w->fib[t].state == kWaitSgBar;
        b[t - lo] = w->fib[t].state == kWaitTg;
      }
      char ra[200], rb[200];
      ranges(a, kSimd, ra, sizeof ra);
      ranges(b, kSimd, rb, sizeof rb);
      set_err(w, kErrBarrier, fb->line, nullptr, fb,
              "simdgroup_barrier at line %d is reached by lanes %s of simdgroup %d while lanes %s wait at the "
              "threadgroup_barrier at line %d: every lane of the simdgroup must reach the same barrier",
              fb->line, ra, sg, rb, ft->line);
      return 1;
    }
    if (flags & kMemThreadgroup) w->sgep[sg]++;
    for (int t = lo; t < hi; ++t)
      if (w->fib[t].state == kWaitSgBar) w->fib[t].state = kReady;
  }
}

static void fill_attrs(Worker* w) {
  const Launch* L = w->L;
  u32 ng[3], n = w->nthreads;
  for (int d = 0; d < 3; ++d) ng[d] = (L->grid[d] + L->tg[d] - 1) / L->tg[d];
  u32 tgsize = L->tg[0] * L->tg[1] * L->tg[2];
  for (u32 t = 0; t < n; ++t) {
    Attrs& a = w->attrs[t];
    u32 p[3] = {t % w->gsize[0], (t / w->gsize[0]) % w->gsize[1], t / (w->gsize[0] * w->gsize[1])};
    for (int d = 0; d < 3; ++d) {
      a.thread_position_in_threadgroup[d] = p[d];
      a.threadgroup_position_in_grid[d] = w->gpos[d];
      a.thread_position_in_grid[d] = w->gpos[d] * L->tg[d] + p[d];
      a.threads_per_threadgroup[d] = w->gsize[d];
      a.threads_per_grid[d] = L->grid[d];
      a.threadgroups_per_grid[d] = ng[d];
      a.dispatch_threads_per_threadgroup[d] = L->tg[d];
      a.grid_origin[d] = 0;
      a.grid_size[d] = L->grid[d];
    }
    a.thread_index_in_threadgroup = t;
    a.thread_index_in_simdgroup = t % kSimd;
    a.simdgroup_index_in_threadgroup = t / kSimd;
    a.simdgroups_per_threadgroup = (n + kSimd - 1) / kSimd;
    a.threads_per_simdgroup = kSimd;
    a.thread_execution_width = kSimd;
    a.thread_index_in_quadgroup = t % 4;
    a.quadgroup_index_in_threadgroup = t / 4;
    a.quadgroups_per_threadgroup = (n + 3) / 4;
    a.dispatch_simdgroups_per_threadgroup = (tgsize + kSimd - 1) / kSimd;
    a.dispatch_quadgroups_per_threadgroup = (tgsize + 3) / 4;
  }
}

static int run_group(Worker* w, i64 g) {
  const Launch* L = w->L;
  u32 ng[3];
  for (int d = 0; d < 3; ++d) ng[d] = (L->grid[d] + L->tg[d] - 1) / L->tg[d];
  w->group = g;
  w->gpos[0] = (u32)(g % ng[0]);
  w->gpos[1] = (u32)((g / ng[0]) % ng[1]);
  w->gpos[2] = (u32)(g / ((i64)ng[0] * ng[1]));
  for (int d = 0; d < 3; ++d) {
    u32 left = L->grid[d] - w->gpos[d] * L->tg[d];
    w->gsize[d] = left < L->tg[d] ? left : L->tg[d];
  }
  int n = (int)(w->gsize[0] * w->gsize[1] * w->gsize[2]);
  w->nthreads = n;
  fill_attrs(w);
  w->gbase = ++w->gepoch;
  w->nmeta = 0;
  w->pend = 0;
  int nsg = (n + kSimd - 1) / kSimd;
  for (int s = 0; s < nsg; ++s) w->sgep[s] = 0;

  if (!L->fibers) {
    for (int t = 0; t < n; ++t) {
      Fiber* f = &w->fib[t];
      f->state = kReady;
      f->tid = t;
      f->lane = t % kSimd;
      f->sg = t / kSimd;
      ctx_make(&f->sp, w->stacks + w->stack_size, w->stack_size, fiber_main, w);
      run_fiber(w, f);
      if (w->failed) return 1;
      if (f->state != kExited) {
        set_err(w, kErrInternal, f->line, nullptr, f, "a thread blocked in a kernel compiled without barriers");
        return 1;
      }
    }
    if (w->pend) {
      report_pending(w);
      return 1;
    }
    return 0;
  }

  for (int t = 0; t < n; ++t) {
    Fiber* f = &w->fib[t];
    f->state = kReady;
    f->tid = t;
    f->lane = t % kSimd;
    f->sg = t / kSimd;
    f->seq = 0;
    ctx_make(&f->sp, w->stacks + (u64)(t + 1) * w->stack_size, w->stack_size, fiber_main, w);
  }
  for (;;) {
    for (int s = 0; s < nsg; ++s)
      if (run_simdgroup(w, s)) return 1;
    // Every thread has returned or waits at a threadgroup barrier.
    int nwait = 0, nexit = 0;
    u32 flags = 0;
    Fiber *a = nullptr, *b = nullptr;
    int na = 0, nb = 0;
    for (int t = 0; t < n; ++t) {
      Fiber* f = &w->fib[t];
      if (f->state == kWaitTg) {
        ++nwait;
        flags |= f->flags;
        if (!a || a->pc == f->pc) {
          a = a ? a : f;
          ++na;
        } else {
          if (!b) b = f;
          ++nb;
        }
      } else {
        ++nexit;
      }
    }
    if (w->pend) {
      report_pending(w);
      return 1;
    }
    if (!nwait) return 0;
    unsigned char set[kMaxThreads];
    char r1[240], r2[240];
    if (nexit) {
      for (int t = 0; t < n; ++t) set[t] = w->fib[t].state != kWaitTg;
      ranges(set, n, r1, sizeof r1);
      set_err(w, kErrBarrier, a->line, nullptr, a,
              "threadgroup_barrier at line %d is never reached by threads %s of the threadgroup (of %d), which "
              "returned before it: every thread of the threadgroup must reach each barrier",
              a->line, r1, n);
      return 1;
    }
    if (b) {
      // Name the barrier fewer threads reached: usually the one inside a branch.
      Fiber* odd = nb < na ? b : a;
      Fiber* other = odd == a ? b : a;
      for (int t = 0; t < n; ++t) set[t] = w->fib[t].pc == odd->pc;
      ranges(set, n, r1, sizeof r1);
      for (int t = 0; t < n; ++t) set[t] = !set[t];
      ranges(set, n, r2, sizeof r2);
      set_err(w, kErrBarrier, odd->line, nullptr, odd,
              "threadgroup_barrier at line %d is reached only by threads %s while threads %s wait at the "
              "threadgroup_barrier at line %d: every thread of the threadgroup must reach the same barrier",
              odd->line, r1, r2, other->line);
      return 1;
    }
    if (flags & kMemThreadgroup) w->gepoch++;
    for (int t = 0; t < n; ++t) w->fib[t].state = kReady;
  }
}

static Worker* worker_for(const Launch* L) {
  static thread_local Worker* w = nullptr;
  if (!w) {
    w = (Worker*)calloc(1, sizeof(Worker));
    w->fib = (Fiber*)aligned_alloc(64, sizeof(Fiber) * kMaxThreads);
    memset(w->fib, 0, sizeof(Fiber) * kMaxThreads);
    w->attrs = (Attrs*)calloc(kMaxThreads, sizeof(Attrs));
  }
  i64 need = L->tg_limit > 0 ? L->tg_limit : 0;
  need = (need + 64) & ~63L;
  if (w->tgbytes < need) {
    free(w->tgmem);
    free(w->shadow);
    w->tgmem = (char*)aligned_alloc(64, need);
    memset(w->tgmem, 0, need);
    w->shadow = (Shadow*)calloc(need / 2 + 1, sizeof(Shadow));  // epochs 0: never written
    w->tgbytes = need;
  }
  u64 stack = L->fibers ? kFiberStack : kSoloStack;
  int nst = L->fibers ? (int)(L->tg[0] * L->tg[1] * L->tg[2]) : 1;
  if (w->stack_size != stack || w->nstacks < nst) {
    // Stack i spans [stacks + i*size, stacks + (i+1)*size); its lowest page is a guard page, so that an overflow
    // faults instead of corrupting the neighbouring stack.
    long page = sysconf(_SC_PAGESIZE);
    if (w->stacks) munmap(w->stacks, (u64)w->nstacks * w->stack_size);
    u64 bytes = (u64)nst * stack;
    char* m = (char*)mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      w->stacks = nullptr;
      w->nstacks = 0;
      return nullptr;
    }
    for (int i = 0; i < nst; ++i) mprotect(m + (u64)i * stack, page, PROT_NONE);
    w->stacks = m;
    w->stack_size = stack;
    w->nstacks = nst;
  }
  return w;
}

extern "C" int ks_run(Launch* L, Err* E) {
  Worker* w = worker_for(L);
  if (!w) {
    E->code = kErrInternal;
    snprintf(E->msg, sizeof E->msg, "cannot map the thread stacks");
    return 1;
  }
  tls_w = w;
  w->L = L;
  w->E = E;
  w->failed = 0;
  w->checks = L->checks;
  w->cur = nullptr;
  for (;;) {
    if (__atomic_load_n(&L->stop, __ATOMIC_ACQUIRE)) break;
    i64 g = __atomic_fetch_add(&L->next, 1, __ATOMIC_ACQ_REL);
    if (g >= L->ngroups) break;
    if (run_group(w, g)) {
      __atomic_store_n(&L->stop, 1, __ATOMIC_RELEASE);
      tls_w = nullptr;
      return 1;
    }
  }
  tls_w = nullptr;
  return 0;
}
