"""Shared test settings: a private null cache per session and a hypothesis profile sized for 2 cores."""

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")


@pytest.fixture(autouse=True, scope="session")
def _null_cache(tmp_path_factory):
    """Keep null draws made by tests out of the user's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("WQK_CACHE_DIR", str(tmp_path_factory.mktemp("wqk-cache")))
    yield
    mp.undo()
