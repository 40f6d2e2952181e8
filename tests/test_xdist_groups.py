"""The test run's own machinery: pytest-xdist's groups keep a module's expensive fixtures in one worker."""

import pytest

pytestmark = pytest.mark.xdist_group("xdist_probe")


def test_grouped_tests_stay_in_one_worker(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run with --dist loadgroup (make test runs that way)")
    assert request.node.nodeid.endswith("@xdist_probe"), (
        "pytest-xdist's groups are ignored by this pytest: each grouped module's fixtures (a real run, a Ray cluster) "
        "are built once per worker; keep pytest below the version that broke them (pyproject.toml)")
