"""The session-end leak check finds what this session started, and only that."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.leaks import TOKEN_VAR, session_processes

pytestmark = pytest.mark.integration
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
# starts argv[2:] in a new session and prints its pid, then exits: the sleeper is no
# descendant of this process, as a user's own Redis would not be
DETACH = (
    "import subprocess, sys; print(subprocess.Popen(sys.argv[1:], start_new_session=True, "
    "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
)


@pytest.fixture
def detached():
    pids = []

    def start(env):
        out = subprocess.run(
            [sys.executable, "-c", DETACH, *SLEEP],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        pids.append(int(out))
        return pids[-1]

    yield start
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def found(roots=()) -> set[int]:
    return {p.pid for p in session_processes(os.environ[TOKEN_VAR], roots=roots)}


def test_a_process_the_session_started_is_found_even_once_its_parent_is_gone(detached):
    assert detached(dict(os.environ)) in found()


def test_a_child_of_the_session_is_found_whatever_its_environment():
    proc = subprocess.Popen(SLEEP, env={})
    try:
        assert proc.pid in found()
    finally:
        proc.kill()
        proc.wait()


def test_a_process_from_outside_the_session_is_never_counted(detached):
    # e.g. the user's Redis
    users_own = detached({k: v for k, v in os.environ.items() if k != TOKEN_VAR})
    other_run = detached(dict(os.environ, **{TOKEN_VAR: "another-session"}))  # a second test run
    assert not {users_own, other_run} & found()


def test_a_redis_server_started_in_the_sessions_temp_dir_is_found_by_its_directory(
    redis_server, tmp_path_factory
):
    # redis-server overwrites its environment with its process title: the token is gone
    assert redis_server.proc.pid in found(roots=(tmp_path_factory.getbasetemp(),))


def test_a_redis_server_that_never_answers_is_stopped_when_its_start_gives_up(tmp_path):
    from core.errors import FleetError
    from fleet.redis_server import RedisServer

    server = RedisServer(tmp_path / "r", extra_args=("--requirepass", "not-the-one-it-logs-in"))
    with pytest.raises(FleetError, match="did not start"):
        server.start(timeout_s=1.0)
    assert server.proc is None and not running_in(tmp_path)


def running_in(folder) -> list:
    import psutil

    out = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and Path(proc.cwd()).is_relative_to(folder):
                out.append(proc)
        except psutil.Error:
            pass
    return out
