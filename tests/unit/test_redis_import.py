"""core.redis_import: a `fleet` command imports redis-py without OpenTelemetry's SDK, and
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


UNDER_THE_FINDER = "from core import redis_import\nredis_import.install()\nimport redis\n"
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
        "import json, sys\nimport redis\nfrom core import redis_import\n"
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
        "import json, sys\nfrom core import redis_import\n"
        "redis_import.install('needs_otel')\nimport needs_otel\n"
        "print(json.dumps({'has': needs_otel.MeterProvider.__name__, "
        "'loader': type(needs_otel.__loader__).__name__}))",
        PYTHONPATH=str(tmp_path),
    )
    assert got == {"has": "MeterProvider", "loader": "SourceFileLoader"}


# redis-py's asyncio client and importlib.metadata are deferred: bound by name, run at first use
DEFERRED_REPORT = """
import json, sys
print(json.dumps({
    "deferred": sorted(n for n, m in sys.modules.items() if type(m).__name__ == "_Deferred"),
    "ran": sorted(m for m in ("redis.asyncio.client", "redis.asyncio.connection",
                              "importlib.metadata._meta") if m in sys.modules),
    "finders": [type(f).__name__ for f in sys.meta_path],
}))
"""


def test_redis_py_under_the_finder_runs_neither_its_asyncio_client_nor_importlib_metadata():
    """What the synchronous client never uses stays unrun: if a redis-py upgrade used them as
    it loads, it would load as it is, and this test says the deferral no longer pays."""
    got = _run(
        UNDER_THE_FINDER + "assert redis.Redis.ping and redis.ConnectionPool\n" + DEFERRED_REPORT
    )
    assert got["deferred"] == ["asyncio", "importlib.metadata", "redis.asyncio"]
    assert got["ran"] == []
    assert "_Deferrer" not in got["finders"] and "_Finder" not in got["finders"]


SWAPPED = """
import json, sys
import redis._parsers.base as base, redis.event as event
was = [type(sys.modules["asyncio"]).__name__, base.IncompleteReadError.__module__]
lent = [base.IncompleteReadError]  # in a list: the swap replaces every module's binding
try:
    raise lent[0](b"", 1)
except EOFError:  # a stand-in is still the kind of error it stands for
    pass
import asyncio
asyncio.run(asyncio.sleep(0))  # asyncio's code runs at its first use
print(json.dumps({
    "was": was,
    "now": type(sys.modules["asyncio"]).__name__,
    "real": [base.IncompleteReadError is asyncio.IncompleteReadError,
             base.StreamReader is asyncio.StreamReader, event.asyncio is asyncio],
    "left": sorted(n for n, m in sys.modules.items()
                   if any(v is lent[0] for v in list(vars(m).values()))),
}))
"""


def test_the_names_asyncio_lends_redis_py_become_the_real_ones_when_asyncio_runs():
    """redis-py's parsers bind ``IncompleteReadError`` and ``StreamReader`` from asyncio as they
    load, for their asyncio client alone: lent as stand-ins, they are asyncio's own once asyncio
    runs (an ``except IncompleteReadError`` in that client catches the real error), and no
    module keeps a stand-in."""
    got = _run(UNDER_THE_FINDER + SWAPPED)
    assert got["was"] == ["_Deferred", "asyncio"]
    assert got["now"] == "module"
    assert got["real"] == [True, True, True]
    assert got["left"] == []


def test_a_deferred_module_runs_at_its_first_use_and_is_then_the_real_module():
    got = _run(
        UNDER_THE_FINDER
        + "import types\nfrom redis.asyncio import Redis\nimport importlib.metadata as md\n"
        "assert Redis.__module__ == 'redis.asyncio.client'\n"
        "assert type(redis.asyncio) is types.ModuleType and redis.asyncio.Redis is Redis\n"
        "assert type(redis.asyncio.__loader__).__name__ == 'SourceFileLoader'\n"
        "assert md.version('redis') == redis.__version__\n" + DEFERRED_REPORT
    )
    assert got["deferred"] == []
    assert got["ran"] == [
        "importlib.metadata._meta",
        "redis.asyncio.client",
        "redis.asyncio.connection",
    ]


def test_importing_a_submodule_of_a_deferred_package_later_runs_the_package_first():
    """As an ordinary import does: the package's ``__init__`` before its submodule's code."""
    got = _run(UNDER_THE_FINDER + "import redis.asyncio.lock\n" + DEFERRED_REPORT)
    assert "redis.asyncio" not in got["deferred"]
    assert "redis.asyncio.client" in got["ran"]


def _package(root, files: dict[str, str]) -> None:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_a_package_that_uses_a_deferred_package_while_it_loads_is_loaded_again_as_it_is(tmp_path):
    """Run late, inside its parent's load, ``pkg.sub`` meets a half-loaded ``pkg.base`` that an
    ordinary import order never shows it: the deferral does not apply, so the package is
    loaded again from scratch, without it."""
    _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import sub\nfrom pkg.base import B\n",
            "pkg/base.py": "from pkg.sub import S\nB = S + 1\n",
            "pkg/sub/__init__.py": "S = 1\nfrom pkg.base import B\n",
        },
    )
    got = _run(
        "import json, sys, types\nfrom core import redis_import\n"
        "redis_import.install('pkg', deferred=('pkg.sub',))\nimport pkg\n"
        "print(json.dumps({'B': pkg.B, 'sub': type(sys.modules['pkg.sub']).__name__, "
        "'same': pkg.sub is sys.modules['pkg.sub'] and pkg.base.S is pkg.sub.S, "
        "'finders': [type(f).__name__ for f in sys.meta_path]}))",
        PYTHONPATH=str(tmp_path),
    )
    assert got["B"] == 2 and got["sub"] == "module" and got["same"] is True
    assert "_Deferrer" not in got["finders"]


def test_a_package_that_fails_by_itself_fails_once_with_its_own_error(tmp_path):
    _package(tmp_path, {"bad/__init__.py": "open(__file__ + '.runs', 'a').write('x')\n1 / 0\n"})
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from core import redis_import\nredis_import.install('bad')\nimport bad",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert "ZeroDivisionError" in done.stderr
    assert (tmp_path / "bad" / "__init__.py.runs").read_text() == "x"
