"""The job runner: process groups, streamed output, metrics, stop reasons."""

import os
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

from tasks import runner
from tasks.run import Stop
from tests.waiting import wait_until


def leftovers(marker: str) -> list:
    return [
        p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])
    ]


def run(argv, **kw):
    return runner.run(
        argv,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/tmp",
        timeout_s=kw.pop("timeout_s", None),
        on_tick=kw.pop("on_tick", lambda p: None),
        stop=kw.pop("stop", threading.Event()),
        tick_s=0.2,
        **kw,
    )


def test_a_job_that_exits_takes_the_children_it_left_behind_with_it():
    marker = f"{uuid.uuid4().int % 10**6 + 1000}"
    out = run(["bash", "-c", f"(sleep {marker} &); echo done"])
    assert out.returncode == 0 and out.tail == ["done"]
    time.sleep(0.2)
    assert not leftovers(f"sleep {marker}")


def test_output_is_streamed_and_metric_lines_are_parsed():
    out = run(["bash", "-c", "echo hello; echo 'FLEET_METRIC {\"loss\": 0.5}'; echo bye"])
    assert out.tail[0] == "hello" and out.metrics == {"loss": 0.5}


def test_a_timeout_kills_the_whole_process_group():
    marker = f"{uuid.uuid4().int % 10**6 + 1000}"
    out = run(["bash", "-c", f"sleep {marker} & sleep {marker}"], timeout_s=0.5)
    assert out.stopped == "timeout"
    time.sleep(0.2)
    assert not leftovers(f"sleep {marker}")


def test_a_stop_reason_from_the_tick_ends_the_run_promptly():
    t0 = time.monotonic()
    out = run(["sleep", "30"], on_tick=lambda p: "cancelled")
    assert out.stopped == "cancelled" and time.monotonic() - t0 < 5


def test_a_command_that_cannot_start_fails_with_127_and_says_why():
    out = run(["no-such-command-here"])
    assert out.returncode == 127
    assert any("cannot start 'no-such-command-here'" in line for line in out.tail)


def test_a_job_killed_by_a_signal_fails_and_a_job_sees_the_default_sigpipe():
    # the supervisor's exit status: -9 & 0xFF
    assert run(["bash", "-c", "kill -KILL $$"]).returncode == 256 - 9
    # Python ignores SIGPIPE; a job must not inherit that (`yes | head` would never end)
    out = run(["bash", "-c", "yes | head -1; echo ${PIPESTATUS[0]}"], timeout_s=10)
    assert out.stopped is None and out.tail == ["y", str(128 + 13)]


def test_when_its_worker_dies_the_whole_job_group_goes_too(tmp_path):
    marker = f"{uuid.uuid4().int % 10**6 + 1000}"
    script = tmp_path / "worker.py"
    script.write_text(
        "import threading, sys\nfrom tasks import runner\n"
        f"runner.run(['bash', '-c', 'sleep {marker} & sleep {marker}'], "
        "env={'PATH': '/usr/bin:/bin'},"
        " cwd='/tmp', timeout_s=None, on_tick=lambda p: None, stop=threading.Event())\n"
    )
    worker = psutil.Popen(
        [sys.executable, str(script)], cwd=str(Path(runner.__file__).parent.parent)
    )
    # a bound for a failure, not a window: starting Python took over 20 s on a loaded machine
    wait_until("the job's processes", lambda: len(leftovers(f"sleep {marker}")) >= 4, 120)
    assert len(leftovers(f"sleep {marker}")) == 4  # the supervisor, bash and two sleeps
    worker.kill()
    worker.wait()
    wait_until("the job's processes gone", lambda: not leftovers(f"sleep {marker}"), 30)


def test_a_byte_on_the_wake_pipe_calls_on_tick_at_once_instead_of_a_tick_later():
    r, w = os.pipe()
    os.set_blocking(r, False)
    asked = threading.Event()
    threading.Timer(0.5, lambda: (asked.set(), os.write(w, b"!"))).start()
    started = time.monotonic()
    out = runner.run(
        ["sleep", "30"],
        env={"PATH": "/usr/bin:/bin"},
        cwd="/tmp",
        timeout_s=None,
        on_tick=lambda p: Stop.PREEMPTED if asked.is_set() else None,
        stop=threading.Event(),
        tick_s=10.0,
        wake_fd=r,
    )
    os.close(r)
    os.close(w)
    assert out.stopped is Stop.PREEMPTED and time.monotonic() - started < 3
