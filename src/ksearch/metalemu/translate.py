"""MSL -> C++ for the CPU engine.

Input: a complete MSL translation unit as `mx.fast.metal_kernel` builds it (MLX's includes, the user's header,
`[[kernel]] void custom_kernel_...(<params with [[buffer(i)]] / [[attribute]]>) { body }`, explicit template
instantiations). Output: C++ over the runtime headers (runtime/metalemu.h) that keeps every original line where it
was (`#line 1 "<tag>"`), plus one `ks_entry_N` / `ks_desc_N` pair per runnable kernel (each non-template kernel,
each explicit instantiation of a template kernel).

The rewrites, all token-level (lexer.py), each keeping the text on its line:
  - `#include <metal_...>` lines go (the runtime provides MSL and MLX's preamble); other includes are errors;
  - `[[...]]` attributes go (after the kernel parameters' are read), and the instantiation statements;
  - address-space pointer and reference types become checked types: `device T*` / `constant T*` -> ks::dptr,
    `threadgroup T*` -> ks::tgptr, `threadgroup T&` -> ks::tgref; `thread` goes, `constant T x` -> `const T x`;
  - `threadgroup T name[N]...;` in a kernel becomes a view of the threadgroup's memory at a compile-time offset,
    with a static check of the total against the limit (translate_tg.py);
  - vector constructors `float4(a, b)` -> ks::make, vector casts (static_cast or C-style) -> ks::vcast (clang would
    reinterpret the bits), `1.5h` / `1.5bf` literals -> half(...) / bfloat(...);
  - `c ? b : d` -> both branches converted to MSL's common type (half mixed with float), `auto x = e` copies the
    value of a threadgroup element (rewrite_expr.py).
Constructs with no emulation (textures, samplers, imageblocks, ray tracing, threadgroup kernel parameters, double)
are compile errors naming the construct and its line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ksearch.metalemu.rewrite_expr import rewrite_auto, rewrite_ternaries, rewrite_vectors
from ksearch.metalemu.source import Unit, fail, parse_type
from ksearch.metalemu.translate_tg import rewrite_threadgroup_decls

FILE_TAG = "kernel.metal"

# Attrs field order (runtime/ks_abi.h, ks_entry.h attr_ptr).
ATTRIBUTES = (
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threads_per_threadgroup", "threads_per_grid", "threadgroups_per_grid", "dispatch_threads_per_threadgroup",
    "grid_origin", "grid_size", "thread_index_in_threadgroup", "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup", "threads_per_simdgroup",
    "thread_execution_width", "thread_index_in_quadgroup", "quadgroup_index_in_threadgroup",
    "quadgroups_per_threadgroup", "dispatch_simdgroups_per_threadgroup", "dispatch_quadgroups_per_threadgroup",
)
UNSUPPORTED = {
    **{t: "textures" for t in ("texture1d", "texture1d_array", "texture2d", "texture2d_array", "texture2d_ms",
                               "texture2d_ms_array", "texture3d", "texturecube", "texturecube_array", "texture_buffer",
                               "depth2d", "depth2d_array", "depthcube", "depthcube_array", "depth2d_ms")},
    "sampler": "samplers", "imageblock": "imageblocks", "threadgroup_imageblock": "imageblocks",
    "ray_data": "ray tracing", "object_data": "mesh shading", "acceleration_structure": "ray tracing",
    "intersection_function_table": "ray tracing", "visible_function_table": "function tables",
    "indirect_command_buffer": "indirect command buffers", "simdgroup_event": "asynchronous copies",
    "simdgroup_async_copy": "asynchronous copies", "coherent": "coherent device memory",
    "patch_control_point": "tessellation",
}
#: Words that are no Metal at all (a Mac rejects them too), and what to write instead.
NOT_METAL = {"double": "Metal has no 64-bit floating point type: use float"}
UNSUPPORTED_PARAM_ATTRS = ("threadgroup", "stage_in", "texture", "sampler", "payload", "imageblock",
                           "color", "vertex_id", "instance_id")
# Identifiers whose presence makes threads block (barriers, SIMD-group functions): such kernels run one fiber per
# thread; the others run their threads one after another on one stack.
_SYNC = re.compile(r"^(threadgroup_barrier|simdgroup_barrier|simd_\w+|quad_\w+|simdgroup_multiply\w*)$")
ADDRESS_SPACES = ("device", "constant", "threadgroup", "thread")


@dataclass
class KernelParam:
    name: str
    kind: str  # buffer | attribute
    index: int  # buffer index, or position in ATTRIBUTES


@dataclass
class KernelFn:
    name: str
    line: int  # the line of `[[kernel]]` (or `kernel`)
    body_line: int  # the line of the body's opening brace
    end_line: int
    templated: bool
    params: list[KernelParam] = field(default_factory=list)


@dataclass
class Entry:
    index: int
    name: str  # the host name (instantiations) or the function name
    function: str  # the C++ expression naming the function (with template arguments)
    kernel: KernelFn


@dataclass
class Translation:
    cpp: str
    entries: list[Entry]
    kernels: list[KernelFn]
    fibers: bool
    tag: str = FILE_TAG

    def entry(self, name: str) -> Entry | None:
        for e in self.entries:
            if e.name == name:
                return e
        plain = [e for e in self.entries if e.kernel.name == name]
        return plain[0] if len(plain) == 1 else None

    def kernel_at(self, line: int) -> KernelFn | None:
        for k in self.kernels:
            if k.line <= line <= k.end_line:
                return k
        return None


def _preprocess(u: Unit) -> None:
    for tok in u.toks:
        if tok.kind != "pp":
            continue
        body = tok.orig.strip()[1:].strip()
        if body.startswith("include"):
            target = body[len("include"):].strip()
            if re.match(r"<metal_\w+>$", target):
                tok.kill()
            else:
                raise fail(f"#include {target} is not supported (MLX's Metal JIT has no include path; the emulation "
                           "provides <metal_*> headers only)", tok.line)
        elif body.startswith("define"):
            tok.text = _rewrite_macro(tok.orig)


def _rewrite_macro(directive: str) -> str:
    """Applies the expression rewrites to a #define's replacement list (line breaks kept)."""
    m = re.match(r"(\s*#\s*define\s+[A-Za-z_]\w*(?:\([^)]*\))?)(.*)", directive, re.S)
    if not m or not m.group(2).strip():
        return directive
    sub = Unit(m.group(2))
    _rewrite_literals(sub)
    _rewrite_address_spaces(sub, in_kernel=lambda k: False, decls=[])
    rewrite_vectors(sub)
    return m.group(1) + "".join(t.emit() for t in sub.toks)


def _rewrite_literals(u: Unit) -> None:
    for k in range(len(u.sig)):
        t = u.t(k)
        if t.kind != "num":
            continue
        m = re.fullmatch(r"((?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(h|H|bf|BF)", t.orig)
        if m:
            num = m.group(1)
            if not re.search(r"[.eE]", num):
                num += ".0"
            kind = "half" if m.group(2) in ("h", "H") else "bfloat"
            t.text = f"::ks::{kind}({num}f)"


def _check_unsupported(u: Unit) -> None:
    for k in range(len(u.sig)):
        t = u.t(k)
        if t.kind != "id" or u.s(k - 1) in (".", "->") or u.s(k + 1) == "(":
            continue
        if t.orig in NOT_METAL:
            raise fail(f"`{t.orig}`: {NOT_METAL[t.orig]}", t.line)
        if t.orig in UNSUPPORTED:
            raise fail(f"not emulated: {UNSUPPORTED[t.orig]} (`{t.orig}`)", t.line)


def _rewrite_address_spaces(u: Unit, in_kernel, decls: list[int]) -> None:  # noqa: ANN001 - a position predicate
    """Pointer/reference types with an address space -> checked types. Threadgroup variable declarations are
    collected in `decls` (positions of their `threadgroup` token) for rewrite_threadgroup_decls."""
    for k in range(len(u.sig)):
        t = u.t(k)
        if t.kind != "id" or t.orig not in ADDRESS_SPACES or t.dead or u.s(k - 1) in (".", "->", "::"):
            continue
        space = t.orig
        if u.s(k - 1) == ")" or (u.s(k - 1) == "const" and u.s(k - 2) == ")"):
            t.kill()  # the address space of a member function's object (`float get() const device`)
            continue
        start = k
        cv: list[str] = []
        while u.s(start - 1) in ("const", "volatile") and not u.t(start - 1).dead:
            start -= 1
            cv.append(u.s(start))
        j = k + 1
        while u.s(j) in ("const", "volatile"):
            cv.append(u.s(j))
            j += 1
        tend = parse_type(u, j)
        if tend < 0:
            raise fail(f"cannot read the type after `{space}`", t.line)
        type_text = u.text(j, tend)
        j = tend + 1
        while u.s(j) in ("const", "volatile"):
            cv.append(u.s(j))
            j += 1
        if space == "constant":
            cv.append("const")
        quals = " ".join(dict.fromkeys(q for q in cv))
        full = f"{quals} {type_text}".strip()
        marker = u.s(j)
        if marker == "*":
            if u.s(j + 1) == "*":
                raise fail(f"not emulated: a pointer to a pointer in the {space} address space", t.line)
            if space == "thread":
                t.kill()
                continue
            wrapper = "::ks::tgptr" if space == "threadgroup" else "::ks::dptr"
            u.kill(start, j)
            u.t(start).text = f"{wrapper}<{full}>"
            u.t(start).dead = True
            if u.s(start - 1) == "<" and u.s(start - 2) == "reinterpret_cast":
                u.t(start - 2).text = "static_cast"
        elif marker in ("&", "&&"):
            if space == "threadgroup":
                u.kill(start, j)
                u.t(start).text = f"::ks::tgref<{full}>"
                u.t(start).dead = True
            elif space == "constant":
                t.text = "const"
            else:
                t.kill()
        elif space == "threadgroup":
            if not in_kernel(k):
                raise fail("threadgroup variables can only be declared in a kernel function", t.line)
            decls.append(start)
        elif space == "constant":
            t.text = "const"
        elif space == "thread":
            t.kill()
        else:
            raise fail("a variable cannot be declared in the device address space", t.line)


def _find_kernels(u: Unit) -> tuple[list[KernelFn], list[tuple[str, str, int]], list[tuple[int, int]]]:
    """Kernels (with their body span in significant positions) and explicit instantiations (host name, function
    expression, line); strips attributes and instantiation statements."""
    kernels: list[KernelFn] = []
    spans: list[tuple[int, int]] = []
    insts: list[tuple[str, str, int]] = []
    k = 0
    while k < len(u.sig):
        s = u.s(k)
        if s == "template" and u.is_attr_open(k + 1):
            end = k
            while end < len(u.sig) and u.s(end) != ";":
                end += 1
            host = re.search(r'host_name\s*\(\s*"([^"]+)"', u.text(k, end))
            dt = next((j for j in range(k, end) if u.s(j) == "decltype"), -1)
            if not host or dt < 0 or u.s(dt + 1) != "(":
                raise fail("unrecognised explicit kernel instantiation", u.t(k).line)
            fexpr = u.text(u.match[dt + 1] + 1, end - 1)
            insts.append((host.group(1), fexpr, u.t(k).line))
            u.kill(k, end)
            k = end + 1
            continue
        is_attr_kernel = u.is_attr_open(k) and u.s(k + 2) == "kernel" and u.s(k + 3) == "]"
        if (is_attr_kernel or (s == "kernel" and u.t(k).kind == "id")) and u.s(
                (k + 5) if is_attr_kernel else (k + 1)) == "void":
            head = k
            k = (k + 5) if is_attr_kernel else (k + 1)
            u.kill(head, k - 1)
            name = u.s(k + 1)
            if u.s(k + 2) != "(":
                raise fail("a kernel function must be `void name(...)`", u.t(k).line)
            close = u.match[k + 2]
            params = _kernel_params(u, k + 3, close - 1, name)
            body = close + 1
            if u.s(body) != "{":
                raise fail(f"kernel {name} has no body", u.t(k).line)
            end = u.match[body]
            templated = any(u.s(j) == "template" for j in range(max(0, head - 3), head)) or _after_template(u, head)
            kernels.append(KernelFn(name, u.t(head).line, u.t(body).line, u.t(end).line, templated, params))
            spans.append((body, end))
            k = body + 1
            continue
        k += 1
    return kernels, insts, spans


def _after_template(u: Unit, head: int) -> bool:
    """Whether a `template <...>` header ends right before position head."""
    if u.s(head - 1) not in (">", ">>"):
        return False
    depth = 0
    j = head - 1
    while j >= 0:
        s = u.s(j)
        if s in (")", "]", "}"):
            j = u.match.get(j, j)
        elif s == ">":
            depth += 1
        elif s == ">>":
            depth += 2
        elif s == "<":
            depth -= 1
            if depth == 0:
                return u.s(j - 1) == "template"
        elif s == ";":
            return False
        j -= 1
    return False


def _kernel_params(u: Unit, a: int, b: int, kernel: str) -> list[KernelParam]:
    params: list[KernelParam] = []
    if a > b:
        return params
    parts: list[tuple[int, int]] = []
    start, depth, j = a, 0, a
    while j <= b:
        s = u.s(j)
        if s in ("(", "["):
            j = u.match.get(j, j)
        elif s == "<":
            depth += 1
        elif s == ">":
            depth -= 1
        elif s == ">>":
            depth -= 2
        elif s == "," and depth == 0:
            parts.append((start, j - 1))
            start = j + 1
        j += 1
    parts.append((start, b))
    for pa, pb in parts:
        attr = next((j for j in range(pa, pb + 1) if u.is_attr_open(j)), -1)
        line = u.t(pa).line
        if attr < 0:
            raise fail(f"kernel {kernel}: parameter `{u.text(pa, pb)}` has no [[buffer(i)]] or attribute", line,
                       kernel)
        aend = u.attr_end(attr)
        spec = u.text(attr + 2, aend - 2).replace(" ", "")
        name = u.s(attr - 1)
        u.kill(attr, aend)
        mb = re.fullmatch(r"buffer\((\d+)\)", spec)
        if mb:
            params.append(KernelParam(name, "buffer", int(mb.group(1))))
        elif spec in ATTRIBUTES:
            params.append(KernelParam(name, "attribute", ATTRIBUTES.index(spec)))
        elif spec.split("(")[0] in UNSUPPORTED_PARAM_ATTRS:
            raise fail(f"kernel {kernel}: not emulated: [[{spec}]] parameters", line, kernel)
        else:
            raise fail(f"kernel {kernel}: unknown parameter attribute [[{spec}]]", line, kernel)
    return params


def _strip_attributes(u: Unit) -> None:
    k = 0
    while k < len(u.sig):
        if u.is_attr_open(k) and not u.t(k).dead:
            end = u.attr_end(k)
            u.kill(k, end)
            k = end + 1
        else:
            k += 1


def _entries(kernels: list[KernelFn], insts: list[tuple[str, str, int]]) -> list[Entry]:
    entries: list[Entry] = []
    by_name = {k.name: k for k in kernels}
    for k in kernels:
        if not k.templated:
            entries.append(Entry(len(entries), k.name, k.name, k))
    for host, fexpr, line in insts:
        base = fexpr.split("<")[0].strip()
        if base not in by_name:
            raise fail(f"instantiation {host!r} names no kernel of this source ({base})", line)
        entries.append(Entry(len(entries), host, fexpr, by_name[base]))
    return entries


def _wrappers(entries: list[Entry]) -> str:
    out = []
    for e in entries:
        descs = ", ".join(f"::ks::B<{p.index}>{{}}" if p.kind == "buffer" else f"::ks::AT<{p.index}>{{}}"
                          for p in e.kernel.params)
        args = f", {descs}" if descs else ""
        out.append(f'extern "C" __attribute__((visibility("default"))) void ks_entry_{e.index}('
                   f"const ::ks::Launch* L, const ::ks::Attrs* A) {{ ::ks::invoke(&{e.function}, L, A{args}); }}")
        out.append(f'extern "C" __attribute__((visibility("default"))) void ks_desc_{e.index}(int* out) '
                   f"{{ ::ks::describe(&{e.function}, out{args}); }}")
    return "\n".join(out)


def translate(source: str, tg_limit: int = 32768) -> Translation:
    """Translates one MSL source; raises MetalEmuError (compile_error) for what the emulation cannot run."""
    u = Unit(source)
    _check_unsupported(u)
    _preprocess(u)
    kernels, insts, spans = _find_kernels(u)
    if not kernels:
        raise fail("no [[kernel]] function in the source", None)
    _strip_attributes(u)
    _rewrite_literals(u)
    in_kernel = lambda k: any(a < k < b for a, b in spans)  # noqa: E731 - a small predicate
    decls: list[int] = []
    _rewrite_address_spaces(u, in_kernel, decls)
    rewrite_threadgroup_decls(u, decls, spans)
    rewrite_vectors(u)
    rewrite_ternaries(u)
    rewrite_auto(u)
    entries = _entries(kernels, insts)
    fibers = any(u.t(k).kind == "id" and _SYNC.match(u.s(k)) for k in range(len(u.sig)))
    body = "".join(t.emit() for t in u.toks)
    cpp = "\n".join([
        '#include "metalemu.h"',
        f"#define KS_TG_LIMIT {int(tg_limit)}UL",
        "#pragma clang attribute push (__attribute__((always_inline)), apply_to = function)",
        f'#line 1 "{FILE_TAG}"',
        body,
        "#pragma clang attribute pop",
        '#line 1 "ks_entries"',
        _wrappers(entries),
        "",
    ])
    return Translation(cpp, entries, kernels, fibers)
