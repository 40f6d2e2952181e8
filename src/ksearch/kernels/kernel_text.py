"""The kernel text handed to `mx.fast.cuda_kernel` and `mx.fast.metal_kernel`, without what only a reader needs.

MLX builds a custom kernel's whole source again on every call (its default header, our header, the signature, our
body: one string, stored with the call's graph node) and compiles it once. So each byte of comment and indentation
costs every call host time: with 60 KB of comment lines MLX's own call took 8.5 us on the H200, 2.2 us with a 12-byte
body (benchmarks/results/prefill-host-time-*.json); the prefill kernels' text is 38-40 KB. `compact` drops comments,
indentation and blank lines and keeps everything the compiler reads: string and character literals as they are, one line for one
line otherwise (preprocessor directives and line continuations need their line ends). Metal's custom kernels are
handed the same way: MLX compares a Metal kernel's whole source with the one it compiled on every evaluation (not
measured on Apple hardware).

MLX's CUDA backend before 0.32.1 kept a process's compiled kernels by name alone (`content_name`): the library's
CUDA kernels are named with a digest of their text, so a kernel whose text changed runs as it now reads, whatever MLX
is installed."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ksearch.backends.msl import MSL_TYPES
from ksearch.backends.nvcc import CUDA_TYPES, template_declarations


def compact(text: str) -> str:
    """`text` without // and /* */ comments (outside literals), leading and trailing blanks, and empty lines."""
    lines = _strip_comments(text).split("\n")
    return "\n".join(line.strip() for line in lines if line.strip()) + "\n"


def _strip_comments(text: str) -> str:
    """Comments replaced: a // comment by nothing up to its line end, a /* */ comment by a space (or by its line ends,
    so that directives around it stay on lines of their own)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = _literal_end(text, i)
            out.append(text[i:j])
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ValueError("kernel text has a /* comment that is never closed; close it with */")
            out.append("\n" * text.count("\n", i, j) or " ")
            i = j + 2
        else:
            j = _next_special(text, i)
            out.append(text[i:j])
            i = j
    return "".join(out)


def _literal_end(text: str, start: int) -> int:
    """The index just past the string or character literal opening at `start` (escapes honoured)."""
    quote, i = text[start], start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == quote:
            return i + 1
        elif text[i] == "\n":
            raise ValueError(f"kernel text has a {quote} literal left open at the end of a line; close it")
        else:
            i += 1
    raise ValueError(f"kernel text has a {quote} literal that is never closed; close it")


def _next_special(text: str, start: int) -> int:
    """The first index from `start` where a literal or a comment may begin (the end of the text if none)."""
    ends = [j for j in (text.find(ch, start) for ch in ("\"", "'", "/")) if j >= 0]
    if not ends:
        return len(text)
    j = min(ends)
    if text[j] == "/" and not text.startswith(("//", "/*"), j):
        return j + 1  # a division: ordinary text, up to and including it
    return j


def cuda_kernel(*, name: str, source: str, header: str = "", constants: Sequence[tuple[str, Any]] = (),
                **kwargs: Any) -> Any:
    """`mx.fast.cuda_kernel` with the body and header compacted once, here, instead of their whole text rebuilt by
    MLX on every call (the library's CUDA kernels are all made through this), under `name` plus a digest of the text
    (`content_name`). `constants` are template arguments written into the header once (`constant_lines`): a kernel
    made with them is called without `template`."""
    import mlx.core as mx

    text, head = compact(source), compact(header) if header else ""
    head += constant_lines(constants)
    name = content_name(name, head, text, kwargs.get("input_names", ()), kwargs.get("output_names", ()),
                        kwargs.get("shared_memory", 0))
    return mx.fast.cuda_kernel(name=name, source=text, header=head, **kwargs)


def constant_lines(constants: Sequence[tuple[str, Any]]) -> str:
    """Template arguments (name, bool | int | dtype) as the constants MLX would write at the top of the kernel, for
    its header instead. MLX formats every template argument into the kernel's name and text on every call: on the
    H200 split-K's seven cost building its call 0.5-2.3 us and the merge's three 0.9-1.6 us, in three processes
    (benchmarks/results/decode-host-time-*.json), of B 1 decode calls of 50-90 us that are mostly host time. They
    go in MLX's namespace, the kernel's own: a name MLX declares there already is a compile error, not a constant
    silently shadowed."""
    if not constants:
        return ""
    lines = _declarations(constants, CUDA_TYPES, "a kernel")
    return "namespace mlx::core::cu {\n" + "\n".join(lines) + "\n}  // namespace mlx::core::cu\n"


def content_name(name: str, header: str, source: str, input_names: Sequence[str] = (),
                 output_names: Sequence[str] = (), shared_memory: int = 0) -> str:
    """`name` and eight hex digits of a digest of the kernel's text, argument names and dynamic shared memory (which
    MLX sets on a compiled kernel once, at its first launch, so a second size under one name would keep the first's).
    MLX's CUDA backend before
    0.32.1 kept a process's compiled custom kernels by name alone, and this package admits MLX from 0.32.0: a second
    text under a name already compiled (one Metal kernel translated for another dtype, a kernel edited and reloaded)
    would run the first. MLX 0.32.1 keys them by name and text itself (tests/test_gpu_kernel_names.py); the digest
    makes that so on every version."""
    digest = hashlib.blake2s(digest_size=4)
    for part in (header, source, *input_names, "|", *output_names, f"smem={shared_memory}"):
        digest.update(part.encode() + b"\0")
    return f"{name}_{digest.hexdigest()}"


def metal_kernel(*, name: str, source: str, header: str = "", constants: Sequence[tuple[str, Any]] = (),
                 **kwargs: Any) -> Any:
    """`mx.fast.metal_kernel` with the body and header compacted once (the library's Metal kernels are all made
    through this; under the Metal emulation the emulated `metal_kernel` receives the same text). `constants` are
    template arguments written into the header once (`metal_constant_lines`), the name then carrying a digest of the
    text: a kernel made with them is called without `template`."""
    import mlx.core as mx

    text, head = compact(source), (compact(header) if header else "") + metal_constant_lines(constants)
    if constants:
        name = content_name(name, head, text, kwargs.get("input_names", ()), kwargs.get("output_names", ()))
    return mx.fast.metal_kernel(name=name, source=text, header=head, **kwargs)


def metal_constant_lines(constants: Sequence[tuple[str, Any]]) -> str:
    """Template arguments (name, bool | int | dtype) as program-scope constants of a Metal kernel's header: MLX's
    Metal call formats its template arguments into the kernel's name and an instantiation on every call, as the CUDA
    call does (`constant_lines`, measured there; on Apple GPUs not measured)."""
    # MSL keeps program-scope variables in the constant address space; a type alias needs none
    return "".join(("" if decl.startswith("using ") else "constant ") + decl + "\n"
                   for decl in _declarations(constants, MSL_TYPES, "a Metal kernel"))


def _declarations(constants: Sequence[tuple[str, Any]], types: dict[str, str], what: str) -> list[str]:
    """MLX's declarations of (name, bool | int | dtype) constants, a dtype written as `types` names it; ValueError for
    a dtype `types` does not name."""
    values: list[tuple[str, Any]] = []
    for name, value in constants:
        if isinstance(value, bool | int):
            values.append((name, value))
            continue
        dtype = str(value).removeprefix("mlx.core.")
        if dtype not in types:
            raise ValueError(f"constant {name}: {value} is not a type {what} constant can be; "
                             f"use one of {', '.join(types)}")
        values.append((name, dtype))
    return template_declarations(values, lambda dtype: types[str(dtype)])
