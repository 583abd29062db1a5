"""The worker's side of a job's own code: its workdir copied writable, its python swapped
in, its variables, and what it says while the environment is prepared (tasks.workspace)."""

import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from artifacts.identity import dir_files, write_dir_tar, write_files_tar
from manifest.schema import HostPolicy, JobSpec
from tasks import workspace

PY = Path("/envs/abc/bin/python")


def job(**kw) -> JobSpec:
    return JobSpec(name="j", job_id="f" * 64, **kw)


def test_the_first_word_python_becomes_the_environments_python():
    env = {"PATH": "/usr/bin"}
    assert workspace.adapt(
        ["python3", "train.py"], env, job(command=("python3", "train.py")), PY
    ) == [str(PY), "train.py"]
    assert env["PATH"].startswith("/envs/abc/bin:") and env["VIRTUAL_ENV"] == "/envs/abc"


def test_another_command_keeps_its_argv_but_finds_the_environment_first_on_path():
    env = {"PATH": "/usr/bin"}
    argv = workspace.adapt(["bash", "run.sh"], env, job(command=("bash", "run.sh")), PY)
    assert argv == ["bash", "run.sh"] and env["PATH"].startswith("/envs/abc/bin")


def test_a_built_in_trainer_given_requirements_runs_on_the_environments_python_with_fleets_code():
    env = {}
    argv = workspace.adapt(["/worker/python", "-m", "trainers.run"], env, job(model="gbt"), PY)
    assert (
        argv == [str(PY), "-m", "trainers.run"] and str(workspace.FLEET_ROOT) in env["PYTHONPATH"]
    )


def test_without_an_environment_nothing_changes():
    env = {"PATH": "/usr/bin"}
    assert workspace.adapt(["python", "x.py"], env, job(command=("python", "x.py")), None) == [
        "python",
        "x.py",
    ]
    assert env == {"PATH": "/usr/bin"}


def test_the_workdir_copy_is_writable_and_keeps_the_executable_bit(tmp_path):
    cached = tmp_path / "cached"
    (cached / "pkg").mkdir(parents=True)
    (cached / "pkg" / "m.py").write_text("x")
    (cached / "run.sh").write_text("#!/bin/sh\n")
    (cached / "run.sh").chmod(0o555)
    (cached / "pkg" / "m.py").chmod(0o444)
    work = tmp_path / "work"
    work.mkdir()
    assert workspace.copy_workdir(cached, work) == 2
    (work / "pkg" / "m.py").write_text("edited by the job")
    assert (work / "run.sh").stat().st_mode & stat.S_IXUSR and (
        cached / "pkg" / "m.py"
    ).read_text() == "x"


def test_a_job_sees_its_own_variables_and_only_the_worker_variables_its_host_lets_through(
    monkeypatch,
):
    monkeypatch.setenv("WANDB_API_KEY", "k-123")
    monkeypatch.setenv("OTHER_TOKEN", "nope")
    ctx = SimpleNamespace(
        hostname="box",
        config=SimpleNamespace(
            policy=lambda h: HostPolicy("box", pass_env=("WANDB_API_KEY", "ABSENT"))
        ),
    )
    assert workspace.job_variables(job(env={"MODE": "offline"}), ctx) == {
        "MODE": "offline",
        "WANDB_API_KEY": "k-123",
    }
    ctx.config.policy = lambda h: None
    assert workspace.job_variables(job(), ctx) == {}


def test_a_file_list_tar_of_a_whole_directory_is_its_directory_tar(tmp_path):
    (tmp_path / "d" / "s").mkdir(parents=True)
    (tmp_path / "d" / "a").write_text("1")
    (tmp_path / "d" / "s" / "b").write_text("2")
    assert write_files_tar(dir_files(tmp_path / "d")) == write_dir_tar(tmp_path / "d")


@dataclass
class Lease:
    reports: list = field(default_factory=list)

    def report(self, **fields) -> None:
        self.reports.append(fields)


class Task:
    def __init__(self):
        self.states = []

    def update_state(self, state, meta):
        self.states.append((state, meta))


def test_while_the_environment_is_prepared_the_record_and_flower_say_so():
    lease, task = Lease(), Task()
    run = SimpleNamespace(job=job(), lease=lease)
    with workspace._preparing(task, SimpleNamespace(hostname="box"), run, "3f2a1b" + "0" * 58):
        time.sleep(1.3)
    [report] = lease.reports
    assert report["progress"]["tail"] == ["preparing environment 3f2a1b000000.., 1 s"]
    assert task.states[0][0] == "PROGRESS" and task.states[0][1]["worker"] == "box"
    assert not [t for t in threading.enumerate() if t.name.startswith("preparing-")]
