"""No process a job started, in any session, outlives its run: real jobs that setsid a
SIGTERM-ignoring daemon (double fork) and start children in sessions of their own, stopped,
timed out, and orphaned by a worker killed -9; each by the run's cgroup where this host
lets a worker make one, and by its mark in /proc alone (FLEET_RUN_CGROUPS=0)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import psutil
import pytest

from tasks import isolation, runner, runscope, trained, vramwatch, workdirs, yieldwatch
from tasks.run import Stop
from tests.harness import orphans
from tests.harness.users import reachable_dir, system_python

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


def assert_none_left(out: runner.RunOutcome, why: Stop | None, pid_file: Path) -> list[int]:
    """The run ended for ``why`` with every orphan started, and none is alive the moment
    ``run`` returned; the orphans' pids."""
    pids = orphans.read_pids(pid_file)
    try:
        assert out.stopped is why and len(pids) == orphans.PIDS, out.tail
        assert not orphans.alive(pids)
    finally:
        orphans.kill(pids)
    return pids


def stop_once_started(pid_file: Path, seen: dict, why: Stop = Stop.CANCELLED):
    """An on_tick that stops the run once every orphan wrote its pid, noting which run each
    belonged to meanwhile (by cgroup or mark), whether the yield watch calls it fleet's and
    the VRAM watch the job's."""

    def tick(progress):
        pids = orphans.read_pids(pid_file)
        if len(pids) < orphans.PIDS:
            return None
        job = vramwatch.in_group(progress.pgid)
        seen.update({p: (runscope.scope_of(p), yieldwatch.fleet_pid(p), job(p)) for p in pids})
        return why

    return tick


@pytest.mark.parametrize("why", [Stop.CANCELLED, Stop.PREEMPTED, Stop.PRUNED, Stop.YIELDED])
def test_a_stopped_job_leaves_no_process_in_any_session(tmp_path, cgroup, why):
    pid_file, seen, scope = tmp_path / "pids", {}, f"stop-{uuid.uuid4().hex}"
    out = run(pid_file, cgroup, on_tick=stop_once_started(pid_file, seen, why), scope=scope)
    pids = assert_none_left(out, why, pid_file)
    # each was the run's in its own session: fleet's (not the host owner's, for the yield
    # watch) and the job's (its VRAM counts against the job's budget)
    assert seen == {p: (scope, True, True) for p in pids}
    assert runscope.cgroup_of(scope) is None  # removed with its run


def test_a_timed_out_job_leaves_no_process_in_any_session(tmp_path, cgroup):
    pid_file = tmp_path / "pids"
    out = run(pid_file, cgroup, timeout_s=8)
    assert_none_left(out, Stop.TIMEOUT, pid_file)


def test_a_job_that_exits_leaves_no_daemon_behind(tmp_path, cgroup):
    pid_file = tmp_path / "pids"
    wait_for_orphans = (
        f"until [ $(cat {pid_file} 2>/dev/null | wc -l) -ge {orphans.PIDS} ]; do sleep 0.1; done"
    )
    argv = ["bash", "-c", f"({' '.join(orphans.job_argv(pid_file))} &); {wait_for_orphans}; exit 0"]
    out = run(pid_file, cgroup, argv=argv)
    assert_none_left(out, None, pid_file)
    assert out.returncode == 0, out.tail


def a_worker(tmp_path: Path, argv: list[str], cgroup: bool, user: str = "") -> subprocess.Popen:
    """A process that runs ``argv`` as a worker does, in a run folder of its own (as
    ``user``, if named)."""
    code = textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        from tasks import isolation, runner, workdirs
        from tests.harness import orphans
        user = isolation.job_user({user!r})
        work = workdirs.create({str(tmp_path)!r}, "ab" * 32, {{"token": "t"}})
        isolation.hand_over(work, user)
        runner.run({argv!r},
                   env={{"PATH": "/usr/bin:/bin"}}, cwd=str(work), timeout_s=None,
                   on_tick=lambda p: None, stop=threading.Event(),
                   scope=workdirs.scope(work), cgroup={cgroup},
                   run_as=isolation.popen_user(user), python={system_python()!r})
    """)
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def dies_leaving_none(worker: subprocess.Popen, pids: list[int], work_root: Path) -> None:
    """Kill -9 the worker: every one of ``pids`` is gone within 10 s (its job's supervisor
    notices through its pidfd); then the watchman's part, which removes the run's cgroup."""
    try:
        worker.kill()
        worker.wait()
        orphans.all_gone(pids)
    finally:
        orphans.kill(pids)
        for dead in workdirs.dead(work_root):
            assert trained.processes_ended(dead)
            workdirs.remove(dead.work)


def supervisor_of(pid_file: Path) -> psutil.Process:
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "supervisor.py" in cmd and str(pid_file) in cmd:
            return p
    raise AssertionError(f"no supervisor runs the job of {pid_file}")


def test_a_worker_killed_9_takes_every_process_of_its_job_with_it(tmp_path, cgroup):
    pid_file = tmp_path / "pids"
    worker = a_worker(tmp_path, orphans.job_argv(pid_file, system_python()), cgroup)
    dies_leaving_none(worker, orphans.started(pid_file), tmp_path)


def test_what_a_dead_run_left_is_killed_before_its_job_is_handed_on(tmp_path, cgroup):
    pid_file = tmp_path / "pids"
    worker = a_worker(tmp_path, orphans.job_argv(pid_file, system_python()), cgroup)
    pids = orphans.started(pid_file)
    try:
        # the worker and the job's supervisor both die, neither seeing the other go: no one
        # is left to stop the job (a stopped worker cannot clean up after its supervisor)
        os.kill(worker.pid, signal.SIGSTOP)
        supervisor_of(pid_file).kill()
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


def test_a_job_users_processes_in_other_sessions_go_with_its_stop(cgroup, job_user):
    where = reachable_dir()
    pid_file, seen = where / "pids", {}
    user = isolation.job_user(job_user)
    out = run(
        pid_file,
        cgroup,
        argv=orphans.job_argv(pid_file, system_python()),
        on_tick=stop_once_started(pid_file, seen),
        run_as=isolation.popen_user(user),
        python=system_python(),
    )
    try:
        assert_none_left(out, Stop.CANCELLED, pid_file)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_a_job_users_processes_go_with_its_killed_worker(cgroup, job_user):
    where = reachable_dir()
    pid_file = where / "pids"
    worker = a_worker(where, orphans.job_argv(pid_file, system_python()), cgroup, job_user)
    pids = orphans.started(pid_file)
    try:
        assert {psutil.Process(p).uids().real for p in pids} == {pwd.getpwnam(job_user).pw_uid}
        dies_leaving_none(worker, pids, where)  # its supervisor is the job user's
    finally:
        orphans.kill(pids)
        shutil.rmtree(where, ignore_errors=True)


def test_a_stopped_torchrun_jobs_ranks_in_sessions_of_their_own_are_gone(tmp_path, cgroup):
    pytest.importorskip("torch")
    pid_file, sessions = tmp_path / "pids", {}

    def stop_once_ranks_run(progress):
        pids = orphans.read_pids(pid_file)
        if len(pids) < orphans.RANKS:
            return None
        sessions.update({p: os.getsid(p) == p for p in pids})
        return Stop.CANCELLED

    out = run(pid_file, cgroup, argv=orphans.torchrun_argv(pid_file), on_tick=stop_once_ranks_run)
    pids = orphans.read_pids(pid_file)
    try:
        assert out.stopped is Stop.CANCELLED and len(pids) == orphans.RANKS, out.tail
        assert sessions == {p: True for p in pids}  # each rank led a session of its own
        assert not orphans.alive(pids)
    finally:
        orphans.kill(pids)


def test_a_killed_workers_torchrun_ranks_are_gone_within_10_s(tmp_path, cgroup):
    pytest.importorskip("torch")
    pid_file = tmp_path / "pids"
    worker = a_worker(tmp_path, orphans.torchrun_argv(pid_file), cgroup)
    dies_leaving_none(worker, orphans.started(pid_file, count=orphans.RANKS), tmp_path)
