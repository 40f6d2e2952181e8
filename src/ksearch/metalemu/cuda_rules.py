"""The Metal-to-CUDA translation rules, read from the knowledge base's concept rows (field `msl`).

The rows that tell `ksearch port` how a CUDA construct is written in Metal also tell the CUDA engine how each MSL
name is written in CUDA, so the two directions cannot drift apart: a Metal name that no row lists is not translated.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from ksearch.knowledge import load_concepts

# A memory space a qualifier becomes on a variable declaration (other qualifiers are erased: CUDA pointers are generic).
STORAGE_KEYWORDS = ("__shared__", "__constant__")


@dataclass(frozen=True)
class Rule:
    name: str
    kind: str  # function type enum macro namespace qualifier attribute swizzle literal_suffix float_literal unsupported
    concept: str  # the concept row's id
    title: str
    metal: str  # the row's Metal form (what to write instead, for messages)
    cuda: str | None = None
    type: str | None = None  # attributes: uint / uint3; literal suffixes: half / bfloat
    value_members: tuple[str, ...] = ()
    alternative: str = ""


@dataclass(frozen=True)
class Rules:
    names: dict[str, Rule] = field(default_factory=dict)  # identifier -> rule (kinds with a name to look up)
    swizzles: tuple[str, ...] = ()  # component letter sets, e.g. ("xyzw", "rgba")
    suffixes: dict[str, Rule] = field(default_factory=dict)  # literal suffix -> rule
    float_literal: Rule | None = None  # unsuffixed floating literals become float (MSL has no double)

    def attributes(self) -> list[Rule]:
        return [r for r in self.names.values() if r.kind == "attribute"]

    def get(self, name: str) -> Rule | None:
        return self.names.get(name)

    def is_swizzle(self, member: str) -> str | None:
        """The letter set `member` swizzles with (a multi-letter or non-xyzw member), else None."""
        for letters in self.swizzles:
            if 1 <= len(member) <= 4 and all(c in letters for c in member):
                return letters
        return None


@functools.cache
def load_rules() -> Rules:
    """Every `msl` entry of every concept row; a name listed twice is a data error."""
    names: dict[str, Rule] = {}
    swizzles: list[str] = []
    suffixes: dict[str, Rule] = {}
    float_literal: Rule | None = None
    for row in load_concepts():
        for entry in row.get("msl", []):
            for name in entry["names"]:
                rule = Rule(name=name, kind=entry["kind"], concept=row["id"], title=row["title"], metal=row["metal"],
                            cuda=entry.get("cuda"), type=entry.get("type"),
                            value_members=tuple(entry.get("value_members", ())),
                            alternative=row.get("alternative", ""))
                if rule.kind == "swizzle":
                    swizzles.append(name)
                elif rule.kind == "literal_suffix":
                    _unique(suffixes, name, rule)
                elif rule.kind == "float_literal":
                    float_literal = rule
                else:
                    _unique(names, name, rule)
    return Rules(names=names, swizzles=tuple(swizzles), suffixes=suffixes, float_literal=float_literal)


def _unique(table: dict[str, Rule], name: str, rule: Rule) -> None:
    if name in table:
        raise ValueError(f"knowledge/data/concepts.yaml: the MSL name {name!r} is listed by both "
                         f"{table[name].concept!r} and {rule.concept!r}; keep it in one row")
    table[name] = rule
