"""Run folders: locked while their worker lives, found dead after a SIGKILL, exit status on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from tasks import runner, workdirs

ROOT = Path(__file__).resolve().parents[2]


def hold_a_run_folder(work_root: Path) -> subprocess.Popen:
    """Another process (a 'worker') that creates a run folder and keeps running."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tasks import workdirs
        work = workdirs.create({str(work_root)!r}, "a" * 64, {{"token": "t"}})
        print(work, flush=True)
        time.sleep(60)
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_a_live_workers_run_folder_is_left_alone_and_a_killed_ones_is_found_dead(tmp_path):
    worker = hold_a_run_folder(tmp_path)
    work = Path(worker.stdout.readline().strip())
    try:
        assert work.is_dir() and not list(workdirs.dead(tmp_path))
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    (run,) = list(workdirs.dead(tmp_path))
    assert run.work == work and run.info == {"token": "t"} and run.returncode is None
    assert not list(workdirs.dead(tmp_path))  # locked by us until removed
    workdirs.remove(run.work)
    assert not work.parent.exists()


def test_a_run_folder_of_this_process_is_not_dead_until_removed(tmp_path):
    work = workdirs.create(tmp_path, "b" * 64, {})
    assert not list(workdirs.dead(tmp_path))
    workdirs.remove(work)
    assert not list((tmp_path / "runs").iterdir())


def test_an_old_run_folder_without_run_json_is_removed_and_a_young_one_kept(tmp_path):
    old, young = tmp_path / "runs" / "old", tmp_path / "runs" / "young"
    old.mkdir(parents=True)
    young.mkdir()
    past = time.time() - 2 * workdirs.YOUNG_S
    os.utime(old, (past, past))
    assert not list(workdirs.dead(tmp_path))
    assert not old.exists() and young.exists()


def test_the_supervisor_writes_the_jobs_exit_status_before_the_worker_hears_of_it(tmp_path):
    exit_file = tmp_path / "exit.json"
    out = runner.run(
        ["bash", "-c", "exit 3"],
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(tmp_path),
        timeout_s=None,
        on_tick=lambda p: None,
        stop=threading.Event(),
        tick_s=0.2,
        exit_file=str(exit_file),
    )
    assert out.returncode == 3 and json.loads(exit_file.read_text())["returncode"] == 3


def test_a_job_stopped_by_the_worker_leaves_no_exit_status(tmp_path):
    exit_file = tmp_path / "exit.json"
    out = runner.run(
        ["sleep", "30"],
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(tmp_path),
        timeout_s=None,
        on_tick=lambda p: "cancelled",
        stop=threading.Event(),
        tick_s=0.2,
        exit_file=str(exit_file),
    )
    assert out.stopped == "cancelled" and not exit_file.exists()


def test_a_released_dead_run_folder_is_kept_and_found_again(tmp_path):
    worker = hold_a_run_folder(tmp_path)
    work = Path(worker.stdout.readline().strip())
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    (run,) = list(workdirs.dead(tmp_path))
    workdirs.release(run.work)
    (again,) = list(workdirs.dead(tmp_path))
    assert work.is_dir() and again.work == work
    workdirs.remove(again.work)


def test_an_exit_status_that_cannot_be_written_does_not_change_the_jobs_outcome(tmp_path):
    out = runner.run(
        ["true"],
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(tmp_path),
        timeout_s=None,
        on_tick=lambda p: None,
        stop=threading.Event(),
        tick_s=0.2,
        exit_file=str(tmp_path / "missing" / "exit.json"),
    )
    assert out.returncode == 0 and any("cannot record the exit status" in line for line in out.tail)


def test_a_kept_bundle_folder_is_worked_on_by_one_holder_at_a_time(tmp_path):
    from tasks.upload import held

    folder = tmp_path / "pending" / "job"
    with held(folder, wait=True) as first:
        assert first and folder.is_dir()
        with held(folder, wait=False) as second:
            assert not second  # upload_kept leaves it to the run working on it
    with held(folder, wait=False) as again:
        assert again


def test_a_new_run_folder_bears_only_its_locked_run_json_and_its_work_dir(tmp_path):
    work = workdirs.create(tmp_path, "ab" * 32, {"token": "t"})
    root = work.parent
    assert sorted(p.name for p in root.iterdir()) == [workdirs.RUN_FILE, workdirs.WORK]
    assert list(workdirs.dead(tmp_path)) == []  # locked from before it bore its name
    workdirs.release(work)
    (dead,) = workdirs.dead(tmp_path)
    assert dead.info == {"token": "t"}
    workdirs.remove(dead.work)
