"""``python -m tasks worker`` is ``celery -A tasks worker`` without Celery's plugin commands,
and ``import tasks`` loads redis-py as the `fleet` CLI does. Every e2e test's worker starts so
(fleet.local.start_worker); test_hardening and test_own_code start theirs with ``celery``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "tasks", *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_python_m_tasks_worker_is_celerys_worker_command_with_the_same_options():
    ours = run("worker", "--help")
    theirs = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    # one command: its options, defaults and help (the usage line names how it was run)
    assert ours.stdout.splitlines()[1:] == theirs.stdout.splitlines()[1:]
    assert ours.stdout.startswith("Usage: celery worker [OPTIONS]")


def test_anything_but_worker_is_refused_with_the_command_to_use():
    got = run("flower")
    assert got.returncode == 2
    assert "celery -A tasks" in got.stderr and "python -m tasks worker" in got.stderr


def test_the_worker_command_loads_no_plugin_command_and_leaves_click_repl_importable():
    code = (
        "import json, sys\nfrom tasks.__main__ import _plugin_free_celery\n"
        "group = _plugin_free_celery()\nheavy = ('flower', 'prompt_toolkit', 'tornado')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "stub = sys.modules.get('click_repl')\n"
        "print(json.dumps({'loaded': loaded, 'commands': sorted(group.commands),\n"
        "  'stub_left': stub is not None and not hasattr(stub, '__file__')}))\n"
    )
    got = run(code=code)
    assert got.returncode == 0, got.stderr
    seen = json.loads(got.stdout)
    assert seen["loaded"] == []
    assert "worker" in seen["commands"] and "flower" not in seen["commands"]
    assert not seen["stub_left"]  # a later `import click_repl` gets the real package


@pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry") is None, reason="OpenTelemetry is not installed"
)
def test_import_tasks_loads_redis_without_opentelemetry():
    code = (
        "import sys\nimport tasks\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'opentelemetry', 'redis'}))"
    )
    got = run(code=code)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "['redis']"
