"""The knowledge layer's sizes as README and docs/knowledge.md give them are the data's (a row added to
concepts.yaml left "56 concept rows" standing beside 64)."""

from __future__ import annotations

import re
from pathlib import Path

from ksearch.knowledge import load_assertions, load_concepts, load_hardware, load_patterns

ROOT = Path(__file__).resolve().parent.parent


def test_readme_counts_the_knowledge_it_ships() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    said = {name: int(m.group(1)) for name, pattern in (
        ("concepts", r"(\d+) concept rows"), ("patterns", r"(\d+) optimisation patterns"),
        ("assertions", r"(\d+) properties a correct kernel keeps"), ("hardware", r"(\d+) hardware profiles"))
        if (m := re.search(pattern, text))}
    have = {"concepts": len(load_concepts()), "patterns": len(load_patterns()), "assertions": len(load_assertions()),
            "hardware": len(load_hardware())}
    assert said == have


def test_the_knowledge_page_counts_the_concept_rows() -> None:
    m = re.search(r"`concepts.yaml` \| (\d+) rows", (ROOT / "docs" / "knowledge.md").read_text())
    assert m is not None and int(m.group(1)) == len(load_concepts())
