"""The JSON schemas sent as structured-output response formats: the published K-Search world model and its
edits (field names of the public implementation; see docs/llm.md).

They are written for the strictest dialect in use (OpenAI's `strict: true`): every object lists all its
properties as required and allows no others, and what may be absent is a union with null. A server that
constrains decoding with them (vLLM, llama.cpp, Ollama, OpenAI, Gemini) can then only produce a tree or an edit
of the right shape, which is what lets a small local model build a world model at all. Ratings are not bounded
here (not every dialect takes minimum/maximum): the world model clamps them on load.

Nulls in an update_node patch mean "leave unchanged" (strict mode cannot leave a field out);
`without_null_patches` removes them before the edit is applied.
"""

from __future__ import annotations

from typing import Any

IMPACT_KEYS = ("memory_bandwidth", "register_pressure", "compute_intensity_and_hw_fit")

_STR: dict[str, Any] = {"type": "string"}
_NUM: dict[str, Any] = {"type": "number"}
_INT: dict[str, Any] = {"type": "integer"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _array(items: dict[str, Any], lo: int = 0, hi: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "items": items}
    if lo:
        out["minItems"] = lo
    if hi is not None:
        out["maxItems"] = hi
    return out


def _op(name: str) -> dict[str, Any]:
    return {"type": "string", "enum": [name]}


_ACTION_FIELDS: dict[str, Any] = {
    "title": _STR,
    "description": _STR,
    "difficulty_1_to_5": _INT,
    "score_0_to_1": _NUM,
    "expected_vs_baseline_factor": _NUM,
    "rationale": _STR,
}
ACTION = _object(_ACTION_FIELDS)
IMPACTS = _object({k: _object({"rating_0_to_10": _NUM, "risk": _STR, "notes": _STR}) for k in IMPACT_KEYS})


def node_schema(new: bool) -> dict[str, Any]:
    """A world-model node. `new`: one an edit inserts (it must carry an action); otherwise a node of the
    initial tree, whose root has neither action nor impacts."""
    return _object(
        {
            "node_id": _STR,
            "parent_id": _nullable(_STR),
            "node_type": _STR,
            "decision": _STR,
            "choice": _STR,
            "notes": _STR,
            "last_updated_round": _INT,
            "action": ACTION if new else _nullable(ACTION),
            "impacts": IMPACTS if new else _nullable(IMPACTS),
            "overall_rating_0_to_10": _NUM,
            "confidence_0_to_1": _NUM,
        }
    )


#: The initial world model (the loader adds computed_signals and our own bookkeeping).
WORLD_MODEL = _object(
    {
        "kernel_summary": _STR,
        "decision_tree": _object(
            {"root_id": _STR, "active_leaf_id": _nullable(_STR), "nodes": _array(node_schema(False), 2, 12)}
        ),
        "open_questions": _array(_STR, 0, 8),
    }
)

_PATCH = _object(
    {
        "decision": _nullable(_STR),
        "choice": _nullable(_STR),
        "notes": _nullable(_STR),
        "overall_rating_0_to_10": _nullable(_NUM),
        "confidence_0_to_1": _nullable(_NUM),
        "action": _nullable(_object({k: _nullable(v) for k, v in _ACTION_FIELDS.items()})),
        "impacts": _nullable(IMPACTS),
    }
)

#: One world-model edit: {"active_leaf_id", "ops": [update_node | insert_node | split_node | delete_node]}.
WORLD_MODEL_EDIT = _object(
    {
        "active_leaf_id": _nullable(_STR),
        "ops": _array(
            {
                "anyOf": [
                    _object({"op": _op("update_node"), "node_id": _STR, "patch": _PATCH}),
                    _object(
                        {
                            "op": _op("insert_node"),
                            "parent_id": _STR,
                            "parent_solution_id": _nullable(_STR),
                            "node": node_schema(True),
                        }
                    ),
                    _object({"op": _op("split_node"), "node_id": _STR, "children": _array(node_schema(True), 2, 3)}),
                    _object({"op": _op("delete_node"), "node_id": _STR}),
                ]
            },
            0,
            8,
        ),
    }
)

#: name -> schema, for the calls that ask for one.
SCHEMAS: dict[str, dict[str, Any]] = {"world_model": WORLD_MODEL, "world_model_edit": WORLD_MODEL_EDIT}

#: Bounds for servers that turn the schema into a grammar and enforce all of it (llama-cpp-python's form): a small
#: model writes strings and nodes until its answer is cut, and a cut answer is no JSON at all. Not sent elsewhere:
#: OpenAI's strict mode refuses maxLength.
MAX_STRING_CHARS = 200
MAX_TREE_NODES = 5  # the root and four first actions
MAX_EDIT_OPS = 4


def bounded(schema: Any, key: str = "") -> Any:
    """A copy of `schema` whose strings (other than enums) take at most MAX_STRING_CHARS characters and whose tree
    and edit lists at most MAX_TREE_NODES nodes and MAX_EDIT_OPS ops."""
    if isinstance(schema, list):
        return [bounded(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded(v, k) for k, v in schema.items()}
    if out.get("type") == "string" and "enum" not in out:
        out["maxLength"] = MAX_STRING_CHARS
    if out.get("type") == "array" and key in ("nodes", "ops", "open_questions"):
        cap = {"nodes": MAX_TREE_NODES, "ops": MAX_EDIT_OPS, "open_questions": 3}[key]
        out["maxItems"] = min(cap, out.get("maxItems", cap))
    return out


BOUNDED_SCHEMAS: dict[str, dict[str, Any]] = {name: bounded(s) for name, s in SCHEMAS.items()}

#: Response-format dialects: OpenAI's (vLLM, llama.cpp's llama-server, Ollama, Gemini and others take it too),
#: and llama-cpp-python's server, which takes only {"type": "json_object", "schema": ...}.
JSON_SCHEMA = "json_schema"
JSON_OBJECT_SCHEMA = "json_object_schema"
DIALECTS = (JSON_SCHEMA, JSON_OBJECT_SCHEMA)


def response_format(name: str, dialect: str) -> dict[str, Any]:
    schema = SCHEMAS[name]
    if dialect == JSON_OBJECT_SCHEMA:
        return {"type": "json_object", "schema": BOUNDED_SCHEMAS[name]}
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def without_null_patches(edit: dict[str, Any]) -> dict[str, Any]:
    """The edit with the nulls of its update_node patches removed (null: leave the field as it is)."""
    ops = edit.get("ops")
    if not isinstance(ops, list):
        return edit
    for op in ops:
        patch = op.get("patch") if isinstance(op, dict) else None
        if not isinstance(patch, dict):
            continue
        clean = {k: v for k, v in patch.items() if v is not None}
        if isinstance(clean.get("action"), dict):
            clean["action"] = {k: v for k, v in clean["action"].items() if v is not None}
        if isinstance(clean.get("impacts"), dict):
            clean["impacts"] = {k: v for k, v in clean["impacts"].items() if v is not None}
        op["patch"] = clean
    return edit
