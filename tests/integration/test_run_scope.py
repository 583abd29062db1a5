"""No process a job started, in any session, outlives its run: real jobs that setsid a
SIGTERM-ignoring daemon (double fork) and start children in sessions of their own, stopped,
timed out, and orphaned by a worker killed -9; each by the run's cgroup where this host
lets a worker make one, and by its mark in /proc alone (FLEET_RUN_CGROUPS=0)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import psutil
import pytest

from tasks import runner, runscope, trained, workdirs, yieldwatch
from tasks.run import Stop
from tests.harness import orphans

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
WAYS = [pytest.param(True, id="cgroup"), pytest.param(False, id="proc-scan")]


def cgroups_here() -> bool:
    path, _ = runscope.make_cgroup(f"probe-{os.getpid()}")
    if path:
        os.rmdir(path)
    return path is not None


@pytest.fixture(params=WAYS)
def cgroup(request) -> bool:
    if request.param and not cgroups_here():
        pytest.skip("this host lets no worker make a cgroup (docs/limits.md): the scan alone")
    return request.param


def run(pid_file: Path, cgroup: bool, **kw) -> runner.RunOutcome:
    return runner.run(
        kw.pop("argv", None) or orphans.job_argv(pid_file),
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(pid_file.parent),
        timeout_s=kw.pop("timeout_s", None),
        on_tick=kw.pop("on_tick", lambda p: None),
        stop=threading.Event(),
        tick_s=0.1,
        cgroup=cgroup,
        **kw,
    )


def stop_once_started(pid_file: Path, seen: dict):
    """An on_tick that stops the run once every orphan wrote its pid, noting which run each
    belonged to meanwhile (by cgroup or mark) and whether the yield watch calls it fleet's."""

    def tick(progress):
        pids = orphans.read_pids(pid_file)
        if len(pids) < orphans.PIDS:
            return None
        seen.update({p: (runscope.scope_of(p), yieldwatch.fleet_pid(p)) for p in pids})
        return Stop.CANCELLED

    return tick


def test_a_stopped_job_leaves_no_process_in_any_session(tmp_path, cgroup):
    pid_file, seen, scope = tmp_path / "pids", {}, "stop-" + tmp_path.name
    out = run(pid_file, cgroup, on_tick=stop_once_started(pid_file, seen), scope=scope)
    pids = orphans.read_pids(pid_file)
    try:
        assert out.stopped is Stop.CANCELLED and len(pids) == orphans.PIDS
        assert not orphans.alive(pids)  # gone when run returns, not some time later
        # each was the run's (and so fleet's, not the host owner's) in its own session
        assert seen == {p: (scope, True) for p in pids}
        assert runscope.cgroup_of(scope) is None  # removed with its run
    finally:
        orphans.kill(pids)


def test_a_timed_out_job_leaves_no_process_in_any_session(tmp_path, cgroup):
    pid_file = tmp_path / "pids"
    out = run(pid_file, cgroup, timeout_s=8)
    pids = orphans.read_pids(pid_file)
    try:
        assert out.stopped is Stop.TIMEOUT and len(pids) == orphans.PIDS, out.tail
        assert not orphans.alive(pids)
    finally:
        orphans.kill(pids)


def test_a_job_that_exits_leaves_no_daemon_behind(tmp_path, cgroup):
    pid_file = tmp_path / "pids"
    wait_for_orphans = (
        f"until [ $(cat {pid_file} 2>/dev/null | wc -l) -ge {orphans.PIDS} ]; do sleep 0.1; done"
    )
    argv = ["bash", "-c", f"({' '.join(orphans.job_argv(pid_file))} &); {wait_for_orphans}; exit 0"]
    out = run(pid_file, cgroup, argv=argv)
    pids = orphans.read_pids(pid_file)
    try:
        assert out.returncode == 0 and len(pids) == orphans.PIDS, out.tail
        assert not orphans.alive(pids)
    finally:
        orphans.kill(pids)


def a_worker(tmp_path: Path, pid_file: Path, cgroup: bool) -> subprocess.Popen:
    """A process that runs the orphan job as a worker does, in a run folder of its own."""
    code = textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        from tasks import runner, workdirs
        from tests.harness import orphans
        work = workdirs.create({str(tmp_path)!r}, "ab" * 32, {{"token": "t"}})
        runner.run(orphans.job_argv({str(pid_file)!r}), env={{"PATH": "/usr/bin:/bin"}},
                   cwd=str(work), timeout_s=None, on_tick=lambda p: None,
                   stop=threading.Event(), scope=workdirs.scope(work), cgroup={cgroup})
    """)
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def supervisor_of(pid_file: Path) -> psutil.Process:
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "supervisor.py" in cmd and str(pid_file) in cmd:
            return p
    raise AssertionError(f"no supervisor runs the job of {pid_file}")


def test_a_worker_killed_9_takes_every_process_of_its_job_with_it(tmp_path, cgroup):
    pid_file = tmp_path / "pids"
    worker = a_worker(tmp_path, pid_file, cgroup)
    pids = orphans.started(pid_file)
    try:
        worker.kill()  # its job's supervisor notices through its pidfd
        worker.wait()
        orphans.all_gone(pids)
    finally:
        orphans.kill(pids)
        for dead in workdirs.dead(tmp_path):  # the watchman's part: the run's empty cgroup
            assert trained.processes_ended(dead)
            workdirs.remove(dead.work)


def test_what_a_dead_run_left_is_killed_before_its_job_is_handed_on(tmp_path, cgroup):
    pid_file = tmp_path / "pids"
    worker = a_worker(tmp_path, pid_file, cgroup)
    pids = orphans.started(pid_file)
    try:
        supervisor_of(pid_file).kill()  # its supervisor first: no one is left to stop the job
        worker.kill()
        worker.wait()
        (dead,) = list(workdirs.dead(tmp_path))  # its lock went with the worker
        assert orphans.alive(pids) == pids  # what the watchman, or a restart, finds
        assert trained.processes_ended(dead)  # as finish_dead_runs does before handing on
        assert not orphans.alive(pids)
        assert runscope.cgroup_of(workdirs.scope(dead.work)) is None
        workdirs.remove(dead.work)
    finally:
        orphans.kill(pids)
