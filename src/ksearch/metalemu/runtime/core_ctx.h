// ksearch Metal emulation, scheduler core: switching between fibers (one per emulated thread). Included by core.cpp
// only. x86-64 and AArch64 (Linux) switch with a few instructions; other platforms use ucontext.
#pragma once
#include <stdlib.h>
#include <string.h>

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

