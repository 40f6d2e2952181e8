"""Compiling translated kernels with clang, with an on-disk cache.

Two libraries: the scheduler core (runtime/core.cpp), once per compiler and runtime version, and one per
translated kernel source, keyed by the hash of the translated C++ (which changes with the MSL source, the
translator and the threadgroup-memory limit) together with the runtime headers, the flags and the compiler.
The cache lives in $KSEARCH_CACHE/metalemu (default: $XDG_CACHE_HOME/ksearch or ~/.cache/ksearch); files are
written under a temporary name and renamed, so concurrent processes never see half a library.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ksearch.errors import MetalEmuError
from ksearch.knowledge.metal_check import SCALARS, clang_path
from ksearch.metalemu.translate import FILE_TAG, Translation, translate

RUNTIME = Path(__file__).with_name("runtime")
_COMMON = ["-std=c++17", "-O2", "-fPIC", "-fno-exceptions", "-fno-rtti", "-fno-math-errno", "-gline-tables-only"]
KERNEL_FLAGS = _COMMON + [
    "-shared", "-fvisibility=hidden", "-Xclang", "-cl-single-precision-constant", "-ferror-limit=20",
    "-fno-color-diagnostics", "-Wno-gnu-anonymous-struct", "-Wno-nested-anon-types", "-Wno-unused-value",
    "-Wno-unknown-pragmas", "-Wno-unused-variable", "-Wno-c++20-extensions", "-Wno-user-defined-literals",
    "-Wno-duplicate-decl-specifier", "-Wno-ignored-attributes", "-Wno-pragma-clang-attribute",
    # thread-private arrays indexed out of bounds: the handler is the runtime core's, no sanitizer runtime is linked
    "-fsanitize=array-bounds", "-fno-sanitize-recover=array-bounds",
    # C++ lets the compiler assume a loop without side effects ends: a kernel's endless loop was compiled to whatever
    # followed it and failed with an access it never made; on a GPU it runs until the caller's timeout, and so here.
    "-fno-finite-loops",
]
CORE_FLAGS = _COMMON + ["-shared", "-pthread"]
_lock = threading.Lock()
_built: dict[str, Library] = {}


@dataclass
class Library:
    path: Path
    translation: Translation


def cache_dir() -> Path:
    root = os.environ.get("KSEARCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "ksearch")
    d = Path(root) / "metalemu"
    try:
        d.mkdir(parents=True, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    # An unwritable home (a sandboxed worker): a per-user directory under the system's temporary one.
    d = Path(tempfile.gettempdir()) / f"ksearch-metalemu-{os.getuid()}"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def compiler() -> str:
    clang = clang_path()
    if clang is None:
        raise MetalEmuError("the Metal emulation needs clang++ (install clang, or set KSEARCH_CLANG)",
                            status="compile_error")
    return clang


@cache
def _compiler_id(clang: str) -> str:
    out = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=60).stdout
    return out.splitlines()[0] if out else clang


def runtime_sources() -> list[Path]:
    """Every file a compiled kernel or the runtime core is built from: the runtime's own, and the header of MSL's
    scalar type names that ks_types.h includes from the knowledge layer (one copy with the syntax-check shim)."""
    return [*(p for p in sorted(RUNTIME.iterdir()) if p.suffix in (".h", ".cpp")), SCALARS]


@cache
def runtime_hash() -> str:
    h = hashlib.sha256()
    for p in runtime_sources():
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def _compile(cmd: list[str], out: Path, what: str) -> subprocess.CompletedProcess[str]:
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        proc = subprocess.run(cmd + ["-o", str(tmp)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as e:
        raise MetalEmuError(f"clang took more than 600 s to compile {what}", status="compile_error") from e
    if proc.returncode == 0:
        os.replace(tmp, out)
    else:
        tmp.unlink(missing_ok=True)
    return proc


def core_library() -> Path:
    clang = compiler()
    out = cache_dir() / f"core-{_key(runtime_hash(), _compiler_id(clang), *CORE_FLAGS)}.so"
    if not out.exists():
        proc = _compile([clang, *CORE_FLAGS, f"-I{RUNTIME}", str(RUNTIME / "core.cpp")], out, "the runtime core")
        if proc.returncode:
            raise MetalEmuError("the emulation's runtime core does not compile: " + proc.stderr[-2000:],
                                status="compile_error")
    return out


def build(source: str, tg_limit: int = 32768) -> Library:
    """Translates and compiles one MSL source (memoised in-process, cached on disk)."""
    mem_key = _key(source, str(tg_limit))
    with _lock:
        lib = _built.get(mem_key)
    if lib is not None:
        return lib
    tr = translate(source, tg_limit)
    clang = compiler()
    key = _key(tr.cpp, runtime_hash(), _compiler_id(clang), *KERNEL_FLAGS)
    out = cache_dir() / f"k-{key}.so"
    if not out.exists():
        with tempfile.TemporaryDirectory(prefix="ksearch_emu_") as tmp:
            cpp = Path(tmp) / "kernel.cpp"
            cpp.write_text(tr.cpp)
            proc = _compile([clang, *KERNEL_FLAGS, f"-I{RUNTIME}", str(cpp), "-lm"], out, "the kernel")
        if proc.returncode:
            raise compile_failure(proc.stderr, tr, source)
    lib = Library(out, tr)
    with _lock:
        _built[mem_key] = lib
    return lib


def check(source: str, tg_limit: int = 32768) -> Translation:
    """Translates `source` and has clang check the result without generating code (every kernel instantiation is
    still analysed): the errors build() would raise, in a fraction of its time. Nothing is cached."""
    tr = translate(source, tg_limit)
    clang = compiler()
    with tempfile.TemporaryDirectory(prefix="ksearch_emu_") as tmp:
        cpp = Path(tmp) / "kernel.cpp"
        cpp.write_text(tr.cpp)
        flags = [f for f in KERNEL_FLAGS if f not in ("-shared", "-gline-tables-only", "-O2")]
        try:
            proc = subprocess.run([clang, *flags, "-fsyntax-only", f"-I{RUNTIME}", str(cpp)], capture_output=True,
                                  text=True, timeout=600)
        except subprocess.TimeoutExpired as e:
            raise MetalEmuError("clang took more than 600 s to check the kernel", status="compile_error") from e
    if proc.returncode:
        raise compile_failure(proc.stderr, tr, source)
    return tr


_DIAG = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|fatal error|note|warning): "
                   r"(?P<msg>.*)$")
_TG_LIMIT = re.compile(r"requirement '(\d+)UL <= (\d+)UL'")
# clang 14: static_assert failed due to requirement 'R' "M"; clang 16 and later: static assertion failed due to
# requirement 'R': M
_STATIC_ASSERT = re.compile(r"static.assert(?:ion)? failed(?: due to requirement '(?P<req>.*)')?:? \"?(?P<msg>.*?)\"?$")
_FIRST_TYPE = re.compile(r"is_same_v<(?:ks::)?([^,<>]+),")


def compile_failure(stderr: str, tr: Translation, source: str) -> MetalEmuError:
    """The first error of clang's output as a MetalEmuError at its MSL line (a diagnostic inside the runtime
    headers is placed at the kernel line whose instantiation led there)."""
    diags = [m for m in (_DIAG.match(raw.strip()) for raw in stderr.splitlines()) if m]
    errors = [i for i, d in enumerate(diags) if d["sev"] in ("error", "fatal error")]
    if not errors:
        return MetalEmuError("clang failed: " + " | ".join(stderr.strip().splitlines()[-3:]), status="compile_error")
    first = errors[0]
    d = diags[first]
    line = int(d["line"]) if d["file"].endswith(FILE_TAG) else None
    if line is None:
        for later in diags[first + 1:]:
            if later["sev"] in ("error", "fatal error"):
                break
            if later["file"].endswith(FILE_TAG):
                line = int(later["line"])
                break
    kernel = tr.kernel_at(line) if line else None
    kname = kernel.name if kernel else (tr.kernels[0].name if tr.kernels else "")
    msg = d["msg"]
    kind = "compile"
    m = _TG_LIMIT.search(msg)
    if m:
        # One failed check per declaration past the limit: the largest is the kernel's total.
        total = max(int(t.group(1)) for t in _TG_LIMIT.finditer(stderr))
        errors = [i for i in errors if not _TG_LIMIT.search(diags[i]["msg"])] + [first]
        kind = "threadgroup_memory_limit"
        msg = (f"threadgroup memory of {total} bytes (each variable 16-byte aligned) exceeds the limit of "
               f"{int(m.group(2))} bytes; the declaration at this line passes it")
    elif assertion := _STATIC_ASSERT.match(msg):
        msg = _assertion(assertion)
    text = _source_line(source, line)
    where = f"line {line}: " if line else ""
    extra = f" [{text}]" if text else ""
    others = len(errors) - 1
    tail = f" (and {others} more error{'s' if others > 1 else ''})" if others else ""
    body = line - kernel.body_line if kernel and line and line > kernel.body_line else None
    return MetalEmuError(f"{kname}: {where}{msg}{extra}{tail}", status="compile_error", kernel=kname, line=line,
                         body_line=body, kind=kind)


def _assertion(m: re.Match[str]) -> str:
    """A runtime header's static_assert as its message alone (clang spells out the whole requirement), with the type
    it was about where the requirement names one (`atomic<half>`)."""
    first = _FIRST_TYPE.search(m.group("req") or "")
    return m.group("msg") + (f" (here T = {first.group(1).strip()})" if first else "")


def _source_line(source: str, line: int | None) -> str:
    if not line:
        return ""
    lines = source.splitlines()
    return lines[line - 1].strip()[:160] if 0 < line <= len(lines) else ""
