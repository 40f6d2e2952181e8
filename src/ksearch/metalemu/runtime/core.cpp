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

#include "core_ctx.h"
#include "ks_abi.h"

using namespace ks;

// ---------------------------------------------------------------------------------------------------------------------

static thread_local Worker* tls_w;
static const u64 kFiberStack = 256 * 1024;     // per thread of a synchronising kernel (virtual; touched pages only)
static const u64 kSoloStack = 8 * 1024 * 1024;  // the one stack of a kernel without barriers

extern "C" Worker* ks_worker() { return tls_w; }
extern "C" Fiber* ks_fiber() { return tls_w->cur; }

#include "core_fail.h"

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
        if (!a || (a->line == f->line && a->col == f->col)) {
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
      for (int t = 0; t < n; ++t) set[t] = w->fib[t].line == odd->line && w->fib[t].col == odd->col;
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
