"""What uv runs with when a worker builds a job's environment (artifacts.pyenv)."""

from pathlib import Path

from artifacts.pyenv import uv_environment


def test_uv_gets_the_hosts_own_cache_unless_the_worker_names_one():
    own = uv_environment({"PATH": "/bin", "FLEET_BROKER_URL": "redis://x"}, Path("/w/uv-cache"))
    assert own == {"PATH": "/bin", "UV_CACHE_DIR": "/w/uv-cache", "UV_PYTHON_DOWNLOADS": "never"}
    # a local fleet's simulated hosts share one disk, so one cache: uv hard-links from it
    shared = uv_environment({"UV_CACHE_DIR": "/fleet/uv-cache"}, Path("/w/uv-cache"))
    assert shared["UV_CACHE_DIR"] == "/fleet/uv-cache"
