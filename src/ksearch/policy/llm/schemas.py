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
_NULL: dict[str, Any] = {"type": "null"}


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
    """A world-model node. `new`: one an edit inserts, which must carry an action. Otherwise a node of the
    initial tree: the root (node_type "root", neither action nor impacts) or an action node (both), so that a
    model cannot leave its first tree without an action to try (a small one, left the choice, writes none)."""

    def node(node_type: dict[str, Any], action: dict[str, Any], impacts: dict[str, Any]) -> dict[str, Any]:
        return _object(
            {
                "node_id": _STR,
                "parent_id": _nullable(_STR),
                "node_type": node_type,
                "decision": _STR,
                "choice": _STR,
                "notes": _STR,
                "last_updated_round": _INT,
                "action": action,
                "impacts": impacts,
                "overall_rating_0_to_10": _NUM,
                "confidence_0_to_1": _NUM,
            }
        )

    action_node = node(_STR, ACTION, IMPACTS)
    if new:
        return action_node
    return {"anyOf": [node(_op("root"), _NULL, _NULL), action_node]}


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
#: model writes strings and nodes until its answer is cut, and a cut answer is no JSON at all. They are chosen so
#: that the longest answer the grammar allows (`longest_answer`: 5,767 characters for a tree, 5,439 for an edit,
#: some 1,650 tokens at 3.5 characters a token) fits in a 2,048-token answer (docs/llm.md, small local models).
#: Not sent elsewhere: OpenAI's strict mode refuses maxLength.
MAX_STRING_CHARS = 100
#: Strings that name, label or grade: short. Free text: a sentence or two.
STRING_CHARS = {"node_id": 16, "parent_id": 16, "root_id": 16, "active_leaf_id": 16, "parent_solution_id": 16,
                "node_type": 16, "risk": 8, "title": 48, "decision": 48, "choice": 48, "notes": 80,
                "description": 120, "rationale": 80, "kernel_summary": 160}
IMPACT_NOTES_CHARS = 40  # an impact's notes (a node's own notes say CURRENT / FOLLOW_THROUGH / UPDATE_BELIEF)
MAX_TREE_NODES = 4  # the root and three first actions
MAX_EDIT_OPS = 2
ARRAY_ITEMS = {"nodes": MAX_TREE_NODES, "ops": MAX_EDIT_OPS, "open_questions": 2, "children": 2}


def bounded(schema: Any, key: str = "", parent: str = "") -> Any:
    """A copy of `schema` whose strings (other than enums) take at most STRING_CHARS[their key] characters
    (MAX_STRING_CHARS where none is named) and whose lists at most ARRAY_ITEMS[their key] items."""
    if isinstance(schema, list):
        return [bounded(v, key, parent) for v in schema]
    if not isinstance(schema, dict):
        return schema
    # A property's schema is bounded by its own name (and its object's); a union's and a list's members by the name
    # they stand for.
    out = {k: bounded(v, key, parent) for k, v in schema.items() if k != "properties"}
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {name: bounded(v, name, key) for name, v in schema["properties"].items()}
    if out.get("type") == "string" and "enum" not in out:
        impact = key == "notes" and parent in IMPACT_KEYS
        out["maxLength"] = IMPACT_NOTES_CHARS if impact else STRING_CHARS.get(key, MAX_STRING_CHARS)
    if out.get("type") == "array" and key in ARRAY_ITEMS:
        cap = ARRAY_ITEMS[key]
        out["maxItems"] = min(cap, out.get("maxItems", cap))
        if out.get("minItems", 0) > out["maxItems"]:
            out["minItems"] = out["maxItems"]
    return out


def longest_answer(schema: Any, key: str = "") -> int:
    """The most characters a compact JSON value of a bounded `schema` can take (numbers at 24 characters): what a
    grammar built from it lets a model write, whitespace aside."""
    if "anyOf" in schema:
        return max(longest_answer(s, key) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind == "object":
        props = schema["properties"]
        return 2 + sum(len(k) + 4 + longest_answer(v, k) for k, v in props.items())
    if kind == "array":
        return 2 + schema["maxItems"] * (longest_answer(schema["items"], key) + 1)
    if kind == "string":
        if "enum" in schema:
            return 2 + max(len(v) for v in schema["enum"])
        # A character that JSON escapes takes two; a model writes few of them.
        return 2 + int(schema["maxLength"])
    if kind == "null":
        return 4
    return 24  # number, integer


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
