"""The worker's yield watch (tasks.yieldwatch) on simulated GPUs, with real processes and
real busy checks: what it counts as the owner's, how it applies the verdict to the gate and
the running jobs, and when it gives a device back."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.errors import ConfigError
from core.settings import YieldSettings
from routing.capability import CudaDevice
from routing.pool import Demand, Pool
from tasks import runner, yieldwatch
from tasks.admission import Gate

DEVICES = (CudaDevice(0, "sim-0", 24, 24), CudaDevice(1, "sim-1", 24, 24))
QUEUES = {"cuda": Demand(gpus=1), "cpu": Demand(cores=1)}


@pytest.fixture
def sleeper():
    """A real process in its own process group, like a job's supervisor."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    yield proc
    proc.kill()
    proc.wait()


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(tmp_path, handed: list, check: tuple[str, ...] = (), reclaim_s: float = 10.0):
    procs = tmp_path / "gpu-procs.json"
    settings = YieldSettings(enabled=True, check=check, reclaim_s=reclaim_s, sim_processes=procs)
    gate = Gate(Pool.of([24, 24], cores=4, ram_gib=32), QUEUES.get)
    clock = Clock()
    w = yieldwatch.YieldWatch(
        settings, DEVICES, gate, lambda job, why: handed.append((job, why)), clock=clock
    )
    return w, gate, procs, clock


def test_a_process_in_a_running_jobs_group_is_fleets_and_any_other_is_not(sleeper):
    groups = frozenset({sleeper.pid})
    assert yieldwatch.fleet_pid(sleeper.pid, lambda: groups)
    assert not yieldwatch.fleet_pid(os.getpid(), lambda: groups)
    # no job runs in this process
    assert not yieldwatch.fleet_pid(sleeper.pid, runner.running_groups)
    assert not yieldwatch.fleet_pid(2**22 + 1, lambda: groups)  # gone, or never was


def test_the_desktops_own_processes_and_fleets_jobs_do_not_count(sleeper):
    name = yieldwatch.process_name(os.getpid())
    procs = {0: {os.getpid(), sleeper.pid}, 1: {sleeper.pid}}
    assert yieldwatch.foreign_by_device(procs, (), is_fleets=lambda p: p == sleeper.pid) == {
        0: {os.getpid()},
        1: set(),
    }
    assert yieldwatch.foreign_by_device(procs, (name,), is_fleets=lambda p: p == sleeper.pid) == {
        0: set(),
        1: set(),
    }


def test_the_busy_check_runs_without_a_shell_within_its_timeout_and_without_secrets():
    assert yieldwatch.run_check(("true",), 5) and not yieldwatch.run_check(("false",), 5)
    assert not yieldwatch.run_check(("sleep", "5"), 0.2)  # too slow: not busy
    assert not yieldwatch.run_check(("no-such-command-here",), 5)
    assert not yieldwatch.run_check(("true;", "false"), 5)  # no shell parses it
    env = yieldwatch.check_environment(
        {"PATH": "/bin", "FLEET_BROKER_URL": "redis://:pw@h", "AWS_SECRET_ACCESS_KEY": "s"}
    )
    assert env == {"PATH": "/bin"}


def test_a_busy_check_that_cannot_run_refuses_the_start():
    with pytest.raises(ConfigError, match="FLEET_YIELD_CHECK='no-such-game-check -x'"):
        yieldwatch.validate(YieldSettings(enabled=True, check=("no-such-game-check", "-x")))
    yieldwatch.validate(YieldSettings(enabled=True, check=("pgrep", "-x", "steam")))
    # yielding is off
    yieldwatch.validate(YieldSettings(enabled=False, check=("no-such-game-check",)))


def test_a_simulated_process_list_reads_as_nvmls_would(tmp_path):
    read = yieldwatch.file_processes(tmp_path / "p.json")
    assert read() == {}
    (tmp_path / "p.json").write_text(json.dumps({"0": [12, 13], "1": []}))
    assert read() == {0: {12, 13}, 1: set()}
    (tmp_path / "p.json").write_text("{half")
    assert read() is None


def test_a_foreign_gpu_process_yields_its_device_hands_its_jobs_back_and_the_device_returns_later(
    tmp_path,
):
    handed: list = []
    w, gate, procs, clock = watch(tmp_path, handed)
    gate.take("t0", Demand(gpus=1), "job-on-0")
    gate.take("t1", Demand(gpus=1), "job-on-1")
    # the test runner: not fleet's, not the desktop's
    procs.write_text(json.dumps({"0": [os.getpid()]}))
    assert w.poll() == {0: f"GPU 0 in use by pid {os.getpid()} (not fleet)"}
    assert handed == [
        ("job-on-0", f"yielded to the host's owner (GPU 0 in use by pid {os.getpid()})")
    ]
    gate.release("t0")
    gate.release("t1")
    assert gate.consumable(["cuda", "cpu"]) == ["cuda", "cpu"]  # GPU 1 still takes work
    assert gate.take("t2", Demand(gpus=2), "two") is None  # but not both
    procs.write_text(json.dumps({"0": []}))  # the owner is done
    clock.now = 5.0
    # not yet left alone long enough
    assert w.poll() == {0: f"GPU 0 in use by pid {os.getpid()} (not fleet)"}
    clock.now = 15.0
    assert w.poll() == {} and gate.yielded() == {}
    assert gate.take("t2", Demand(gpus=2), "two") is not None


def test_the_owners_busy_check_yields_every_gpu_and_cpu_jobs_go_on(tmp_path):
    flag = tmp_path / "game-running"
    handed: list = []
    w, gate, _, clock = watch(tmp_path, handed, check=("test", "-e", str(flag)), reclaim_s=0)
    gate.take("t0", Demand(gpus=1), "gpu-job")
    gate.take("t1", Demand(cores=1), "cpu-job")
    assert w.poll() == {}
    flag.touch()
    why = f"owner busy (test -e {flag} succeeded)"
    assert w.poll() == {0: why, 1: why}
    assert handed == [("gpu-job", f"yielded to the host's owner (test -e {flag} succeeded)")]
    assert gate.consumable(["cuda", "cpu"]) == ["cpu"]
    flag.unlink()
    assert w.poll() == {} and gate.consumable(["cuda", "cpu"]) == ["cuda", "cpu"]


def test_a_change_of_yielded_devices_wakes_the_consumer(tmp_path):
    woken: list = []
    gate = Gate(Pool.of([24], cores=2, ram_gib=8), QUEUES.get, on_release=lambda: woken.append(1))
    gate.yield_devices({0: "x"})
    gate.yield_devices({0: "x"})
    gate.yield_devices({})
    assert woken == [1, 1]


@pytest.mark.parametrize(
    "shown, busy",
    [
        ("Type=wayland\nRemote=no\nActive=yes\nIdleHint=no\n", True),
        # the desktop says the owner is away
        (
            "Type=x11\nRemote=no\nActive=yes\nIdleHint=yes\n",
            False,
        ),
        # text consoles never report idleness
        (
            "Type=tty\nRemote=no\nActive=yes\nIdleHint=no\n",
            False,
        ),
        ("Type=x11\nRemote=yes\nActive=yes\nIdleHint=no\n", False),  # not at the console
        # another seat user switched away
        (
            "Type=wayland\nRemote=no\nActive=no\nIdleHint=no\n",
            False,
        ),
    ],
)
def test_only_an_active_local_graphical_session_that_is_not_idle_is_the_owner_at_the_console(
    shown, busy
):
    assert yieldwatch.session_busy(shown) is busy
