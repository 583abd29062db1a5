"""The job runner: process groups, streamed output, metrics, stop reasons."""
import threading
import time
import uuid

import psutil

from tasks import runner


def leftovers(marker: str) -> list:
    return [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


def run(argv, **kw):
    return runner.run(argv, env={"PATH": "/usr/bin:/bin"}, cwd="/tmp", timeout_s=kw.pop("timeout_s", None),
                      on_tick=kw.pop("on_tick", lambda p: None), stop=kw.pop("stop", threading.Event()),
                      tick_s=0.2, **kw)


def test_a_job_that_exits_takes_the_children_it_left_behind_with_it():
    marker = f"{uuid.uuid4().int % 10**6 + 1000}"
    out = run(["bash", "-c", f"(sleep {marker} &); echo done"])
    assert out.returncode == 0 and out.tail == ["done"]
    time.sleep(0.2)
    assert not leftovers(f"sleep {marker}")


def test_output_is_streamed_and_metric_lines_are_parsed():
    out = run(["bash", "-c", 'echo hello; echo \'FLEET_METRIC {"loss": 0.5}\'; echo bye'])
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
