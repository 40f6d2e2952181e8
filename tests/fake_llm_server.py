"""A scripted OpenAI-compatible chat server on 127.0.0.1 for the LLM policy's tests.

Each POST /v1/chat/completions takes the next scripted action (or asks `responder(body)` when the script is
empty): answer well, answer slowly, fail with a status, drop the connection, send a body that is not JSON, drip
the answer a few bytes at a time, or send a huge one. GET /v1/models lists `models`. Every request is kept
(path, headers, body) so tests can check what the client sent.

Like the servers it stands for, it can also: tell its context window (llama.cpp's GET /props, vLLM's
max_model_len in /v1/models, Ollama's /api/ps and /api/show), refuse a prompt longer than `context_limit`
tokens (estimated at 4 characters a token) with a context-length 400 in vLLM's or llama.cpp's words, and take
a JSON-schema response format as a real server does (`structured`): it checks every answer against the schema
it was sent (`structured_answers`), or refuses the format as a server without structured output would.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str
    finish_reason: str = "stop"
    delay_s: float = 0.0
    usage: bool = True
    tokens_in: int | None = None
    tokens_out: int | None = None


@dataclass
class Fail:
    status: int
    message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Drop:
    """Close the connection without a response (after reading the request)."""


@dataclass
class Garbage:
    body: str = "<html>502 Bad Gateway</html>"


@dataclass
class Drip:
    """A well-formed answer whose body is sent `chunk` bytes every `interval_s` seconds."""

    text: str
    interval_s: float = 0.2
    chunk: int = 1


@dataclass
class Huge:
    """A well-formed answer of `size` bytes of content; `chunked`: no Content-Length (the size is not
    announced)."""

    size: int
    chunked: bool = False


Action = Reply | Fail | Drop | Garbage | Drip | Huge


class FakeLLMServer:
    def __init__(
        self,
        responder: Callable[[dict[str, Any]], Action] | None = None,
        models: tuple[str, ...] = ("fake-model",),
        *,
        structured: str = "json_schema",
        context_limit: int | None = None,
        context_style: str = "vllm",
        props: dict[str, Any] | None = None,
        model_fields: dict[str, Any] | None = None,
        ollama_ps: dict[str, Any] | None = None,
        ollama_show: dict[str, Any] | None = None,
    ) -> None:
        """structured: "json_schema" (takes OpenAI's json_schema and llama-cpp-python's json_object+schema),
        "refuse" (HTTP 400 for any schema, as a server without structured output), or "llama-cpp-python"
        (HTTP 422 naming the types it takes for json_schema; takes {"type": "json_object", "schema": ...})."""
        self.script: deque[Action] = deque()
        self.responder = responder
        self.models = models
        self.structured = structured
        self.context_limit = context_limit
        self.context_style = context_style
        self.props = props
        self.model_fields = model_fields or {}
        self.ollama_ps = ollama_ps
        self.ollama_show = ollama_show
        #: One entry per answer given under a JSON schema: {"name", "valid", "error"}.
        self.structured_answers: list[dict[str, Any]] = []
        self._checked_schemas: set[str] = set()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def push(self, *actions: Action) -> FakeLLMServer:
        self.script.extend(actions)
        return self

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self, body: dict[str, Any]) -> Action:
        with self._lock:
            if self.script:
                return self.script.popleft()
        if self.responder is not None:
            return self.responder(body)
        return Reply("ok")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(
                self,
                status: int,
                payload: bytes,
                headers: dict[str, str] | None = None,
                ctype: str = "application/json",
            ) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(payload)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test); nothing to do

            def _not_found(self) -> None:
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": None})
                if self.path.endswith("/models"):
                    data: Any = {
                        "object": "list",
                        "data": [
                            {"id": m, "object": "model", "owned_by": "fake", **server.model_fields}
                            for m in server.models
                        ],
                    }
                elif self.path == "/props" and server.props is not None:
                    data = server.props
                elif self.path == "/api/ps" and server.ollama_ps is not None:
                    data = server.ollama_ps
                else:
                    self._not_found()
                    return
                self._send(200, json.dumps(data).encode())

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if self.path == "/api/show" and server.ollama_show is not None:
                    self._send(200, json.dumps(server.ollama_show).encode())
                    return
                if not self.path.endswith("/chat/completions"):
                    self._not_found()
                    return
                refusal = server._refusal(body)
                if refusal is not None:
                    self._send(refusal[0], json.dumps(refusal[1]).encode())
                    return
                action = server._next(body)
                if isinstance(action, Drop):
                    self.close_connection = True
                    return
                if isinstance(action, Garbage):
                    self._send(200, action.body.encode(), ctype="text/html")
                    return
                if isinstance(action, Fail):
                    err = {"error": {"message": action.message, "type": "scripted", "code": action.status}}
                    self._send(action.status, json.dumps(err).encode(), action.headers)
                    return
                if isinstance(action, Huge):
                    self._send_huge(body, action)
                    return
                if isinstance(action, Drip):
                    payload = json.dumps(completion(body, Reply(action.text))).encode()
                    try:
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        for i in range(0, len(payload), action.chunk):
                            self.wfile.write(payload[i : i + action.chunk])
                            self.wfile.flush()
                            time.sleep(action.interval_s)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return
                if action.delay_s:
                    time.sleep(action.delay_s)
                server._check_structured(body, action.text)
                self._send(200, json.dumps(completion(body, action)).encode())

            def _send_huge(self, body: dict[str, Any], action: Huge) -> None:
                head, tail = json.dumps(completion(body, Reply("@@"))).encode().split(b"@@")
                filler = b"x" * 65536
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    if action.chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                    else:
                        self.send_header("Content-Length", str(len(head) + action.size + len(tail)))
                    self.end_headers()

                    def write(data: bytes) -> None:
                        if action.chunked:
                            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        else:
                            self.wfile.write(data)

                    write(head)
                    left = action.size
                    while left > 0:
                        write(filler[: min(left, len(filler))])
                        left -= len(filler)
                    write(tail)
                    if action.chunked:
                        self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what it should do

        return Handler

    def _refusal(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """The status and body a real server would refuse this request with, if any."""
        fmt = body.get("response_format") or {}
        with_schema = fmt.get("type") == "json_schema" or (fmt.get("type") == "json_object" and "schema" in fmt)
        if with_schema and self.structured == "refuse":
            return 400, {"error": {"message": f"response_format {fmt.get('type')!r} is not supported",
                                   "type": "invalid_request_error"}}
        if fmt.get("type") == "json_schema" and self.structured == "llama-cpp-python":
            return 422, {"detail": [{"type": "literal_error", "loc": ["body", "response_format", "type"],
                                     "msg": "Input should be 'text' or 'json_object'", "input": "json_schema"}]}
        if self.context_limit is not None:
            prompt = "".join(m.get("content") or "" for m in body.get("messages", []))
            tokens = len(prompt) // 4
            if tokens > self.context_limit:
                if self.context_style == "llamacpp":
                    return 400, {"error": {"code": 400, "type": "exceed_context_size_error",
                                           "message": "the request exceeds the available context size, try "
                                           "increasing it", "n_prompt_tokens": tokens, "n_ctx": self.context_limit}}
                return 400, {"error": {"message": f"This model's maximum context length is {self.context_limit} "
                                       f"tokens. However, you requested {tokens} tokens in the messages.",
                                       "type": "BadRequestError", "code": 400}}
        return None

    def _check_structured(self, body: dict[str, Any], text: str) -> None:
        """Check an answer given under a JSON schema against it (a real server's decoding would enforce it)."""
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            name, schema = fmt["json_schema"]["name"], fmt["json_schema"]["schema"]
        elif fmt.get("type") == "json_object" and "schema" in fmt:
            name, schema = "json_object", fmt["schema"]
        else:
            return
        import jsonschema

        key = json.dumps(schema, sort_keys=True)
        if key not in self._checked_schemas:  # a schema a real server could not compile is a bug of ours
            jsonschema.Draft202012Validator.check_schema(schema)
            self._checked_schemas.add(key)
        try:
            jsonschema.validate(json.loads(text), schema, cls=jsonschema.Draft202012Validator)
            entry = {"name": name, "valid": True, "error": None}
        except jsonschema.ValidationError as exc:
            # the message, not str(exc): that pretty-prints the instance, which on Python 3.13 recurses past the limit
            # for a deeply nested answer
            entry = {"name": name, "valid": False, "error": (exc.message.splitlines() or ["ValidationError"])[0]}
        except (ValueError, RecursionError) as exc:
            entry = {"name": name, "valid": False, "error": (str(exc).splitlines() or [type(exc).__name__])[0]}
        with self._lock:
            self.structured_answers.append(entry)


def completion(body: dict[str, Any], action: Reply) -> dict[str, Any]:
    """The chat.completion an OpenAI-compatible server sends for `action`."""
    prompt = "".join(m.get("content") or "" for m in body.get("messages", []))
    tin = action.tokens_in if action.tokens_in is not None else max(1, len(prompt) // 4)
    tout = action.tokens_out if action.tokens_out is not None else max(1, len(action.text) // 4)
    data: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "finish_reason": action.finish_reason,
                "message": {"role": "assistant", "content": action.text},
            }
        ],
    }
    if action.usage:
        data["usage"] = {
            "prompt_tokens": tin,
            "completion_tokens": tout,
            "total_tokens": tin + tout,
        }
    return data


# -- a scripted K-Search model: answers each prompt by the heading its template starts with ----------------

SOFTMAX_KERNELS = {
    # One compiled graph: MLX fuses the elementwise steps, so fewer passes over memory than the naive start.
    "compiled": """import mlx.core as mx


@mx.compile
def _softmax(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)


def run(x):
    return _softmax(x)
""",
    # The exp2 trick with log2(e) written as a hex float: it must reach the harness exactly as written. (On the
    # CPU backend this graph measured about 2x faster than the naive start.)
    "exp2": """import mlx.core as mx

LOG2E = float.fromhex("0x1.715476p+0")


def _impl(x):
    xf = x.astype(mx.float32)
    m = mx.max(xf, axis=-1, keepdims=True)
    e = mx.power(2.0, (xf - m) * LOG2E)
    return (e * mx.reciprocal(mx.sum(e, axis=-1, keepdims=True))).astype(x.dtype)


_fused = mx.compile(_impl, shapeless=True)


def run(x):
    return _fused(x)
""",
    "broken": """import mlx.core as mx


def run(x):
    return mx.exp(x) / undefined_name
""",
}


def heading(body: dict[str, Any]) -> str:
    """The first line of the last user message: each ksearch template starts with `# <what>`."""
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return (users[-1]["content"].splitlines() or [""])[0] if users else ""


def fenced(lang: str, text: str) -> str:
    return f"```{lang}\n{text}```\n"


def initial_world_model() -> dict[str, Any]:
    def node(nid: str, title: str, rating: int) -> dict[str, Any]:
        return {
            "node_id": nid,
            "parent_id": "root",
            "node_type": "action",
            "decision": "how to cut passes",
            "choice": title,
            "notes": "CURRENT: naive. FOLLOW_THROUGH: implement. UPDATE_BELIEF: none yet.",
            "last_updated_round": 0,
            "action": {
                "title": title,
                "description": f"{title} for row softmax",
                "difficulty_1_to_5": 2,
                "score_0_to_1": 0.7,
                "expected_vs_baseline_factor": 1.3,
                "rationale": "fewer passes",
            },
            "impacts": {
                k: {"rating_0_to_10": 6, "risk": "low", "notes": ""}
                for k in ("memory_bandwidth", "register_pressure", "compute_intensity_and_hw_fit")
            },
            "overall_rating_0_to_10": rating,
            "confidence_0_to_1": 0.6,
        }

    # Shaped as the published schema the policy sends (schemas.WORLD_MODEL): every field present, the root's
    # action and impacts null; the loader adds computed_signals.
    return {
        "kernel_summary": "Row softmax: two reductions and an elementwise pass; bandwidth bound.",
        "decision_tree": {
            "root_id": "root",
            "active_leaf_id": "n1",
            "nodes": [
                {
                    "node_id": "root",
                    "parent_id": None,
                    "node_type": "root",
                    "decision": "start",
                    "choice": "naive",
                    "notes": "",
                    "last_updated_round": 0,
                    "action": None,
                    "impacts": None,
                    "overall_rating_0_to_10": 5,
                    "confidence_0_to_1": 0.5,
                },
                node("n1", "fuse with mx.compile", 8),
                node("n2", "exp2 with hex-float log2(e)", 6),
            ],
        },
        "open_questions": ["does fusion pay on CPU?"],
    }


def edit_for(prompt: str) -> dict[str, Any]:
    """A valid edit for the world model quoted in the prompt: a follow-up child under every solved leaf."""
    start = prompt.index("```json\n") + len("```json\n")
    wm = json.loads(prompt[start : prompt.index("\n```", start)])
    nodes = wm["decision_tree"]["nodes"]
    nodes = list(nodes.values()) if isinstance(nodes, dict) else nodes
    parents = {n.get("parent_id") for n in nodes}
    solved = [n for n in nodes if (n.get("solution_ref") or {}).get("solution_id") and n["node_id"] not in parents]
    ops: list[dict[str, Any]] = []
    for i, n in enumerate(solved[:3]):
        child = dict(initial_world_model()["decision_tree"]["nodes"][1 + i % 2])
        child.pop("node_id")
        ops.append(
            {
                "op": "insert_node",
                "parent_id": n["node_id"],
                "parent_solution_id": n["solution_ref"]["solution_id"],
                "node": {
                    **child,
                    "node_id": f"new{i}",
                    "parent_id": n["node_id"],
                    "notes": "CURRENT: passes. FOLLOW_THROUGH: refine. UPDATE_BELIEF: fusion helps. "
                    "PERF_GAP: measured vs predicted differ.",
                },
            }
        )
    for n in nodes:
        if n.get("node_type") != "root" and not (n.get("solution_ref") or {}).get("solution_id"):
            ops.append(
                {
                    "op": "update_node",
                    "node_id": n["node_id"],
                    # Every patch field, null where unchanged: what a strict JSON-schema answer looks like.
                    "patch": {
                        "decision": None,
                        "choice": None,
                        "notes": "CURRENT: open. FOLLOW_THROUGH: try. UPDATE_BELIEF: unchanged.",
                        "overall_rating_0_to_10": None,
                        "confidence_0_to_1": 0.5,
                        "action": None,
                        "impacts": None,
                    },
                }
            )
            break
    return {"active_leaf_id": ops[0]["node"]["node_id"] if ops and "node" in ops[0] else None, "ops": ops}


class KSearchScript:
    """Answers like a competent model, except for the scripted `faults`."""

    def __init__(self, kernels: list[str] | None = None, faults: list[tuple[str, Action]] | None = None) -> None:
        self.kernels = kernels or [SOFTMAX_KERNELS["compiled"], SOFTMAX_KERNELS["exp2"]]
        self.code_calls = 0
        # (heading prefix, action): served, in order, to the first request whose heading starts with the prefix.
        self.faults = list(faults or [])
        self.faults_served: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _fault_for(self, head: str) -> Action | None:
        with self._lock:
            for i, (prefix, action) in enumerate(self.faults):
                if head.startswith(prefix):
                    del self.faults[i]
                    self.faults_served.append((prefix, type(action).__name__))
                    return action
        return None

    def __call__(self, body: dict[str, Any]) -> Action:
        head = heading(body)
        if head.startswith("# Repair"):  # "# Repair > # Code: debug": a fault can target one question's repair
            users = [m for m in body.get("messages", []) if m.get("role") == "user"]
            head = f"{head} > {heading({'messages': users[:1]})}"
        fault = self._fault_for(head)
        return fault if fault is not None else self.answer(body)

    def answer(self, body: dict[str, Any]) -> Action:
        head = heading(body)
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        if head.startswith("# Analysis"):
            return Reply("## Classification\nreduction (row softmax), dense access.\n## Kernel families\n1. fused")
        if head.startswith("# World model: initial"):
            return Reply(json.dumps(initial_world_model()))
        if head.startswith("# World model: edit"):
            return Reply(json.dumps(edit_for(users[-1]["content"])))
        if head.startswith("# Repair"):
            first = heading({"messages": users[:1]})
            return self.answer({"messages": [{"role": "user", "content": users[0]["content"]}]}) if first else Reply("")
        if head.startswith("# Code"):
            code = self.kernels[self.code_calls % len(self.kernels)]
            if self.code_calls >= len(self.kernels):  # a fresh variant, so the loop never sees only duplicates
                code = code.replace(
                    "import mlx.core as mx\n", f"import mlx.core as mx\n\n_VARIANT = {self.code_calls}\n", 1
                )
            self.code_calls += 1
            return Reply("Here is the kernel.\n\n" + fenced("python", code) + "\nIt fuses the passes.")
        return Reply("ok")


# -- helpers shared by the tests --------------------------------------------------------------------------------


def softmax_ctx(calls: list[Any] | None = None) -> Any:
    """A PolicyContext for softmax on mlx-cpu whose record_call appends to `calls`."""
    import random

    from ksearch.backends import get_backend
    from ksearch.policy.base import PolicyContext
    from ksearch.tasks import get_task

    sink = calls if calls is not None else []
    return PolicyContext(
        task=get_task("softmax"), backend=get_backend("mlx-cpu"), rng=random.Random(0), record_call=sink.append
    )


def header(request: dict[str, Any], name: str) -> str | None:
    """A request header, looked up without regard to case (HTTP clients differ in how they spell them)."""
    for k, v in request["headers"].items():
        if k.lower() == name.lower():
            return str(v)
    return None
