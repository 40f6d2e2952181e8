"""Code and JSON extraction: exact code, robust JSON, reasons phrased for a repair prompt."""

from __future__ import annotations

from fake_llm_server import SOFTMAX_KERNELS

from ksearch.policy.llm.parsing import extract_code, extract_json

HEX = '''import mlx.core as mx

LOG2E = 0x1.715476p+0  # in a kernel source string this is how it is written
SRC = """
    float y = exp2(x * 0x1.715476p+0f);   // 1.4426950216293335
"""


def run(x):
    return mx.exp2(x * float.fromhex("0x1.715476p+0"))
'''


def test_hex_float_literals_survive_exactly():
    got = extract_code(f"Sure.\n\n```python\n{HEX}```\n\nThe constant is log2(e).").value
    assert got == HEX
    assert got.count("0x1.715476p+0") == 3 and "2.718" not in got


def test_code_is_byte_exact_including_whitespace_and_tabs():
    code = "import mlx.core as mx\n\n\ndef run(x):\n\treturn x   \n\n# trailing comment  \n"
    assert extract_code(f"```python\n{code}```").value == code


def test_last_block_defining_run_wins():
    text = ("First try:\n```python\ndef run(x):\n    return 1\n```\nHelper:\n```python\ndef helper():\n    pass\n```\n"
            "Final:\n```py\ndef run(x):\n    return 2\n```")
    assert extract_code(text).value == "def run(x):\n    return 2\n"


def test_unlabelled_fence_and_bare_code_are_accepted():
    assert extract_code("```\ndef run(x):\n    return x\n```").value == "def run(x):\n    return x\n"
    assert extract_code("def run(x):\n    return x").value == "def run(x):\n    return x\n"


def test_missing_and_unclosed_blocks_give_reasons():
    assert "no ```python code block" in (extract_code("I think we should fuse.").problem or "")
    assert "not closed" in (extract_code("```python\nimport mlx\ndef run(x):\n    return").problem or "")
    assert "does not define" in (extract_code("```python\ndef kernel(x):\n    pass\n```").problem or "")


def test_thinking_is_ignored():
    text = "<think>maybe ```python\ndef run(x): return 0\n``` no</think>\n```python\ndef run(x):\n    return 1\n```"
    assert extract_code(text).value == "def run(x):\n    return 1\n"


def test_scripted_kernels_extract_unchanged():
    for src in SOFTMAX_KERNELS.values():
        assert extract_code(f"Kernel:\n```python\n{src}```\nDone.").value == src


def test_json_plain_fenced_prose_and_trailing_commas():
    assert extract_json('{"ops": []}', ("ops",)).value == {"ops": []}
    assert extract_json('```json\n{"ops": [1]}\n```', ("ops",)).value == {"ops": [1]}
    assert extract_json('Here you go: {"ops": [], "active_leaf_id": "n1"} - enjoy', ("ops",)).value["active_leaf_id"] \
        == "n1"
    assert extract_json('{"ops": [{"op": "delete_node", "node_id": "n3",},],}', ("ops",)).value == \
        {"ops": [{"op": "delete_node", "node_id": "n3"}]}


def test_json_problems_are_explained():
    assert "no JSON object" in (extract_json("I would insert a node.").problem or "")
    truncated = extract_json('{"ops": [{"op": "insert_node", "node": {"title": "x"', ("ops",))
    assert truncated.value is None and "does not parse" in (truncated.problem or "")
    assert "lacks the key(s) ops" in (extract_json('{"edits": []}', ("ops",)).problem or "")
    assert "not an object" in (extract_json("[1, 2]", ("ops",)).problem or "")
