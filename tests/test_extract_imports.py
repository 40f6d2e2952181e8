"""The static kernel reader (knowledge.extract.find_kernels) follows a `from ... import NAME` line to a constant of
ksearch's own module by reading that module's source; any other import stays unresolved, and nothing is imported."""

from __future__ import annotations

import importlib
import subprocess
import sys

from ksearch.knowledge.extract import find_kernels

SOURCE = '''
import mlx.core as mx
from ksearch.kernels.attention.metal_simdgroup import LOAD_KV
from numpy import pi

BODY = "    const int k0 = 0;\\n" + LOAD_KV + "    o[0] = q[0];\\n"
kern = mx.fast.metal_kernel(name="k", input_names=["q", "k", "v"], output_names=["o"], source=BODY)
other = mx.fast.metal_kernel(name="other", input_names=["x"], output_names=["o"], source="o[0] = " + pi)
'''


def test_a_constant_imported_from_ksearch_is_read_from_its_source_and_nothing_is_imported() -> None:
    # in a fresh interpreter, so that "not imported" means something
    check = ("import sys; from ksearch.knowledge.extract import find_kernels; "
             f"ks = {{k.name: k for k in find_kernels({SOURCE!r})}}; "
             "print('imported' if 'ksearch.kernels.attention.metal_simdgroup' in sys.modules else 'read'); "
             "print(repr(ks['k'].source)); print(ks['other'].source is None, repr(ks['other'].unresolved))")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, check=True)
    read, body, other = out.stdout.splitlines()
    assert read == "read"  # the module's source was parsed, the module never imported
    assert body.startswith("'    const int k0 = 0;") and "*((threadgroup vec<T, 4>*)(Ks" in body
    assert other.startswith("True") and "pi" in other  # numpy's constant: not followed


def test_a_library_kernel_built_from_another_modules_pieces_is_read_whole() -> None:
    from pathlib import Path

    fragments = importlib.import_module("ksearch.kernels.attention.metal_fragments")
    (k,) = find_kernels(Path(str(fragments.__file__)).read_text())
    assert k.name == "ks_attention_fragments" and k.source == fragments.SOURCE
