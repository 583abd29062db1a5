"""fleet.cli.redis_import: a `fleet` command imports redis-py without OpenTelemetry's SDK, and
leaves OpenTelemetry to every later importer as it is. Each case runs in a fresh interpreter,
where nothing has imported redis-py yet; the first pins what redis-py does when it cannot
import OpenTelemetry (takes it as not installed), which a redis-py upgrade could change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec

import pytest

from tests.needs import missing


@pytest.fixture(autouse=True)
def _opentelemetry_installed():
    # without it there is nothing to hide: redis-py skips it by itself
    if find_spec("opentelemetry") is None:
        missing("OpenTelemetry's SDK is not installed (the dev extra installs it)")


def _run(code: str, **env) -> dict:
    """``code`` in a fresh interpreter; the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


UNDER_THE_FINDER = "from fleet.cli import redis_import\nredis_import.install()\nimport redis\n"
REPORT = """
import json, sys
import redis.observability.providers as p
print(json.dumps({
    "otel_loaded": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"),
    "redis_sees_otel": p.OTEL_AVAILABLE,
    "loader": type(redis.__loader__).__name__,
    "finders": [type(f).__name__ for f in sys.meta_path],
}))
"""


def test_redis_py_imported_under_the_finder_loads_no_opentelemetry_and_takes_it_as_absent():
    got = _run(UNDER_THE_FINDER + REPORT)
    assert got["otel_loaded"] == []
    assert got["redis_sees_otel"] is False
    # nothing of the finder is left once redis-py is loaded
    assert got["loader"] == "SourceFileLoader" and "_Finder" not in got["finders"]


def test_opentelemetry_imports_as_usual_once_redis_py_is_loaded():
    got = _run(UNDER_THE_FINDER + "from opentelemetry.sdk.metrics import MeterProvider\n" + REPORT)
    assert "opentelemetry.sdk.metrics" in got["otel_loaded"]
    assert got["redis_sees_otel"] is False  # redis-py decided when it loaded


def test_a_process_that_loaded_opentelemetry_first_gets_redis_py_as_it_is():
    got = _run("import opentelemetry.sdk.metrics\n" + UNDER_THE_FINDER + REPORT)
    assert got["redis_sees_otel"] is True


def test_install_after_redis_py_is_loaded_adds_no_finder_and_twice_adds_one():
    got = _run(
        "import json, sys\nimport redis\nfrom fleet.cli import redis_import\n"
        "redis_import.install()\nafter_redis = [type(f).__name__ for f in sys.meta_path]\n"
        "redis_import.install('json_missing_pkg')\nredis_import.install('json_missing_pkg')\n"
        "print(json.dumps({'after_redis': after_redis, "
        "'twice': [type(f).__name__ for f in sys.meta_path]}))"
    )
    assert "_Finder" not in got["after_redis"]
    assert got["twice"].count("_Finder") == 1


def test_a_package_that_imports_opentelemetry_outside_a_try_still_loads_with_it(tmp_path):
    """A later redis-py that needed OpenTelemetry at import would load as it is, only slower,
    rather than fail every command that reads Redis."""
    pkg = tmp_path / "needs_otel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from opentelemetry.sdk.metrics import MeterProvider\n")
    got = _run(
        "import json, sys\nfrom fleet.cli import redis_import\n"
        "redis_import.install('needs_otel')\nimport needs_otel\n"
        "print(json.dumps({'has': needs_otel.MeterProvider.__name__, "
        "'loader': type(needs_otel.__loader__).__name__}))",
        PYTHONPATH=str(tmp_path),
    )
    assert got == {"has": "MeterProvider", "loader": "SourceFileLoader"}
