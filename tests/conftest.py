import os
import sys

import pytest

os.environ.setdefault("KSEARCH_TEST", "1")
# Runs started through the CLI (load_config reads the environment) leave out the end's confirmation unless a test asks
# for it: six more evaluations a run would cost the suite minutes (tests/test_confirm.py and the wall-time test of
# tests/test_search_resume.py time it).
os.environ.setdefault("KSEARCH_CONFIRM_TOP", "0")
# pytest-xdist's workers start with COLUMNS=80, which the CLI's console (made at import) would keep for good; tests
# that need a width pass their own COLUMNS to the command they run.
os.environ.pop("COLUMNS", None)


@pytest.fixture(scope="session")
def cpu_backend():
    from ksearch.backends import get_backend

    return get_backend("mlx-cpu")


@pytest.fixture(autouse=True)
def fresh_attention_plans():
    """The attention dispatch keeps its CUDA plan per shape; tests that stand in for the device or the driver
    (monkeypatch) would otherwise meet a plan made under another test's stand-ins."""
    yield
    attention = sys.modules.get("ksearch.kernels.attention")
    if attention is not None:
        attention.clear_plans()
