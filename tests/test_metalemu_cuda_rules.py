"""The concept rows drive both directions: `ksearch port` (CUDA -> Metal) and the CUDA engine (Metal -> CUDA).

- every MSL name the translator handles comes from a row's `msl` entry, and every public name of the CUDA-side MSL
  library is such a name;
- round trip: a row's Metal name, translated, becomes the row's `cuda` spelling, which the CUDA analyzer of
  `ksearch port` maps back to the same row, whose Metal form names the Metal construct again.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ksearch.errors import MetalEmuError
from ksearch.knowledge import load_concepts
from ksearch.knowledge.analyzer import analyze_cuda
from ksearch.metalemu.cuda_kernel import LIBRARY_PARTS, MetalKernelTranslation
from ksearch.metalemu.cuda_rules import STORAGE_KEYWORDS, load_rules
from ksearch.metalemu.cuda_translate import translate

RULES = load_rules()
ENTRIES = [(row, entry) for row in load_concepts() for entry in row.get("msl", [])]
NAMED = [(row, entry, name) for row, entry in ENTRIES for name in entry["names"]]
LIBRARY = Path(__file__).resolve().parents[1] / "src" / "ksearch" / "metalemu"
# Implementation types of the library that no MSL source names (what `v.xy = w` and packed types are built on).
IMPLEMENTATION = {"packed_vec", "swizzle_ref"}


def test_every_msl_name_is_listed_once_and_named_by_its_rows_metal_form() -> None:
    seen: dict[str, str] = {}
    for row, entry, name in NAMED:
        assert name not in seen or entry["kind"] in ("swizzle", "literal_suffix"), (name, seen.get(name), row["id"])
        seen[name] = row["id"]
        if entry["kind"] in ("swizzle", "float_literal"):
            continue
        text = row["metal"]
        if entry["kind"] == "literal_suffix":
            assert re.search(rf"\d{name}\b|suffix {name}\b", text), (row["id"], name)
        else:
            assert re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text), (row["id"], name)


@pytest.mark.parametrize(("row", "entry"), [pytest.param(r, e, id=f"{r['id']}:{e['names'][0]}") for r, e in ENTRIES
                                            if "cuda" in e])
def test_round_trip_through_ksearch_port(row, entry) -> None:
    """The CUDA spelling a Metal name becomes is recognised by port's analyzer as this row, whose Metal form names
    the Metal construct: port and the emulation read one mapping in opposite directions."""
    ctx = analyze_cuda(entry["cuda"], backend="mlx-metal")
    finding = next((f for f in ctx["findings"] if f["concept"] == row["id"]), None)
    assert finding is not None, f"port does not map {entry['cuda']!r} to {row['id']}"
    for name in entry["names"]:
        if entry["kind"] not in ("swizzle", "literal_suffix", "float_literal"):
            assert re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", finding["target"]), (row["id"], name)


def _use(name: str, kind: str) -> str:
    return {"function": f"x = {name}(a, b);", "type": f"{name} v;", "enum": f"x = {name};",
            "macro": f"x = {name};", "namespace": f"x = {name}::exp(a);", "unsupported": f"{name} q;",
            "qualifier": f"{name} float* p;", "attribute": f"x = {name}.x;"}[kind]


@pytest.mark.parametrize(("row", "entry", "name"), [pytest.param(r, e, n, id=f"{r['id']}:{n}") for r, e, n in NAMED
                                                    if e["kind"] not in ("swizzle", "literal_suffix",
                                                                         "float_literal")])
def test_every_rule_drives_the_translation(row, entry, name) -> None:
    kind = entry["kind"]
    src = _use(name, kind)
    if kind == "unsupported":
        with pytest.raises(MetalEmuError, match=re.escape(name)):
            translate(src, kernel="k")
        return
    out = translate(src, kernel="k").text
    if kind in ("function", "type", "enum"):
        assert f"::metal::{name}" in out
    elif kind == "namespace":
        assert ("::metal::exp" if name == "metal" else f"::metal::{name}::exp") in out
    elif kind == "qualifier":
        assert name not in out.split()  # erased on a pointer
    else:  # macros and attributes keep their names (the library defines them / the prologue declares them)
        assert out == src
    if kind == "attribute":
        kt = MetalKernelTranslation("k", [], ["o"], src)
        assert f" {name} = ks_launch_.{name};" in kt.cuda_source([], ["float32"]).source


def test_swizzles_suffixes_and_literals_come_from_rows() -> None:
    assert set(RULES.swizzles) == {"xyzw", "rgba"}
    assert {s: r.type for s, r in RULES.suffixes.items()} == {"h": "half", "H": "half", "bf": "bfloat", "BF": "bfloat"}
    assert RULES.float_literal is not None and RULES.float_literal.concept == "double_precision"
    assert {r.cuda for r in RULES.names.values() if r.kind == "qualifier"} & set(STORAGE_KEYWORDS) == \
        set(STORAGE_KEYWORDS)


def test_names_outside_the_rows_are_left_alone() -> None:
    src = "float not_msl = helper_fn(a) + my_struct.field + other::thing(1) + frobnicate<int>(2);"
    assert translate(src, kernel="k").text == src


def _library_names() -> set[str]:
    """Names the library declares in namespace metal (outside detail and class bodies), macros included."""
    raw = "\n".join((LIBRARY / p).read_text() for p in LIBRARY_PARTS)
    text = re.sub(r"//[^\n]*", "", raw)
    # Names the library's own helper macros declare, then the helper macros themselves out of the way.
    names = set(re.findall(r"(?<!define )\bKS_(?:F1|F2|F3|REDUCE|TEST|ATOMIC_RMW)\((\w+),", text))
    for n in re.findall(r"(?<!define )\bKS_VEC_TYPES\(\w+, (\w+)\)", text):
        names |= {f"{p}{n}{k}" for p in ("", "packed_") for k in (2, 3, 4)}
    text = re.sub(r"#define (KS_\w+)(\([^)]*\))?(?:[^\n]*\\\n)*[^\n]*", "", text)
    names |= set(re.findall(r"#define (\w+)", text))
    for scoped, body in re.findall(r"\benum (class )?\w+ (?::\s*\w+ )?\{([^}]*)\}", text):
        if not scoped:  # a scoped enum's members are reached through its name
            names |= set(re.findall(r"(\w+)\s*=", body))
    # Keep namespace scopes only: bodies of functions, classes, enums and of namespace detail are dropped (their
    # members are reached through their type, or are not the library's surface).
    out: list[str] = []
    skip, i = 0, 0
    for tok in re.finditer(r"namespace (\w+) \{|\{|\}", text):
        if not skip:
            out.append(text[i:tok.start()])
        i = tok.end()
        if tok.group(0) == "}":
            skip = max(0, skip - 1)
            if not skip:
                out.append(";")
        elif skip or tok.group(1) in (None, "detail"):
            skip += 1
        else:
            out.append(tok.group(0))
    out.append(text[i:])
    t = re.sub(r"alignas\([^)]*\)", "", "".join(out))
    names |= set(re.findall(r"typedef [^;]*?(\w+);", t)) | set(re.findall(r"\bstruct (\w+)", t))
    names |= set(re.findall(r"\benum (?:class )?(\w+)", t))
    names |= set(re.findall(r"KS_(?:HD|D) (?:static )?(?:explicit )?(?:constexpr )?[\w:<>, ]+?[\s*&](\w+)\(", t))
    names |= set(re.findall(r"namespace (\w+) \{", t))
    return {n for n in names if not n.startswith("KS_") and n != "detail"}


def test_the_library_declares_only_names_the_rows_list() -> None:
    lib = _library_names()
    assert {"simd_sum", "float4", "packed_half3", "mem_flags", "memory_order_relaxed", "INFINITY", "fast"} <= lib
    listed = set(RULES.names)
    assert lib - listed - IMPLEMENTATION == set(), "library names no concept row lists"
    library_kinds = ("function", "type", "enum", "macro", "namespace")
    missing = {n for n, r in RULES.names.items() if r.kind in library_kinds} - lib
    assert missing == set(), "rows name MSL constructs the library does not define"
