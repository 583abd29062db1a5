"""Job environments built with uv, once per digest, shared, bounded (artifacts.pyenv).

Real uv, real subprocesses; wheels are made at test time and installed offline."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from artifacts.pyenv import COMPLETE, EnvBuildFailed, EnvCache, EnvSpec, lock_digest
from tests.fixtures.wheels import make_wheel, offline_index

TOY = EnvSpec(("fleettoy==1.0",))


@pytest.fixture
def wheels(tmp_path) -> Path:
    folder = tmp_path / "wheels"
    make_wheel(folder)
    make_wheel(folder, "othertoy", "2.0", "NAME = 'other'\n")
    return folder


@pytest.fixture
def cache(tmp_path, wheels) -> EnvCache:
    return EnvCache(tmp_path / "envs", 1 << 30, env={**os.environ, **offline_index(wheels)})


def run_in(python: Path, code: str) -> str:
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_requirement_the_worker_lacks_is_installed_into_the_jobs_own_environment(cache):
    with cache.use(TOY) as python:
        assert run_in(python, "import fleettoy; print(fleettoy.VALUE)") == "42"
        assert run_in(python, "import sys; print(sys.prefix)") != sys.prefix
    with pytest.raises(ImportError):
        __import__("fleettoy")


def test_a_second_job_with_the_same_requirements_reuses_the_environment(cache):
    first, second = [], []
    with cache.use(TOY, log=first.append):
        pass
    with cache.use(TOY, log=second.append):
        pass
    assert any("building environment" in line for line in first)
    assert not any("building" in line for line in second)
    assert any("cached" in line for line in second)


def test_concurrent_jobs_share_one_build(cache):
    logs: list[str] = []
    errors = []

    def job():
        try:
            with cache.use(TOY, log=logs.append) as python:
                assert python.exists()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=job) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum("building environment" in line for line in logs) == 1


def test_jobs_sharing_a_ready_environment_run_in_it_at_once(cache):
    # a job holds its environment for its whole run; a second job of the same environment
    # must get in while the first still runs (it waited for the first to end: issue 35)
    with cache.use(TOY):
        pass  # built
    inside, leave = threading.Event(), threading.Event()

    def first():
        with cache.use(TOY):
            inside.set()
            leave.wait(60)

    holder = threading.Thread(target=first)
    holder.start()
    try:
        assert inside.wait(30)
        second_in = threading.Event()

        def second():
            with cache.use(TOY):
                second_in.set()

        t = threading.Thread(target=second, daemon=True)
        t.start()
        assert second_in.wait(30), "the second job waited for the first to end"
        assert holder.is_alive()  # the first job was still inside when the second got in
    finally:
        leave.set()
        holder.join()


def test_a_job_waits_for_a_build_of_its_environment_not_for_jobs_in_another(cache):
    other = EnvSpec(("othertoy==2.0",))
    with cache.use(TOY):  # a job running in one environment while another is built
        with cache.use(other) as python:
            assert run_in(python, "import othertoy; print(othertoy.NAME)") == "other"


def test_a_misspelled_requirement_fails_for_good_with_uvs_message(cache):
    with pytest.raises(EnvBuildFailed) as e:
        with cache.use(EnvSpec(("fleettoyy==1.0",))):
            pass
    assert e.value.permanent
    assert "fleettoyy" in str(e.value)
    assert "No solution found" in str(e.value)


def test_an_interrupted_build_leaves_nothing_a_later_job_would_use(cache):
    digest = TOY.digest()
    half = cache.path(digest)  # renamed into place but never marked complete
    (half / "bin").mkdir(parents=True)
    (cache.root / "tmp" / f"{digest}-dead").mkdir()  # a killed build's temporary folder
    assert not cache.ready(digest)
    with cache.use(TOY) as python:
        assert run_in(python, "import fleettoy; print(fleettoy.VALUE)") == "42"
    assert (half / COMPLETE).is_file()
    assert not list((cache.root / "tmp").iterdir())


def test_a_worker_killed_mid_build_then_restarted_builds_cleanly(cache, tmp_path):
    # a real process killed while uv installs: a slow fake uv stands in for a big download
    slow_uv = tmp_path / "slow-uv"
    slow_uv.write_text(f'#!/bin/sh\nif [ "$1" = pip ]; then sleep 30; fi\nexec {_real_uv()} "$@"\n')
    slow_uv.chmod(0o755)
    code = (
        "import sys; from pathlib import Path; from artifacts.pyenv import EnvCache, EnvSpec;"
        f"c = EnvCache(Path({str(cache.root)!r}), 1 << 30, uv={str(slow_uv)!r});"
        "c.use(EnvSpec(('fleettoy==1.0',))).__enter__()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).parents[2])
    deadline = __import__("time").monotonic() + 30
    while not list((cache.root / "tmp").glob("*/bin/python")):
        assert __import__("time").monotonic() < deadline, "the build never started"
        __import__("time").sleep(0.1)
    proc.kill()
    proc.wait()
    assert not cache.ready(TOY.digest())
    with cache.use(TOY) as python:  # the lock died with the process; the build starts over
        assert run_in(python, "import fleettoy; print(fleettoy.VALUE)") == "42"


def _real_uv() -> str:
    from artifacts.pyenv import uv_binary

    return uv_binary()


def test_the_cache_evicts_least_recently_used_environments_but_never_one_in_use(cache):
    other = EnvSpec(("othertoy==2.0",))
    with cache.use(TOY):
        pass
    cache.max_bytes = 1  # everything is over the bound from here on
    with cache.use(other):
        assert cache.ready(other.digest())  # in use: kept
        assert not cache.ready(TOY.digest())  # least recently used: gone
    assert not cache.ready(other.digest())  # evicted once released, being over the bound


def test_a_project_with_uv_lock_is_synced_frozen(cache, wheels, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "toyproj"\nversion = "0.1.0"\n'
        'requires-python = ">=3.11"\ndependencies = ["fleettoy==1.0"]\n'
    )
    subprocess.run(
        [_real_uv(), "lock", "--python", sys.executable],
        cwd=project,
        check=True,
        env={**os.environ, **offline_index(wheels), "UV_PYTHON_DOWNLOADS": "never"},
        capture_output=True,
    )
    spec = EnvSpec(lock=lock_digest(project))
    with cache.use(spec, workdir=project) as python:
        assert run_in(python, "import fleettoy; print(fleettoy.VALUE)") == "42"


def test_the_digest_follows_what_defines_the_environment():
    base = EnvSpec(("a==1",))
    assert base.digest() == EnvSpec(("a==1",)).digest()
    assert base.digest() != EnvSpec(("a==2",)).digest()
    assert base.digest() != EnvSpec(("a==1",), python="3.99").digest()
    assert base.digest("linux-x86_64-glibc") != base.digest("linux-aarch64-glibc")


def test_the_workers_own_packages_stay_importable_beneath_the_jobs_pins(tmp_path, wheels):
    make_wheel(wheels, "numpy", "0.0.1", "__version__ = 'the job pinned this'\n")
    cache = EnvCache(tmp_path / "own", 1 << 30, env={**os.environ, **offline_index(wheels)})
    with cache.use(TOY) as python:  # numpy is the worker's, not a requirement
        assert run_in(python, "import numpy; print(numpy.__file__)").startswith(sys.prefix)
    with cache.use(EnvSpec(("numpy==0.0.1",))) as python:
        assert run_in(python, "import numpy; print(numpy.__version__)") == "the job pinned this"


def test_the_listing_names_each_finished_environment_with_its_size_cheaply(cache):
    with cache.use(TOY):
        pass
    [entry] = cache.listing()
    assert entry["digest"] == TOY.digest()[:12]
    # less its marker
    assert 0.9 * cache.sizes()[TOY.digest()] < entry["bytes"] <= cache.sizes()[TOY.digest()]


def test_an_unreachable_index_is_a_failure_worth_retrying(tmp_path):
    cache = EnvCache(
        tmp_path / "net",
        1 << 30,
        env={
            **os.environ,
            "UV_INDEX_URL": "http://127.0.0.1:9/simple",
            "UV_HTTP_TIMEOUT": "2",
            "UV_HTTP_RETRIES": "0",
        },
    )
    with pytest.raises(EnvBuildFailed) as e:
        with cache.use(EnvSpec(("fleettoy==1.0",))):
            pass
    assert not e.value.permanent, str(e.value)
