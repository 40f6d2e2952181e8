"""Landlock for a candidate's worker: what it may read and write, applied by the sandbox's launcher.

`read_roots` decides, in the parent, which trees a contained worker may read (system, Python, CUDA and ksearch paths;
never the runs directory, the home directory or /tmp). `restrict`, in the launcher just before the worker is exec'd,
builds the ruleset from them: reads of those trees, writes only to the scratch directory and a few devices, no TCP
bind or connect (ABI 4), no signals to processes outside (ABI 6), and, without a private /proc, no /proc entries of
other processes.

The launcher loads this file before anything but the standard library (see sandbox.py), so only the standard library
may be imported here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from typing import Any

_PR_SET_NO_NEW_PRIVS = 38  # linux/prctl.h: landlock_restrict_self requires it without CAP_SYS_ADMIN

# Landlock (linux/landlock.h); the syscall numbers are the same on every architecture
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE
_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_NET_TCP = 0b11  # bind and connect
_RULE_NET_PORT = 2
#: The TCP ports Nsight Compute's front end and the profiled process talk over (its default base port, 64 of them):
#: the only ones a profiled candidate's process may bind or connect to.
PROFILER_PORTS = range(49152, 49152 + 64)
_SCOPE_ALL = 0b11  # abstract unix sockets and signals

#: Devices a worker may open for writing: the harmless ones and the GPU's.
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_DEVICE_PREFIXES = ("nvidia", "dri", "kfd")
#: What of /etc a worker reads (the dynamic loader, locales, users, the toolchain's alternatives, GPU vendor files),
#: rather than all of it.
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "localtime", "timezone", "locale.alias",
        "locale.conf", "passwd", "group", "nsswitch.conf", "host.conf", "hosts", "gai.conf", "os-release",
        "lsb-release", "debian_version", "redhat-release", "alternatives", "mime.types", "nvidia", "OpenCL",
        "vulkan", "glvnd", "gcc", "clang")
_SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/sys", "/nix/store", "/gnu/store")
#: Without a private /proc: these, and the worker's own /proc/<pid>, never another process's entries.
_PROC = ("cpuinfo", "meminfo", "stat", "loadavg", "uptime", "version", "filesystems", "sys", "driver")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _carve(root: str, hidden: list[str]) -> list[str]:
    """`root`, less every hidden path beneath it: Landlock only grants, so a root that holds a hidden directory is
    replaced by its other entries, level by level."""
    if any(_under(root, h) for h in hidden):
        return []
    inside = [h for h in hidden if _under(h, root)]
    if not inside:
        return [root]
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    out: list[str] = []
    for name in entries:
        out.extend(_carve(os.path.join(root, name), inside))
    return out


def read_roots(env: dict[str, str], src_root: str, task_origin: str) -> list[str]:
    """The paths a contained worker may read: system directories, the interpreter and its site-packages, ksearch's
    source, the CUDA toolkit, and a task file given by path. Never the runs directory, a home directory itself or the
    temporary directory (where other runs' scratch directories and pytest's live)."""
    import tempfile

    wanted = [*_SYSTEM, *(os.path.join("/etc", e) for e in _ETC)]
    try:
        cwd = os.getcwd()
    except OSError:  # deleted under us: relative paths below resolve to nothing readable
        cwd = "/nonexistent"
    # The installation (interpreter, packages, import paths, ksearch's source) and what the user named, readable even
    # inside the temporary directory (a checkout cloned under /tmp): without them no worker starts. Only these trees:
    # their siblings there (other runs' scratch directories) stay hidden.
    installation = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
                    src_root, *(p for p in sys.path if p and os.path.isabs(p) and p != cwd)]
    for name in ("PYTHONPATH", "KSEARCH_SANDBOX_READ"):
        installation += [p for p in os.environ.get(name, "").split(os.pathsep) if os.path.isabs(p)]
    wanted += installation
    for name in ("LD_LIBRARY_PATH", "PATH"):
        wanted += [p for p in os.environ.get(name, "").split(os.pathsep) if os.path.isabs(p)]
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDNN_PATH", "MLX_CCCL_DIR"):
        if os.path.isabs(env.get(name, "")):
            wanted.append(env[name])
    runs = os.path.join(cwd, os.environ.get("KSEARCH_RUNS_DIR") or "runs")
    hidden = [os.path.realpath(runs), runs]
    tmp = os.path.realpath(tempfile.gettempdir())
    never = {"/", "/home", "/root", "/var", "/dev", "/proc", "/run", "/tmp", tmp,
             os.path.realpath(os.path.expanduser("~"))}
    installed = {os.path.realpath(p) for p in installation}
    roots: list[str] = []
    for p in wanted:
        real = os.path.realpath(p)
        in_tmp = _under(real, tmp) or _under(real, "/tmp")
        if real in never or (in_tmp and real not in installed) or not os.path.exists(real):
            continue
        roots.extend(_carve(real, hidden))
    if task_origin.endswith(".py") and os.path.isabs(task_origin):
        # A task file given by path: that one file, wherever it lies (also under /tmp), never inside the runs.
        real = os.path.realpath(task_origin)
        if os.path.isfile(real) and not any(_under(real, h) for h in hidden):
            roots.append(real)
    # One rule per tree: a root beneath another adds nothing.
    return sorted({r for r in roots if not any(r != o and _under(r, o) for o in roots)})


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def abi(libc: Any) -> int:
    """The kernel's Landlock ABI version; 0 where it has none (or it is disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    version = libc.syscall(ctypes.c_long(_SYS_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def restrict(libc: Any, spec: dict[str, Any], own_proc: bool) -> str:
    """Restrict this process (and everything it starts) for good. Returns what applied."""
    version = abi(libc)
    if version < 1:
        return "none: this kernel has no Landlock"
    handled = (1 << 13) - 1 | (_FS_REFER if version >= 2 else 0) | (_FS_TRUNCATE if version >= 3 else 0)
    attr = _RulesetAttr(handled, _NET_TCP if version >= 4 else 0, _SCOPE_ALL if version >= 6 else 0)
    ruleset = libc.syscall(ctypes.c_long(_SYS_CREATE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        return f"none: landlock_create_ruleset failed ({os.strerror(ctypes.get_errno())})"
    keep: list[int] = []

    def allow(path: str, access: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        if not os.path.isdir(path):
            access &= _FS_FILE_RIGHTS
        rule = _PathBeneath(access & handled, fd)
        libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule),
                     ctypes.c_uint32(0))
        if path.startswith("/proc/"):
            keep.append(fd)  # an open descriptor pins the /proc dentry whose inode the rule names
        else:
            os.close(fd)

    for root in spec["read"]:
        allow(root, _READ)
    if spec.get("profiler") and version >= 4:
        for port in PROFILER_PORTS:
            rule_port = _NetPort(_NET_TCP, port)
            libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_NET_PORT),
                         ctypes.byref(rule_port), ctypes.c_uint32(0))
    if spec.get("profiler"):
        # The worker's pid is the profiler's to choose, so all of /proc, with the rights its threads' entries need.
        allow("/proc", _READ | _FS_WRITE_FILE | _FS_TRUNCATE)
        if spec.get("shm"):
            allow("/dev/shm", handled)
    elif own_proc:
        allow("/proc", _READ)
    else:
        allow(f"/proc/{os.getpid()}", _READ)  # the exec'd worker keeps this pid
        for name in _PROC:
            allow(f"/proc/{name}", _READ)
    # Its own threads' entries, writable: CUDA's runtime writes there as it starts (without it cudaMallocManaged fails).
    allow(f"/proc/{os.getpid()}/task", _READ | _FS_WRITE_FILE | _FS_TRUNCATE)
    for dev in _devices():
        allow(dev, _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE | _FS_READ_DIR)
    allow(spec["scratch"], handled)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if libc.syscall(ctypes.c_long(_SYS_RESTRICT), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
        return f"none: landlock_restrict_self failed ({os.strerror(ctypes.get_errno())})"
    os.close(ruleset)
    for fd in keep:
        os.set_inheritable(fd, True)
    return f"landlock abi {version}"


def _devices() -> list[str]:
    found = [d for d in _DEVICES if os.path.exists(d)]
    with contextlib.suppress(OSError):
        found += [f"/dev/{n}" for n in sorted(os.listdir("/dev")) if n.startswith(_DEVICE_PREFIXES)]
    return found
