"""Evaluators on Ray: one actor per worker, each holding its own Evaluator (its trusted reference and baseline
workers, its baseline timings) on its own device, judging candidates in contained worker processes exactly as the
single-process search does. On this machine (`--workers N`: a Ray instance of N slots started for the run) or on a
running cluster (`--ray-address auto|HOST:PORT`).

What an actor needs of its node: ksearch and MLX installed, the run's backend available (a CUDA node for mlx-cuda,
a Mac for mlx-metal), and the task by name (a task file at the same path). Placement: one CPU slot per worker on the
CPU backends, one GPU per worker on mlx-cuda, one `mlx-metal` resource per worker on mlx-metal (a Mac joins with
`ray start --address=HOST:PORT --resources='{"mlx-metal": 1}'`).

An actor that dies (killed, out of memory, its node lost) loses its job: the pool hands it back as lost (the driver
queues it again) and Ray starts the actor again, up to MAX_RESTARTS times.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ksearch.backends import Backend
from ksearch.config import RunConfig
from ksearch.errors import RunError
from ksearch.harness.baselines import recorded_timings, timings_record
from ksearch.harness.evaluator import EvalOptions
from ksearch.harness.result import EvalResult
from ksearch.search.pool import Arrival, Job, WorkerInfo, device_kind

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayError
except ImportError:  # the extra is optional; start.py says how to install it before anything runs
    ray = None  # type: ignore[assignment]

MAX_RESTARTS = 3
#: How long the actors may take to start (import MLX, probe the backend) before the run refuses to start.
START_TIMEOUT_S = 300.0
#: How long a run waits for a cluster's slots to come free before it refuses to start: the slots of evaluators that
#: just ended (a run before this one) come back a moment after them.
FREE_WAIT_S = 10.0

INSTALL_HINT = "pip install 'kernelsearch[ray]'"


def available() -> bool:
    return ray is not None


def not_installed(cfg: RunConfig) -> str:
    """The one line that refuses a placement that needs Ray where it is not installed."""
    asked = ([f"--workers {cfg.workers}"] if cfg.workers > 1 else []) + (
        [f"--ray-address {cfg.ray_address}"] if cfg.ray_address is not None else [])
    return (f"{' and '.join(asked)} {'need' if len(asked) > 1 else 'needs'} Ray, which is not installed: "
            f"{INSTALL_HINT}; without it one evaluator judges in this process (--workers 1, no --ray-address)")


def local_devices(backend: Backend) -> int:
    """How many evaluators this machine holds for the backend: one per CPU slot, per NVIDIA GPU, one Mac GPU."""
    if backend.family == "cuda" and not backend.emulated:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            return len([d for d in visible.split(",") if d.strip()])
        try:
            import mlx.core as mx

            return int(mx.cuda.device_count()) if hasattr(mx.cuda, "device_count") else 1
        except (ImportError, AttributeError, RuntimeError):
            return 1
    if backend.family == "metal" and not backend.emulated:
        return 1
    return os.cpu_count() or 1


def _placement(backend: Backend) -> tuple[str, dict[str, Any]]:
    """(the cluster resource one worker takes, the actor options that ask for it)."""
    if backend.family == "cuda" and not backend.emulated:
        return "GPU", {"num_gpus": 1, "num_cpus": 0}
    if backend.family == "metal" and not backend.emulated:
        return "mlx-metal", {"resources": {"mlx-metal": 1}, "num_cpus": 0}
    return "CPU", {"num_cpus": 1}


class _Remote:
    """The actor: one Evaluator for the run's task and backend, on the node Ray placed it on."""

    def __init__(self, task: str, backend: str, cfg: dict[str, Any]) -> None:
        from ksearch.backends import get_backend
        from ksearch.harness import Evaluator
        from ksearch.tasks import get_task

        memory = int(float(cfg["memory_limit_gb"]) * (1 << 30))
        self.ev = Evaluator(get_task(task), get_backend(backend), memory)
        self.opts = EvalOptions(baseline=cfg.get("baseline"), timeout_s=cfg.get("timeout_s"),
                                memory_limit_bytes=memory)

    def info(self) -> dict[str, Any]:
        env = self.ev.env()
        return {"pid": os.getpid(), "host": socket.gethostname(), "device_kind": device_kind(env), "env": env}

    def baseline_record(self, recorded: list[dict[str, Any]]) -> dict[str, Any]:
        """The run's baseline timings on the search workloads in this evaluator's environment: those its verdicts
        recorded, the rest measured here (harness.baselines.timings_record)."""
        task = self.ev.task
        name = self.opts.baseline or task.default_baseline
        env = self.ev.baseline_environment(name)
        self.ev.baselines.seed(recorded_timings(recorded, env))
        timings = self.ev.baselines.timings(name, task.select_workloads(self.ev.backend.tier), time.monotonic() + 1800)
        return timings_record(name, env, timings)

    def evaluate(self, source: str, shared: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], float, float]:
        """One verdict, scored against the run's shared baseline timings where they hold for this environment (an
        actor Ray restarted has none of its own)."""
        if shared:
            name = self.opts.baseline or self.ev.task.default_baseline
            self.ev.baselines.seed(recorded_timings(shared, self.ev.baseline_environment(name)))
        t0 = time.time()
        result = self.ev.evaluate(source, self.opts)
        return result.to_json(), t0, time.time()

    def holdout(self, source: str) -> dict[str, Any]:
        opts = EvalOptions(baseline=self.opts.baseline, timeout_s=self.opts.timeout_s,
                           memory_limit_bytes=self.opts.memory_limit_bytes, holdout=True)
        return self.ev.evaluate(source, opts).to_json()

    def close(self) -> None:
        self.ev.close()


@dataclass
class _Slot:
    info: WorkerInfo
    actor: Any
    ref: Any = None
    job: Job | None = None
    started: float = 0.0


class RayPool:
    """`workers` actors; see the module's docstring."""

    def __init__(self, task: str, backend: Backend, cfg: RunConfig) -> None:
        if ray is None:
            raise RunError(not_installed(cfg))
        self.backend = backend
        self.started_ray = _connect(cfg, backend)
        resource, options = _placement(backend)
        try:
            _check_slots(cfg, backend, resource)
            remote = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=0, **options)(_Remote)
            actors = [remote.remote(task, backend.name, cfg.to_json()) for _ in range(cfg.workers)]
            infos = self._started(actors)
        except BaseException:
            self._shutdown()
            raise
        self.slots = [_Slot(WorkerInfo(f"w{i + 1}", d["device_kind"], d["host"], d["pid"]), a)
                      for i, (a, d) in enumerate(zip(actors, infos, strict=True))]
        self._env = dict(infos[0]["env"])
        self._shared: list[dict[str, Any]] = []  # share_baselines: one timings record a device kind

    def environment(self) -> dict[str, Any]:
        return self._env

    def holdout(self, source: str) -> EvalResult:
        """The final holdout judgement, on the first live worker of the run's device kind."""
        return self._on_first_live(lambda actor: _get(actor.holdout.remote(source)),
                                   "judge the run's result on the holdout workloads")

    def judge(self, source: str) -> EvalResult:
        """A candidate judged on the search workloads now, as the search judged it (against the run's shared
        baseline timings), on the first live worker of the run's device kind: the end's confirmation
        (search/run_end.py), which times every candidate it compares on that one worker."""
        return self._on_first_live(lambda actor: _get(actor.evaluate.remote(source, self._shared))[0],
                                   "time the run's best candidates again")

    def _on_first_live(self, call: Callable[[Any], dict[str, Any]], what: str) -> EvalResult:
        """`call(actor)` on the first live worker of the run's first device kind, the next one where it dies."""
        kind = self.slots[0].info.device_kind
        for s in self.slots:
            if s.info.state != "dead" and s.info.device_kind == kind:
                try:
                    return EvalResult.from_json(call(s.actor))
                except RayActorError:
                    continue
        raise RunError(f"no evaluator was left to {what}; --resume it")

    def share_baselines(self, recorded: list[dict[str, Any]]) -> int:
        """Before the first candidate: per device kind, the first live worker takes the baseline timings the run's
        verdicts recorded and measures the rest, and every worker of the kind scores against those (each evaluate call
        carries them): otherwise each worker's own measurement, up to 15% apart between processes on the H200, would
        set its candidates' scores. A worker that dies here, or a baseline that fails, leaves its kind to measure per
        worker. How many kinds share one record."""
        self._shared = []
        kinds: set[str] = set()
        for s in self.slots:
            if s.info.state == "dead" or s.info.device_kind in kinds:
                continue
            try:
                self._shared.append(_get(s.actor.baseline_record.remote(recorded)))
                kinds.add(s.info.device_kind)
            except RayActorError:
                s.info.state = self._after_death(s)
            except RayError:  # the baseline itself failed (its code, its worker): each verdict will say so
                kinds.add(s.info.device_kind)
        return len(self._shared)

    def _started(self, actors: list[Any]) -> list[dict[str, Any]]:
        """Each actor's pid, host and device kind, once all have started; a one-line error when one cannot."""
        try:
            return list(_get([a.info.remote() for a in actors], timeout=START_TIMEOUT_S))
        except GetTimeoutError as exc:
            raise RunError(f"the {len(actors)} Ray evaluators did not start within {START_TIMEOUT_S:g} s (is the "
                           f"cluster short of free {self.backend.name} slots?)") from exc
        except RayError as exc:
            first = next((ln for ln in reversed(str(exc).splitlines()) if "Error" in ln), str(exc)[:200])
            raise RunError(f"a Ray evaluator could not start {self.backend.name} on its node: {first.strip()[:300]}"
                           ) from exc

    # -- EvaluatorPool -------------------------------------------------------------------------------------------
    def workers(self) -> list[WorkerInfo]:
        return [s.info for s in self.slots]

    def idle_kinds(self) -> list[str]:
        return [s.info.device_kind for s in self.slots if s.job is None and s.info.state != "dead"]

    def submit(self, job: Job) -> WorkerInfo | None:
        for s in self.slots:
            if s.job is None and s.info.state != "dead" and job.kind in (None, s.info.device_kind):
                s.job, s.started, s.ref = job, time.time(), s.actor.evaluate.remote(job.source, self._shared)
                s.info.state, s.info.candidate = "busy", job.candidate
                return s.info
        return None

    def busy(self) -> int:
        return sum(1 for s in self.slots if s.job is not None)

    def wait(self) -> Arrival:
        pending = {s.ref: s for s in self.slots if s.job is not None}
        if not pending:
            raise RuntimeError("wait() with nothing in flight")
        with _signal_through():
            ready, _ = ray.wait(list(pending), num_returns=1)
        slot = pending[ready[0]]
        job, started = slot.job, slot.started
        assert job is not None
        slot.job, slot.ref, slot.info.candidate = None, None, None
        try:
            data, t0, t1 = ray.get(ready[0])
        except RayActorError as exc:
            slot.info.lost += 1
            slot.info.state = self._after_death(slot)
            reason = (str(exc).strip().splitlines() or ["the actor died"])[0][:300]
            return Arrival(job, slot.info, None, started, time.time(), reason)
        slot.info.state = "idle"
        slot.info.evaluations += 1
        slot.info.busy_s += t1 - t0
        return Arrival(job, slot.info, EvalResult.from_json(data), t0, t1)

    def _after_death(self, slot: _Slot) -> str:
        """Ray restarts a dead actor (up to MAX_RESTARTS); one that is gone for good takes no more jobs."""
        try:
            info = _get(slot.actor.info.remote(), timeout=START_TIMEOUT_S)
        except (RayError, GetTimeoutError):
            return "dead"
        slot.info.pid, slot.info.host = info["pid"], info["host"]
        return "idle"

    def close(self) -> None:
        for s in getattr(self, "slots", []):
            # Its reference and baseline workers end cleanly; a dead or stuck actor is killed all the same.
            with contextlib.suppress(Exception):
                ray.get(s.actor.close.remote(), timeout=30)
            with contextlib.suppress(Exception):
                ray.kill(s.actor)
        self._shutdown()

    def _shutdown(self) -> None:
        if self.started_ray and ray.is_initialized():
            ray.shutdown()


@contextlib.contextmanager
def _signal_through() -> Iterator[None]:
    """An exception a signal handler raises while Ray waits (SIGTERM's, search/start.py: Terminated) leaves Ray's
    Cython as a SystemError it caused: the exception itself goes on, as it would from anywhere else."""
    try:
        yield
    except SystemError as exc:
        if exc.__cause__ is not None and not isinstance(exc.__cause__, Exception):
            raise exc.__cause__ from None
        raise


def _get(refs: Any, timeout: float | None = None) -> Any:
    """ray.get of a result (or a list of them), waited for in ray.wait: ray.get drops an exception a signal handler
    raises while it waits, so that a SIGTERM would go unnoticed until the result came, then not at all."""
    wanted = refs if isinstance(refs, list) else [refs]
    with _signal_through():
        ready, _ = ray.wait(wanted, num_returns=len(wanted), timeout=timeout)
    if len(ready) < len(wanted):
        raise GetTimeoutError(f"{len(wanted) - len(ready)} of {len(wanted)} results not ready within {timeout} s")
    return ray.get(refs)


def _check_slots(cfg: RunConfig, backend: Backend, resource: str) -> None:
    """Refuse, in one line, more workers than the cluster has slots, or than it has free now: an actor without a
    free slot would wait for one (START_TIMEOUT_S) before the run could say so."""
    where = f"the Ray cluster at {cfg.ray_address}" if cfg.ray_address else "this machine"
    have = float(ray.cluster_resources().get(resource, 0))
    if cfg.workers > have:
        raise RunError(f"--workers {cfg.workers} is more than the {have:g} {resource} slot(s) of {where} for "
                       f"{backend.name}; pass --workers {max(int(have), 1)} or fewer")
    deadline = time.monotonic() + FREE_WAIT_S
    while (free := float(ray.available_resources().get(resource, 0))) < cfg.workers:
        if time.monotonic() >= deadline:
            todo = (f"pass --workers {int(free)} or fewer, or wait" if free >= 1 else "wait")
            raise RunError(f"--workers {cfg.workers}: only {free:g} of the {have:g} {resource} slot(s) of {where} are "
                           f"free for {backend.name} (other jobs hold the rest); {todo} until they end")
        time.sleep(0.5)


#: HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (a Ray cluster's GCS) answers with a SETTINGS
#: frame of its own (byte 3 of a frame header is its type, 4).
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: How long the address may take to connect and to answer the preface.
PROBE_TIMEOUT_S = 5.0


def check_address(address: str) -> None:
    """A one-line refusal of an address that is not `auto` or HOST:PORT, or where no Ray cluster can answer: nothing
    listens (`auto` included: the address of a `ray start` here that has ended), or what listens is no gRPC server (a
    web server, a database, a silent port). Ray's own client would retry either for minutes."""
    if address == "auto":
        found = _auto_address()
        if found is not None:
            _probe(f"auto ({found})", *found.rpartition(":")[::2])
        return
    host, sep, port = address.rpartition(":")
    if address.startswith("ray://"):
        raise RunError(f"--ray-address {address}: Ray Client addresses are not supported; pass the cluster's "
                       "HOST:PORT (the GCS address `ray start --head` prints) or auto")
    if not sep or not host.strip() or not port.isdigit() or not 0 < int(port) < 65536:
        raise RunError(f"--ray-address {address!r} is not auto or HOST:PORT (e.g. 10.0.0.5:6379)")
    _probe(address, host, port)


def _auto_address() -> str | None:
    """The HOST:PORT `auto` stands for, found as ray.init finds it (RAY_ADDRESS, the latest `ray start` here, a
    running GCS); None where it finds none (ray.init says so at once) or the address is not HOST:PORT."""
    try:
        from ray._private.services import canonicalize_bootstrap_address

        found = canonicalize_bootstrap_address("auto")
    except Exception:  # Ray's own lookup (none found, a private API moved): ray.init will say it again
        return None
    return found if isinstance(found, str) and found.rpartition(":")[2].isdigit() else None


def _probe(shown: str, host: str, port: str) -> None:
    host = host.removeprefix("[").removesuffix("]")  # [::1]:6379
    try:
        conn = socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S)
    except OSError as exc:
        raise RunError(f"cannot reach a Ray cluster at --ray-address {shown}: {exc.strerror or exc} (start one "
                       "with `ray start --head`, or check the address)") from exc
    with conn:
        # A cluster with TLS answers the preface with a TLS alert: its address is left to Ray.
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true") or _answers_grpc(conn):
            return
    raise RunError(f"--ray-address {shown}: what listens there is not a Ray cluster (it does not answer as a "
                   "cluster's GCS does); pass the HOST:PORT `ray start --head` printed (port 6379 unless --port)")


def _answers_grpc(conn: socket.socket) -> bool:
    try:
        conn.sendall(_H2_HELLO)
        head = b""
        while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
            head += chunk
    except OSError:
        return False
    return len(head) == 9 and head[3] == 4


def _connect(cfg: RunConfig, backend: Backend) -> bool:
    """Join the cluster the run names (or the Ray instance this process already has), or start one here; True when
    this process started it (and so shuts it down)."""
    if ray.is_initialized():
        return False
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
    if cfg.ray_address is not None:
        _join(cfg.ray_address, quiet)
        return False
    resource, _ = _placement(backend)
    counts: dict[str, Any] = {"num_cpus": cfg.workers if resource == "CPU" else 1}
    if resource == "GPU":
        counts["num_gpus"] = cfg.workers
    elif resource == "mlx-metal":
        counts["resources"] = {"mlx-metal": cfg.workers}
    # "local": an instance of the run's own, even where RAY_ADDRESS or a `ray start` on this machine names a running
    # one (Ray would join that, and refuse the slot counts).
    ray.init(address="local", include_dashboard=False, **counts, **quiet)
    return True


def _join(address: str, quiet: dict[str, Any]) -> None:
    """ray.init on a running cluster. Ray's client says why it cannot connect only in a line a second on stderr (20
    of them, then an exception without the reason): they are kept aside, and the refusal names the reason."""
    with tempfile.TemporaryFile() as said:
        try:
            with _stderr_into(said):
                ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            said.seek(0)
            raise RunError(_join_refusal(address, exc, said.read().decode(errors="replace"))) from exc


def _join_refusal(address: str, exc: BaseException, said: str) -> str:
    if "Unauthenticated" in said or "InvalidAuthToken" in said:
        return (f"the Ray cluster at --ray-address {address} uses token authentication and refused this process: "
                "set RAY_AUTH_MODE=token (its token in ~/.ray/auth_token or RAY_AUTH_TOKEN), or pass --ray-address "
                "auto on one of its nodes")
    if "rpc_code: 12" in said:  # UNIMPLEMENTED: a gRPC server, not a GCS
        return (f"--ray-address {address} answers gRPC but is no Ray cluster's GCS (another Ray port, or another "
                "service); pass the HOST:PORT `ray start --head` printed (port 6379 unless --port)")
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    if address == "auto" and "Could not find any running Ray instance" in first:
        first = "no cluster runs on this machine (`ray start --head`) and RAY_ADDRESS names none"
    return (f"cannot reach a Ray cluster at --ray-address {address}: {first} (start one with `ray start --head`, or "
            "pass its HOST:PORT)")


@contextlib.contextmanager
def _stderr_into(file: Any) -> Iterator[None]:
    """This process's stderr (fd 2, where Ray's C++ client writes) into `file` for the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(file.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
