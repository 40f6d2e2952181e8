"""Containment of a candidate's worker on Linux: what it may write, read, reach and leave behind.

The parent builds a plan (`plan`) and starts `python -I -S sandbox.py PLAN -- python -m ksearch.harness.worker`. This
file then runs as a small launcher, before anything but the standard library is loaded (a process must still be
single-threaded to enter a user namespace):

    launcher (outside)        waits, mirrors the worker's exit, kills whatever is left (a child subreaper)
     └─ init (pid 1)          only where a PID namespace is available: its own /proc; when it exits, the kernel
         │                    kills every process of the namespace, double-forked daemons included
         └─ worker            Landlock applied, capabilities dropped, then exec'd into the harness's worker

Mechanisms, each used where the kernel offers it and recorded in the result's environment:
- a user namespace with new network, PID, IPC and mount namespaces (no network at all: not even loopback);
- Landlock: writes only to the scratch directory (and a few devices), reads only system, Python, CUDA and ksearch
  paths (never the runs directory, the home directory or /tmp), no TCP bind or connect, no signals to processes
  outside (ABI 6), and, without a private /proc, no /proc entries of other processes;
- without Landlock: in a mount namespace every mount is made read-only except the scratch directory; as root without
  namespaces the worker becomes the user nobody;
- always a child subreaper in the launcher: processes that escape their parent end up here and are killed.

Only the standard library may be imported at module level here.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import mmap
import os
import signal
import struct
import sys
from typing import Any

# prctl and clone constants (linux/prctl.h, linux/sched.h, linux/mount.h)
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_SET_CHILD_SUBREAPER = 1, 38, 24, 36
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18

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


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


# -- the parent's side -------------------------------------------------------------------------------------------

def settings() -> set[str]:
    """KSEARCH_SANDBOX: unset or `auto`; `off` to run candidates uncontained (recorded in every result); or a comma
    list of mechanisms to leave out: `no-landlock`, `no-namespaces`, `no-pid` (the PID namespace alone)."""
    raw = os.environ.get("KSEARCH_SANDBOX", "auto").strip().lower()
    return {s.strip() for s in raw.split(",") if s.strip() and s.strip() != "auto"}


def unavailable() -> str | None:
    """Why candidates run uncontained here, or None."""
    if not sys.platform.startswith("linux"):
        return f"none: {sys.platform} offers no sandbox the harness can use unprivileged"
    if "off" in settings():
        return "none: disabled by KSEARCH_SANDBOX=off"
    return None


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
    wanted += [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
               src_root]
    try:
        cwd = os.getcwd()
    except OSError:  # deleted under us: relative paths below resolve to nothing readable
        cwd = "/nonexistent"
    wanted += [p for p in sys.path if p and os.path.isabs(p) and p != cwd]
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "PATH", "KSEARCH_SANDBOX_READ"):
        wanted += [p for p in os.environ.get(name, "").split(os.pathsep) if os.path.isabs(p)]
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDNN_PATH", "MLX_CCCL_DIR"):
        if os.path.isabs(env.get(name, "")):
            wanted.append(env[name])
    runs = os.path.join(cwd, os.environ.get("KSEARCH_RUNS_DIR") or "runs")
    hidden = [os.path.realpath(runs), runs]
    tmp = os.path.realpath(tempfile.gettempdir())
    never = {"/", "/home", "/root", "/var", "/dev", "/proc", "/run", os.path.realpath(os.path.expanduser("~"))}
    roots: list[str] = []
    for p in wanted:
        real = os.path.realpath(p)
        if real in never or _under(real, tmp) or _under(real, "/tmp") or not os.path.exists(real):
            continue
        roots.extend(_carve(real, hidden))
    if task_origin.endswith(".py") and os.path.isabs(task_origin):
        # A task file given by path: that one file, wherever it lies (also under /tmp), never inside the runs.
        real = os.path.realpath(task_origin)
        if os.path.isfile(real) and not any(_under(real, h) for h in hidden):
            roots.append(real)
    # One rule per tree: a root beneath another adds nothing.
    return sorted({r for r in roots if not any(r != o and _under(r, o) for o in roots)})


def plan(scratch: str, status_fd: int, env: dict[str, str], src_root: str, task_origin: str,
         gpu: bool = False, profiler: str | None = None) -> dict[str, Any]:
    """What the launcher applies. `gpu`: the worker will use an NVIDIA GPU, which rules out a PID namespace.
    `profiler`: the path of a profiler (ncu) that runs inside the sandbox and starts the worker as its child; its
    installation becomes readable, the network namespace gets a loopback on which only PROFILER_PORTS may be used,
    the mount namespace a /dev/shm of its own (writable), and /proc is readable (the worker is the profiler's
    child, a pid unknown when the rules are made)."""
    skip = settings() | ({"no-pid"} if gpu else set())
    read = read_roots(env, src_root, task_origin)
    if profiler:
        # The profiler's own directory, and its installation's (ncu runs helpers beside it, e.g. target/, sections/).
        import tempfile

        where = os.path.dirname(os.path.realpath(profiler))
        home = os.path.dirname(where)
        never = {"/", "/usr", "/opt", "/home", "/root", os.path.realpath(os.path.expanduser("~"))}
        keep_home = home not in never and not _under(home, os.path.realpath(tempfile.gettempdir()))
        read = sorted({*read, where, *([home] if keep_home else [])})
    return {"scratch": os.path.realpath(scratch), "status_fd": status_fd, "parent": os.getpid(), "src": src_root,
            "read": read, "skip": sorted(skip), "profiler": bool(profiler)}


def command(spec: dict[str, Any], argv: list[str]) -> list[str]:
    """The launcher's command line: an isolated interpreter without site-packages (nothing but this file loads
    before the namespaces are entered), then the worker's own command."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), json.dumps(spec), "--", *argv]


# -- Landlock ----------------------------------------------------------------------------------------------------

class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def landlock_abi(libc: Any = None) -> int:
    """The kernel's Landlock ABI version; 0 where it has none (or it is disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = libc or _libc()
    abi = libc.syscall(ctypes.c_long(_SYS_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(abi), 0)


def _landlock(libc: Any, spec: dict[str, Any], own_proc: bool) -> str:
    """Restrict this process (and everything it starts) for good. Returns what applied."""
    abi = landlock_abi(libc)
    if abi < 1:
        return "none: this kernel has no Landlock"
    handled = (1 << 13) - 1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    attr = _RulesetAttr(handled, _NET_TCP if abi >= 4 else 0, _SCOPE_ALL if abi >= 6 else 0)
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
    if spec.get("profiler") and abi >= 4:
        for port in PROFILER_PORTS:
            rule_port = _NetPort(_NET_TCP, port)
            libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_NET_PORT),
                         ctypes.byref(rule_port), ctypes.c_uint32(0))
    if spec.get("profiler"):
        allow("/proc", _READ | _FS_WRITE_FILE)
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
    return f"landlock abi {abi}"


def _devices() -> list[str]:
    found = [d for d in _DEVICES if os.path.exists(d)]
    with contextlib.suppress(OSError):
        found += [f"/dev/{n}" for n in sorted(os.listdir("/dev")) if n.startswith(_DEVICE_PREFIXES)]
    return found


# -- namespaces ---------------------------------------------------------------------------------------------------

def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _namespaces(libc: Any, skip: set[str]) -> tuple[set[str], str]:
    """Enter new user, network, PID, IPC and mount namespaces (as root: without the user namespace where that is
    refused). Returns the namespaces entered and, when none, why."""
    if "no-namespaces" in skip:
        return set(), "left out (KSEARCH_SANDBOX)"
    uid, gid = os.geteuid(), os.getegid()
    # NVIDIA's unified memory refuses a process in a PID namespace of its own (cudaMallocManaged fails, measured on
    # an H200 with driver 580): a GPU worker goes without one, and the subreaper ends what it leaves behind.
    pid = set() if "no-pid" in skip else {"pid"}
    rest = _CLONE_NEWNET | (_CLONE_NEWPID if pid else 0) | _CLONE_NEWIPC | _CLONE_NEWNS
    if libc.unshare(_CLONE_NEWUSER | rest) == 0:
        # Unmapped, the process would still be in the namespaces, only unable to mount its own /proc (then recorded).
        with contextlib.suppress(OSError):
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        return {"user", "net", "ipc", "mount"} | pid, ""
    why = os.strerror(ctypes.get_errno())
    if uid == 0 and libc.unshare(rest) == 0:
        return {"net", "ipc", "mount"} | pid, ""
    return set(), f"unshare refused ({why})"


def _loopback_up() -> bool:
    """Bring up `lo` in a new network namespace (still holding the namespace's capabilities): the profiler and its
    target talk over it; nothing outside the namespace is reachable from it."""
    import fcntl
    import socket

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            req = fcntl.ioctl(sock, siocgifflags, struct.pack("16sh", b"lo", 0) + b"\0" * 22)
            flags = struct.unpack("16sh", req[:18])[1]
            fcntl.ioctl(sock, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up) + b"\0" * 22)
        return True
    except OSError:
        return False


def _private_shm(libc: Any) -> bool:
    """In the new mount namespace, a /dev/shm of the sandbox's own (a fresh tmpfs): the profiler and its target may
    share memory there, and nothing written there outlives the sandbox or reaches the host's /dev/shm."""
    if not os.path.isdir("/dev/shm"):
        return False
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return False
    return libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=268435456,mode=1777") == 0


def _private_proc(libc: Any) -> bool:
    """In the new mount namespace: nothing propagates back, and /proc shows this PID namespace alone."""
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return False
    return libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None) == 0


def _read_only_mounts(libc: Any, scratch: str) -> str:
    """The fallback without Landlock, in the mount namespace: every mount read-only but the scratch directory."""
    if libc.mount(scratch.encode(), scratch.encode(), None, _MS_BIND, None) != 0:
        return f"none: cannot bind the scratch directory ({os.strerror(ctypes.get_errno())})"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].encode().decode("unicode_escape") for line in f]
    failed = 0
    for point in reversed(points):
        if point == scratch or point == "/proc" or point.startswith("/proc/"):
            continue  # /proc stays as it is: CUDA's runtime writes its threads' entries there as it starts
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        for extra in (0, _MS_NOSUID, _MS_NOSUID | _MS_NODEV, _MS_NOSUID | _MS_NODEV | _MS_NOEXEC):
            if libc.mount(None, point.encode(), None, flags | extra, None) == 0:
                break
        else:
            failed += 1
    return "mount namespace: every mount read-only but scratch" + (f" ({failed} mounts left writable)"
                                                                     if failed else "")


def _world_readable(path: str) -> bool:
    """Whether any user may reach and read `path` (the interpreter under /root often is not)."""
    import stat

    real = os.path.realpath(path)
    parts = real.split("/")
    for i in range(2, len(parts) + 1):
        try:
            mode = os.stat("/".join(parts[:i]) or "/").st_mode
        except OSError:
            return False
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH or i == len(parts) and not mode & stat.S_IROTH:
            return False
    return True


def _become_nobody(scratch: str) -> str:
    for dirpath, dirnames, filenames in os.walk(scratch):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.chown(name, 65534, 65534, follow_symlinks=False)
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    return "user nobody: writes only to scratch and where anyone may write"


def _drop_capabilities(libc: Any) -> None:
    """The bounding set, so that the exec'd worker starts with no capability (in the user namespace it would
    otherwise hold them all there)."""
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


# -- the launcher, init and the worker ----------------------------------------------------------------------------

def _close_fds() -> None:
    os.closerange(3, 1 << 16)


def _exec_worker(libc: Any, spec: dict[str, Any], argv: list[str], report: dict[str, str], ns: set[str],
                 own_proc: bool) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    skip = set(spec["skip"])
    if spec.get("profiler") and "mount" in ns:
        spec["shm"] = _private_shm(libc)  # before Landlock: its rule must name the new mount
    fs = "none: left out (KSEARCH_SANDBOX)" if "no-landlock" in skip else _landlock(libc, spec, own_proc)
    landlock = fs.startswith("landlock")
    tcp = landlock and landlock_abi(libc) >= 4
    ports = f" (the profiler's ports {PROFILER_PORTS[0]}-{PROFILER_PORTS[-1]} only)" if spec.get("profiler") else ""
    if spec.get("profiler") and "net" in ns:
        ns = ns | {"loopback"} if _loopback_up() else ns
    report["network"] = ("namespace" + (" with its own loopback" if "loopback" in ns else "")
                         + (" and landlock tcp" + ports if tcp else "") if "net" in ns else
                         "landlock tcp (UDP not covered)" if tcp else
                         "none: no network namespace, and no Landlock TCP rules (ABI 4)")
    if landlock:
        report["filesystem"] = fs + ": writes only to scratch; reads only system, Python and ksearch paths"
        if spec.get("profiler"):
            report["other_processes"] = "none: /proc readable (the profiled worker is the profiler's child)"
            report["filesystem"] += "; a /dev/shm of its own" if spec.get("shm") else ""
        elif not own_proc:
            report["other_processes"] = "landlock: /proc limited to the worker's own entries"
    elif "mount" in ns:
        report["filesystem"] = _read_only_mounts(libc, spec["scratch"]) + f"; reads not limited (Landlock {fs})"
    elif os.geteuid() == 0:
        blocked = [p for p in (argv[0], spec["src"]) if not _world_readable(p)]
        try:
            if blocked:
                raise PermissionError(errno.EACCES, f"nobody could not read {blocked[0]}")
            report["filesystem"] = _become_nobody(spec["scratch"]) + f"; reads not limited (Landlock {fs})"
        except OSError as exc:
            report["filesystem"] = f"{fs}; no namespace, and not run as nobody ({exc.strerror})"
    else:
        report["filesystem"] = f"{fs}; no mount namespace either"
    _drop_capabilities(libc)
    fd = spec["status_fd"]
    try:
        os.write(fd, json.dumps(report).encode())
    finally:
        os.close(fd)
    os.execv(argv[0], argv)


def _init(libc: Any, spec: dict[str, Any], argv: list[str], report: dict[str, str], ns: set[str],
          shared: mmap.mmap) -> None:
    """PID 1 of the namespace: starts the worker, reaps orphans, and exits with it (the kernel then kills the
    rest)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)  # as PID 1, signals from inside the namespace are then ignored
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    own_proc = _private_proc(libc)
    report["processes"] = "pid namespace"
    report["other_processes"] = ("pid namespace with its own /proc" if own_proc else
                                 "none: pid namespace without its own /proc")
    worker = os.fork()
    if worker == 0:
        _exec_or_die(lambda: _exec_worker(libc, spec, argv, report, ns, own_proc))
    _close_fds()
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == worker:
            shared[:4] = struct.pack("i", status)
            os._exit(0)


def _exec_or_die(step: Any) -> None:
    """Run a forked child's last step (it execs or exits); a failure is reported on stderr, which the parent quotes,
    and ends the child rather than returning into its parent's code."""
    try:
        step()
    except BaseException:  # noqa: BLE001 - whatever failed, this process must not live on
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(70)


def _kill_children() -> None:
    """As a subreaper: kill every process left below this one (orphans were reparented here) until none remains."""
    me = str(os.getpid())
    while True:
        found = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = f.read().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
            if ppid == me:
                found = True
                with contextlib.suppress(OSError):
                    os.kill(int(entry), signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        if not found:
            return


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    cmd = argv[argv.index("--") + 1:]
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != spec["parent"]:
        os._exit(70)  # the parent is already gone
    state: dict[str, int] = {"child": 0, "stop": 0}

    def stop(_sig: int, _frame: Any) -> None:
        state["stop"] = 1
        if state["child"]:
            with contextlib.suppress(OSError):
                os.kill(state["child"], signal.SIGKILL)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    ns, why = _namespaces(libc, set(spec["skip"]))
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    report: dict[str, str] = {"processes": "subreaper: the launcher kills every process left when the worker ends",
                              "other_processes": f"none: no pid namespace ({why or 'a GPU worker: CUDA refuses one'})"}
    shared = mmap.mmap(-1, 4)
    shared[:4] = struct.pack("i", -1)
    child = os.fork()
    if child == 0:
        if "pid" in ns:
            _exec_or_die(lambda: _init(libc, spec, cmd, report, ns, shared))
        _exec_or_die(lambda: _exec_worker(libc, spec, cmd, report, ns, own_proc=False))
    state["child"] = child
    if state["stop"]:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
    _close_fds()
    status = 0
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            status = st
            break
    _kill_children()
    if os.getppid() != spec["parent"]:
        # The judging process is gone (killed mid-evaluation) and will not delete the scratch directory.
        import shutil

        shutil.rmtree(spec["scratch"], ignore_errors=True)
    if "pid" in ns:
        (status,) = struct.unpack("i", shared[:4])
        if status == -1:
            status = signal.SIGKILL  # init was killed before its worker ended: report the kill
    if os.WIFSIGNALED(status):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        killed_by = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(killed_by, signal.SIG_DFL)
        os.kill(os.getpid(), killed_by)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 70)


if __name__ == "__main__":
    main(sys.argv)
