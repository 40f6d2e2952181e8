import os

import pytest

os.environ.setdefault("KSEARCH_TEST", "1")


@pytest.fixture(scope="session")
def cpu_backend():
    from ksearch.backends import get_backend

    return get_backend("mlx-cpu")
