// ksearch Metal emulation, scheduler core: recording errors and the failure entry points kernel code calls (each
// abandons the running thread). Included by core.cpp only, after the worker's thread-local pointer.
#pragma once
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ks_abi.h"

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

