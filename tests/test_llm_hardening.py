"""The LLM path against hostile and small servers: bounded answers, one deadline per call, the model's context,
structured output. Every test runs against the fake OpenAI-compatible server."""

from __future__ import annotations

import json
import random
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import (
    SOFTMAX_KERNELS,
    Drip,
    FakeLLMServer,
    Huge,
    KSearchScript,
    Reply,
    initial_world_model,
    softmax_ctx,
)

from ksearch.config import LLMConfig, load_config
from ksearch.errors import AnswerTooLarge, CallFailed, ContextTooSmall, PolicyError
from ksearch.policy.base import Attempt, CallRecord, Feedback, ImplementRequest, PolicyContext
from ksearch.policy.llm import make_policy
from ksearch.policy.llm.client import Backoff, ChatClient, Sampling
from ksearch.policy.llm.context import discover_context
from ksearch.policy.llm.fitting import TRIMMED, Window, messages_tokens
from ksearch.policy.llm.parsing import MAX_DEPTH, extract_code, extract_json
from ksearch.policy.llm.policy import LLMPolicy
from ksearch.policy.llm.presets import PRESETS, Endpoint, resolve
from ksearch.policy.llm.schemas import WORLD_MODEL, WORLD_MODEL_EDIT, bounded, longest_answer

pytest.importorskip("openai")  # imported up front: a cold import takes seconds on a busy machine, within timings

MSG = [{"role": "user", "content": "hello there"}]
MB = 1 << 20


def client(server: FakeLLMServer, *, retries: int = 0, timeout: float = 5.0, cap: int = 256 * 1024,
           structured: str | None = "json_schema", deadline: float | None = None) -> ChatClient:
    ep = Endpoint("test", server.url, None, "m", "m", "max_tokens", True, structured)
    return ChatClient(ep, Sampling(), timeout_s=timeout, max_retries=retries, backoff=Backoff(0.001, 0.01),
                      rng=random.Random(0), sleep=lambda _s: None, environ={}, max_answer_bytes=cap,
                      deadline=deadline)


def policy_for(server: FakeLLMServer, **cfg: Any) -> LLMPolicy:
    settings = {"preset": "openai", "base_url": server.url, "model": "fake-model", "max_retries": 1,
                "request_timeout_s": 5.0, **cfg}
    return make_policy(LLMConfig(**settings), backoff_base_s=0.001, environ={}, seed=0)


def code_request(ctx: PolicyContext, mode: str = "first", history: list[Attempt] | None = None) -> ImplementRequest:
    node = initial_world_model()["decision_tree"]["nodes"][1]
    fb = Feedback("runtime_error", "NameError: name 'e2' is not defined\n" * 200, 0.0) if mode != "first" else None
    return ImplementRequest(action=node, mode=mode, parent_source=ctx.task.starting_source("cpu"),  # type: ignore[arg-type]
                            parent_params=None, feedback=fb, history=history or [], best_source=None, best_score=0.0)


def spec_ctx(calls: list[CallRecord]) -> PolicyContext:
    ctx = softmax_ctx(calls)
    ctx.spec = "## Spec\n" + "\n".join(f"- pattern {i}: keep rows in threadgroup memory, reduce with simd" for i in
                                         range(200))
    return ctx


def nested(depth: int) -> str:
    return '{"kernel_summary": "x", "decision_tree": ' + '{"a": ' * depth + "1" + "}" * depth + "}"


# -- bounded answers ---------------------------------------------------------------------------------------------


def test_a_12kb_nested_answer_is_a_problem_string_not_a_crash():
    text = nested(2000)
    assert len(text) > 12_000
    parsed = extract_json(text, ("decision_tree",))
    assert parsed.value is None and f"nested more than {MAX_DEPTH} levels" in (parsed.problem or "")
    deep_list = "[" * 5000 + "]" * 5000
    assert "nested more than" in (extract_json(deep_list).problem or "")


def test_the_nested_answer_costs_the_question_not_the_run():
    calls: list[CallRecord] = []
    with FakeLLMServer(KSearchScript()) as server:
        server.push(Reply(nested(3000)), Reply(nested(3000)))
        with pytest.raises(PolicyError, match="nested more than"):
            policy_for(server).init_world_model(softmax_ctx(calls), "analysis")
    assert [c.role for c in calls] == ["init", "repair"]


@pytest.mark.parametrize("flood", ["{" * MB, "{}" * (MB // 2), '{"' * (MB // 2), "[" * MB, "```python\n" * (MB // 10),
                                   "<think>" * (MB // 7), "\n" * MB, '{"a": "' + "\\" * MB])
def test_a_megabyte_flood_is_parsed_in_linear_time(flood):
    start = time.perf_counter()
    parsed = extract_json(flood, ("ops",))
    code = extract_code(flood)
    elapsed = time.perf_counter() - start
    assert parsed.value is None and parsed.problem and code.value is None and code.problem
    assert elapsed < 2.0, f"{elapsed:.2f} s"


def test_json_is_still_found_around_prose_fences_and_inner_objects():
    wm = json.dumps(initial_world_model())
    assert extract_json(f"Sure. Here it is:\n```json\n{wm}\n```\nDone.", ("decision_tree",)).value == \
        initial_world_model()
    assert extract_json('An example {"a": 1} and the answer: {"ops": [], "active_leaf_id": null}', ("ops",)).value \
        == {"ops": [], "active_leaf_id": None}
    # A fenced object wins over one in the prose, and a stray quote in prose does not confuse the scan.
    text = 'Prose with a 5" disk and {"ops": ["prose"]}\n```json\n{"ops": ["fenced"]}\n```'
    assert extract_json(text, ("ops",)).value == {"ops": ["fenced"]}
    # An object cut off mid-way is "incomplete", not "lacks decision_tree" because of an inner object.
    cut = wm[: len(wm) // 2]
    assert "incomplete" in (extract_json(cut, ("decision_tree",)).problem or "")


def test_a_20mb_answer_is_refused_with_its_size_without_holding_it():
    with FakeLLMServer() as server:
        server.push(Huge(20 * MB), Huge(20 * MB, chunked=True))
        c = client(server)
        tracemalloc.start()
        try:
            start = time.monotonic()
            with pytest.raises(AnswerTooLarge) as info:
                c.complete("code", "m", MSG)
            chunked = pytest.raises(AnswerTooLarge)
            with chunked as info2:
                c.complete("code", "m", MSG)
            elapsed = time.monotonic() - start
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    declared = 20 * MB + len(json.dumps({"x": 1}))  # the body: the envelope around 20 MB of content
    message = str(info.value)
    assert f"{20 * MB:,}"[:6] in message and "bytes" in message and "max_answer_kb" in message
    assert info.value.size > 20 * MB and info.value.size < declared + 4096
    assert "chatcmpl-fake" in message  # an excerpt of what was sent
    assert "more than 262,144 bytes" in str(info2.value)
    assert info.value.retries == 0 and len(server.chat_requests()) == 2  # not retried
    assert peak < 4 * MB, f"peak {peak / MB:.1f} MB"
    assert elapsed < 10


def test_an_oversized_answer_is_a_recorded_proposer_error_never_parsed_or_stored():
    calls: list[CallRecord] = []
    with FakeLLMServer(KSearchScript()) as server:
        server.push(Huge(2 * MB))
        pol = policy_for(server)
        with pytest.raises(PolicyError, match="too large"):
            pol.analyse(softmax_ctx(calls))
    assert [c.role for c in calls] == ["analysis"]  # no repair round quoting it
    rec = calls[0]
    assert rec.response == "" and "2,09" in (rec.error or "") and len(rec.error or "") < 1000
    assert pol.analysis == "" and pol.state()["failures"] == 1


def test_the_cap_is_a_setting_in_config_and_environment(tmp_path):
    cfg_file = tmp_path / "ks.toml"
    cfg_file.write_text("[llm]\nmax_answer_kb = 1\ncontext_tokens = 4096\nstructured_output = false\n")
    cfg = load_config(cfg_file, environ={})
    assert (cfg.llm.max_answer_kb, cfg.llm.context_tokens, cfg.llm.structured_output) == (1, 4096, False)
    cfg = load_config(None, environ={"KSEARCH_LLM_MAX_ANSWER_KB": "64", "KSEARCH_LLM_CONTEXT_TOKENS": "8192"})
    assert (cfg.llm.max_answer_kb, cfg.llm.context_tokens) == (64, 8192)
    with FakeLLMServer(KSearchScript()) as server:
        server.push(Reply("x" * 2048))
        pol = policy_for(server, max_answer_kb=1)
        with pytest.raises(PolicyError, match="over the limit of 1,024 bytes"):
            pol.analyse(softmax_ctx())
        assert pol.analyse(softmax_ctx())  # the next, normal answer passes


def test_a_repair_round_quotes_a_bounded_excerpt():
    calls: list[CallRecord] = []
    bad = "I think the tree should look like this " * 5000  # 195 KB, under the cap, not JSON
    with FakeLLMServer(KSearchScript()) as server:
        server.push(Reply(bad))
        wm = policy_for(server).init_world_model(softmax_ctx(calls), "analysis")
        repair_body = server.chat_requests()[1]["body"]
    assert wm == initial_world_model()
    first, repair = calls
    quoted = repair_body["messages"][-2]
    assert quoted["role"] == "assistant" and "characters left out" in quoted["content"]
    assert len(quoted["content"]) < 13_000
    assert len(repair.prompt) < len(first.prompt) + 14_000


# -- deadlines ---------------------------------------------------------------------------------------------------


def test_a_dripped_answer_fails_at_the_deadline():
    with FakeLLMServer() as server:
        server.push(Drip("a slow answer " * 100, interval_s=0.05))  # ~1.5 KB: over a minute at this pace
        start = time.monotonic()
        with pytest.raises(CallFailed, match=r"no complete answer within 1 s") as info:
            client(server, timeout=1.0).complete("code", "m", MSG)
        elapsed = time.monotonic() - start
    assert 0.9 < elapsed < 1.6, elapsed
    assert info.value.latency_s < 1.6


def test_a_dripped_answer_within_the_deadline_is_taken_and_retries_get_their_own():
    with FakeLLMServer() as server:
        server.push(Drip("x" * 100, interval_s=0.05), Drip("ok", interval_s=0.001, chunk=64))
        out = client(server, timeout=0.8, retries=1).complete("code", "m", MSG)
    assert out.text == "ok" and out.retries == 1


def test_ping_timeout_is_one_deadline_for_the_whole_check():
    import openai  # noqa: F401 (imported before the clock starts: a cold import takes seconds on a busy machine)
    from typer.testing import CliRunner

    import ksearch.policy.llm.ping  # noqa: F401
    from ksearch.cli import app

    with FakeLLMServer() as server:
        server.push(Drip("pong " * 200, interval_s=0.05), Drip("pong " * 200, interval_s=0.05))
        start = time.monotonic()
        out = CliRunner().invoke(app, ["llm", "ping", "--base-url", server.url, "--model", "m", "--timeout", "1"])
        elapsed = time.monotonic() - start
    assert out.exit_code == 2 and "no complete answer within" in out.output
    assert elapsed < 2.0, elapsed


# -- the model's context -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, server_kw, expected", [
    ("llama.cpp", {"props": {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1}}, 2048),
    ("vLLM", {"model_fields": {"max_model_len": 4096}}, 4096),
    ("Ollama", {"ollama_ps": {"models": [{"name": "fake-model", "model": "fake-model", "context_length": 8192}]}},
     8192),
    ("Ollama", {"ollama_show": {"parameters": "temperature 0.7\nnum_ctx 6144", "model_info": {}}}, 6144),
    ("Ollama", {"ollama_show": {"model_info": {"qwen2.context_length": 32768}}}, 32768),
])
def test_the_context_is_discovered_where_the_server_tells_it(kind, server_kw, expected):
    with FakeLLMServer(**server_kw) as server:
        info = discover_context(server.url, "fake-model", timeout_s=3.0)
        assert info.tokens == expected and kind in info.source
        cfg = LLMConfig(preset="openai", base_url=server.url, model="fake-model")
        pol = make_policy(cfg, environ={})
        assert pol.context_tokens == expected and cfg.context_tokens == expected  # recorded with the settings


def test_no_context_is_unknown_and_a_setting_skips_the_asking():
    with FakeLLMServer() as server:
        assert discover_context(server.url, "fake-model", timeout_s=3.0).tokens is None
        before = len(server.requests)
        pol = make_policy(LLMConfig(preset="openai", base_url=server.url, model="m", context_tokens=3000), environ={})
        assert pol.context_tokens == 3000 and len(server.requests) == before
    # Hosted presets are not asked (their models take 128k tokens or more).
    assert PRESETS["openai"].context_probes == () and resolve(LLMConfig(preset="llamacpp")).context_probes


def test_prompts_are_fitted_to_the_context_least_important_first():
    calls: list[CallRecord] = []
    ctx = spec_ctx(calls)
    history = [Attempt(f"c{i:04d}", "n1", "debug", "runtime_error", 0.0, message="NameError " * 30) for i in range(8)]
    with FakeLLMServer(KSearchScript()) as server:
        pol = policy_for(server, context_tokens=100_000)
        pol.implement(ctx, code_request(ctx, "debug", history))
        whole = server.chat_requests()[-1]["body"]
        pol.context_tokens = 4096
        pol.implement(ctx, code_request(ctx, "debug", history))
        fitted = server.chat_requests()[-1]["body"]
    window = Window(4096, 8192)
    assert messages_tokens(whole["messages"]) > window.prompt_tokens  # type: ignore[operator]
    assert messages_tokens(fitted["messages"]) <= window.prompt_tokens  # type: ignore[operator]
    text = fitted["messages"][1]["content"]
    # The history went first, then the spec's details; the contract, the action and the code stayed.
    assert "Attempts at this action so far" not in text and TRIMMED in text
    assert "## Candidate contract" in text and "## Action to implement" in text
    assert ctx.task.starting_source("cpu").strip() in text
    # max_tokens leaves the prompt its room in the window.
    assert fitted["max_tokens"] + messages_tokens(fitted["messages"]) <= 4096
    assert whole["max_tokens"] == 8192


def test_a_context_length_400_is_one_line_and_teaches_the_context():
    calls: list[CallRecord] = []
    ctx = spec_ctx(calls)
    with FakeLLMServer(KSearchScript(), context_limit=2500) as server:
        pol = policy_for(server)
        assert pol.context_tokens is None
        src, _ = pol.implement(ctx, code_request(ctx))
        assert src == SOFTMAX_KERNELS["compiled"]
        bodies = [r["body"] for r in server.chat_requests()]
    failed, ok = calls
    assert failed.role == ok.role == "code" and failed.response == "" and ok.error is None
    error = failed.error or ""
    assert "\n" not in error and "the server's context: 2500 tokens" in error
    assert "-c 8192" in error and "--n_ctx 8192" in error and "context_tokens = 2500" in error
    assert pol.context_tokens == 2500 and pol.state()["context_tokens"] == 2500
    assert len(bodies[1]["messages"][1]["content"]) < len(bodies[0]["messages"][1]["content"])


def test_llama_cpp_context_refusal_names_n_ctx_and_is_not_retried():
    with FakeLLMServer(context_limit=10, context_style="llamacpp") as server:
        with pytest.raises(ContextTooSmall, match="the server's context: 10 tokens") as info:
            client(server, retries=3).complete("code", "m", [{"role": "user", "content": "x" * 400}])
        assert len(server.chat_requests()) == 1 and info.value.retries == 0


def test_replay_fits_prompts_the_same_way():
    calls: list[CallRecord] = []
    ctx = spec_ctx(calls)
    with FakeLLMServer(KSearchScript(), context_limit=2500) as server:
        pol = policy_for(server)
        pol.implement(ctx, code_request(ctx))
        pol.implement(ctx, code_request(ctx))
    recorded = [{**c.__dict__} for c in calls]
    again = make_policy(LLMConfig(preset="openai", base_url="http://127.0.0.1:9/v1", model="fake-model"),
                        replay=recorded, strict_prompts=True, environ={})
    ctx2 = spec_ctx([])
    assert again.implement(ctx2, code_request(ctx2))[0] == SOFTMAX_KERNELS["compiled"]
    assert again.implement(ctx2, code_request(ctx2))  # the second, already fitted, prompt matches too


def test_ping_prints_the_context_and_warns_when_prompts_will_not_fit():
    from ksearch.policy.llm.ping import ping

    with FakeLLMServer(props={"default_generation_settings": {"n_ctx": 8192}}) as server:
        row = ping(LLMConfig(base_url=server.url, model="m"), 5.0, environ={})
    assert row["context_tokens"] == 8192 and row["context_source"] == "llama.cpp /props" and "warning" not in row
    assert row["prompts"] == "fit"
    with FakeLLMServer(props={"default_generation_settings": {"n_ctx": 1024}}) as server:
        row = ping(LLMConfig(base_url=server.url, model="m"), 5.0, environ={})
    assert row["prompts"] == "do not fit" and "-c 8192" in row["warning"] and "1024 tokens" in row["warning"]
    # A server that does not say (llama-cpp-python): the smallest real prompt is sent, and its refusal read.
    with FakeLLMServer(context_limit=300) as server:
        row = ping(LLMConfig(base_url=server.url, model="m"), 5.0, environ={})
    assert row["context_tokens"] == 300 and "refusal" in row["context_source"] and "will not fit" in row["warning"]
    with FakeLLMServer() as server:
        row = ping(LLMConfig(base_url=server.url, model="m", context_tokens=3000), 5.0, environ={})
    assert row["context_source"] == "[llm] context_tokens" and row["prompts"].startswith("trimmed")


def test_ping_cli_shows_the_context_and_the_warning():
    from typer.testing import CliRunner

    from ksearch.cli import app

    with FakeLLMServer(props={"default_generation_settings": {"n_ctx": 1024}}) as server:
        out = CliRunner().invoke(app, ["llm", "ping", "--base-url", server.url, "--model", "m"])
    assert out.exit_code == 0, out.output
    assert "context_tokens: 1024" in out.output and "will not fit" in out.output


# -- structured output -------------------------------------------------------------------------------------------


def _objects(schema: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for v in schema.values():
            found += _objects(v)
    elif isinstance(schema, list):
        for v in schema:
            found += _objects(v)
    return found


@pytest.mark.parametrize("schema", [WORLD_MODEL, WORLD_MODEL_EDIT])
def test_the_schemas_are_valid_strict_and_use_the_published_names(schema):
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema)
    for obj in _objects(schema):  # OpenAI's strict mode: all properties required, no others
        assert obj["additionalProperties"] is False and obj["required"] == list(obj["properties"])
    text = json.dumps(schema)
    for name in ("node_id", "parent_id", "node_type", "decision", "choice", "notes", "last_updated_round",
                 "difficulty_1_to_5", "score_0_to_1", "expected_vs_baseline_factor", "memory_bandwidth",
                 "register_pressure", "compute_intensity_and_hw_fit", "overall_rating_0_to_10", "confidence_0_to_1"):
        assert f'"{name}"' in text
    if schema is WORLD_MODEL:
        assert {"kernel_summary", "decision_tree", "open_questions"} <= set(schema["properties"])
    else:
        ops = schema["properties"]["ops"]["items"]["anyOf"]
        assert [o["properties"]["op"]["enum"] for o in ops] == [["update_node"], ["insert_node"], ["split_node"],
                                                                 ["delete_node"]]


@pytest.mark.parametrize("schema", [WORLD_MODEL, bounded(WORLD_MODEL)])
def test_the_initial_tree_has_actions_below_its_root(schema):
    import jsonschema

    wm = initial_world_model()
    jsonschema.validate(wm, schema, cls=jsonschema.Draft202012Validator)
    for n in wm["decision_tree"]["nodes"][1:]:  # what SmolLM2-135M writes when the action may be null
        n["action"] = None
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wm, schema, cls=jsonschema.Draft202012Validator)


def test_world_model_calls_send_the_schema_and_a_conforming_answer_flows_through():
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    with FakeLLMServer(KSearchScript()) as server:
        pol = policy_for(server)
        pol.analyse(ctx)
        wm = pol.init_world_model(ctx, "analysis")
        solved = initial_world_model()
        solved["decision_tree"]["nodes"][1]["solution_ref"] = {"solution_id": "c0001", "parent_solution_id": None,
                                                               "eval": {"status": "passed", "score": 1.3}}
        edit = pol.update(ctx, solved, [Attempt("c0001", "n1", "first", "passed", 1.3, improved=True)], None)
        pol.implement(ctx, code_request(ctx))
        bodies = [r["body"] for r in server.chat_requests()]
        answers = list(server.structured_answers)
    analysis, init, update, code = bodies
    assert "response_format" not in analysis and "response_format" not in code  # free text plus extraction
    fmt = init["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "world_model"
    assert fmt["json_schema"]["strict"] is True and fmt["json_schema"]["schema"] == WORLD_MODEL
    assert update["response_format"]["json_schema"]["schema"] == WORLD_MODEL_EDIT
    assert answers == [{"name": "world_model", "valid": True, "error": None},
                       {"name": "world_model_edit", "valid": True, "error": None}]
    assert wm == initial_world_model()
    ops = {op["op"]: op for op in edit["ops"]}
    assert ops["insert_node"]["node"]["action"]["title"]
    assert ops["update_node"]["patch"] == {  # nulls mean "unchanged": they never reach the tree
        "notes": "CURRENT: open. FOLLOW_THROUGH: try. UPDATE_BELIEF: unchanged.", "confidence_0_to_1": 0.5}


def test_an_endpoint_refusing_json_schema_falls_back_once_to_free_text_for_the_run(caplog):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    with FakeLLMServer(KSearchScript(), structured="refuse") as server:
        pol = policy_for(server)
        with caplog.at_level("WARNING", logger="ksearch.llm"):
            wm = pol.init_world_model(ctx, "analysis")
        pol.update(ctx, initial_world_model(), [], None)
        bodies = [r["body"] for r in server.chat_requests()]
    assert wm == initial_world_model()
    assert [b.get("response_format", {}).get("type") for b in bodies] == ["json_schema", None, None]
    assert [c.role for c in calls] == ["init", "edit"] and all(c.error is None for c in calls)
    state = pol.state()
    assert state["structured_output"] is None and state["structured_refused"] is True
    assert any("refused structured output" in n and "HTTP 400" in n for n in state["notes"])
    assert "refused structured output" in caplog.text
    # Resumed, the run keeps the free text.
    with FakeLLMServer(KSearchScript(), structured="refuse") as server:
        again = policy_for(server)
        again.load_state(state)
        again.update(ctx, initial_world_model(), [], None)
        assert [r["body"].get("response_format") for r in server.chat_requests()] == [None]


def test_llama_cpp_python_gets_its_schema_form():
    ctx = softmax_ctx()
    with FakeLLMServer(KSearchScript(), structured="llama-cpp-python") as server:
        pol = policy_for(server)
        assert pol.init_world_model(ctx, "analysis") == initial_world_model()
        pol.update(ctx, initial_world_model(), [], None)
        fmts = [r["body"].get("response_format") for r in server.chat_requests()]
        answers = list(server.structured_answers)
    # Its form, with the lengths bounded (its grammar enforces them; a small model needs them to finish).
    assert fmts[0]["type"] == "json_schema" and fmts[1] == {"type": "json_object", "schema": bounded(WORLD_MODEL)}
    assert fmts[2] == {"type": "json_object", "schema": bounded(WORLD_MODEL_EDIT)}
    nodes = fmts[1]["schema"]["properties"]["decision_tree"]["properties"]["nodes"]
    action_node = nodes["items"]["anyOf"][1]["properties"]
    assert nodes["maxItems"] == 4 and action_node["notes"]["maxLength"] == 80
    assert action_node["impacts"]["properties"]["memory_bandwidth"]["properties"]["notes"]["maxLength"] == 40
    assert action_node["action"]["properties"]["description"]["maxLength"] == 120
    # The longest answer the grammar allows fits in a 2,048-token answer (3.5 characters a token).
    assert [longest_answer(bounded(s)) for s in (WORLD_MODEL, WORLD_MODEL_EDIT)] == [5767, 5439]
    assert max(longest_answer(bounded(s)) for s in (WORLD_MODEL, WORLD_MODEL_EDIT)) / 3.5 < 1700
    assert "maxLength" not in json.dumps(WORLD_MODEL)  # the strict dialect's schema has none
    assert [a["valid"] for a in answers] == [True, True]
    assert pol.state()["structured_output"] == "json_object_schema"


def test_llama_cpp_python_s_500_naming_the_response_format_is_a_refusal_too():
    # What llama-cpp-python 0.3's server answers to a json_schema response format (not a 422).
    detail = ("1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
              "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}")
    with FakeLLMServer() as server:
        from fake_llm_server import Fail

        server.push(Fail(500, detail), Reply(json.dumps(initial_world_model())))
        c = client(server, retries=2)
        out = c.complete("init", "m", MSG, json_mode=True, schema="world_model")
        fmts = [r["body"].get("response_format") for r in server.chat_requests()]
    assert json.loads(out.text) == initial_world_model() and out.retries == 0
    assert c.structured == "json_object_schema" and fmts[1]["type"] == "json_object" and "schema" in fmts[1]
    with FakeLLMServer() as server:  # a 500 that does not name it is the server's trouble: retried as before
        from fake_llm_server import Fail

        server.push(Fail(500, "out of memory"), Reply("{}"))
        c = client(server, retries=2)
        assert c.complete("init", "m", MSG, json_mode=True, schema="world_model").retries == 1
        assert c.structured == "json_schema"


def test_a_refusal_that_is_not_about_the_format_restores_structured_output():
    with FakeLLMServer() as server:
        from fake_llm_server import Fail

        server.push(Fail(400, "bad model"), Fail(400, "bad model"))
        c = client(server)
        with pytest.raises(CallFailed, match="bad model"):
            c.complete("init", "m", MSG, json_mode=True, schema="world_model")
        assert c.structured == "json_schema" and not c.refused


def test_structured_output_can_be_switched_off_and_is_off_for_anthropic():
    with FakeLLMServer(KSearchScript()) as server:
        pol = policy_for(server, structured_output=False)
        pol.init_world_model(softmax_ctx(), "analysis")
        assert server.chat_requests()[0]["body"]["response_format"] == {"type": "json_object"}
    assert PRESETS["anthropic"].structured is None
    assert resolve(LLMConfig(preset="ollama")).structured == "json_schema"


def test_state_round_trip_keeps_the_new_fields(tmp_path: Path):
    with FakeLLMServer(KSearchScript()) as server:
        pol = policy_for(server, context_tokens=5000)
        pol.analyse(softmax_ctx())
        again = policy_for(server)
        again.load_state(pol.state())
        assert again.state() == pol.state() and again.context_tokens == 5000
