"""A job's own code and environment in the manifest: workdir pinned by content, the
environment's definition in its ID, plain variables and a host's pass_env checked."""

from pathlib import Path

import pytest

from core.errors import ManifestError
from fleet.manifests import loads
from manifest import ids
from manifest.schema import HostPolicy, JobSpec

JOB = '[[jobs]]\nname = "own"\nworkdir = "proj"\ncommand = ["python", "train.py"]\n'


def project(root: Path, train: str = "import helper\n") -> Path:
    (root / "proj").mkdir(parents=True)
    (root / "proj" / "train.py").write_text(train)
    (root / "proj" / "helper.py").write_text("X = 1\n")
    (root / "proj" / "requirements.txt").write_text("# pinned\nfleettoy==1.0  # the toy\n\n")
    return root


def load(root: Path, extra: str = "", head: str = "") -> JobSpec:
    text = head + JOB + extra
    (root / "m.toml").write_text(text)
    return loads(text, str(root / "m.toml")).jobs[0]


def problems(root: Path, extra: str = "", head: str = "") -> str:
    with pytest.raises(ManifestError) as e:
        load(root, extra, head)
    return "\n".join(map(str, e.value.problems))


def test_the_same_code_from_two_clones_is_the_same_job_and_one_changed_byte_a_new_one(tmp_path):
    a, b = load(project(tmp_path / "a")), load(project(tmp_path / "clone-b"))
    assert a.job_id == b.job_id and a.workdir == b.workdir and a.workdir.endswith("/workdir/")
    c = load(project(tmp_path / "c", train="import helper \n"))
    assert c.job_id != a.job_id


def test_a_requirements_file_is_read_from_the_workdir_without_comments(tmp_path):
    job = load(project(tmp_path), 'requirements = "requirements.txt"\npython = "3.11"\n')
    assert job.requirements == ("fleettoy==1.0",) and job.python == "3.11" and job.own_env
    assert JobSpec.from_dict(job.to_dict()) == job


def test_requirements_and_variables_are_part_of_the_job_id(tmp_path):
    root = project(tmp_path)
    plain = load(root)
    assert (
        len(
            {
                plain.job_id,
                load(root, 'requirements = ["fleettoy==1.0"]\n').job_id,
                load(root, 'env = { MODE = "a" }\n').job_id,
                load(root, 'env = { MODE = "b" }\n').job_id,
            }
        )
        == 4
    )


def test_a_job_without_code_or_environment_keeps_the_id_it_always_had(tmp_path):
    text = '[[jobs]]\nname = "x"\ncommand = ["true"]\n'
    job = loads(text, str(tmp_path / "m.toml")).jobs[0]
    from manifest.schema import Needs

    assert job.job_id == ids.job_id(
        model=None, command=["true"], artifacts=[], data=None, hyper={}, seed=0, needs=Needs()
    )


def test_a_uv_lock_project_is_pinned_by_its_lock(tmp_path):
    root = project(tmp_path)
    (root / "proj" / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "0"\n')
    (root / "proj" / "uv.lock").write_text("version = 1\n")
    job = load(root)
    assert job.env_lock and len(job.env_lock) == 64 and job.own_env


def test_written_requirements_win_over_a_lock_in_the_workdir(tmp_path):
    root = project(tmp_path)
    (root / "proj" / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "0"\n')
    (root / "proj" / "uv.lock").write_text("version = 1\n")
    job = load(root, 'requirements = ["fleettoy==1.0"]\n')
    assert job.env_lock is None and job.requirements == ("fleettoy==1.0",)


def test_python_without_an_environment_to_apply_to_is_refused(tmp_path):
    assert "has no uv.lock" in problems(project(tmp_path), 'python = "3.12"\n')


def test_a_missing_requirements_file_is_named(tmp_path):
    assert "'reqs.txt' is not in workdir" in problems(
        project(tmp_path), 'requirements = "reqs.txt"\n'
    )


def test_a_requirements_file_without_a_workdir_is_refused(tmp_path):
    text = '[[jobs]]\nname = "x"\ncommand = ["true"]\nrequirements = "requirements.txt"\n'
    with pytest.raises(ManifestError, match="needs a workdir"):
        loads(text, str(tmp_path / "m.toml"))


def test_a_missing_workdir_is_named_at_its_line(tmp_path):
    assert "is not a directory" in problems(tmp_path)


def test_a_workdir_over_the_limit_names_its_largest_file(tmp_path, monkeypatch):
    root = project(tmp_path)
    (root / "proj" / "weights.bin").write_bytes(b"\0" * (2 << 20))
    monkeypatch.setenv("FLEET_WORKDIR_MAX_MIB", "1")
    found = problems(root)
    assert "weights.bin (2.0 MiB)" in found and "jobs[0].workdir" in found


@pytest.mark.parametrize(
    "extra, expected",
    [
        ('env = { "1BAD" = "x" }\n', "is not a variable name"),
        ('env = { FLEET_SEED = "1" }\n', "is set by the worker"),
        ("env = { STEPS = 3 }\n", 'write STEPS = "3"'),
        ('python = "2.7"\n', "not a Python 3 version"),
        ('requirements = ["a", " "]\n', "a requirement cannot be empty"),
    ],
)
def test_bad_environment_fields_are_named(tmp_path, extra, expected):
    assert expected in problems(project(tmp_path), extra)


def test_a_host_may_let_named_worker_variables_through(tmp_path):
    text = (
        '[hosts.box]\npass_env = ["WANDB_API_KEY"]\n' + '[[jobs]]\nname = "x"\ncommand = ["true"]\n'
    )
    m = loads(text, str(tmp_path / "m.toml"))
    assert m.hosts["box"].pass_env == ("WANDB_API_KEY",)
    assert HostPolicy.from_dict(m.hosts["box"].to_dict()) == m.hosts["box"]
    with pytest.raises(ManifestError, match="'BAD-NAME' is not a variable name"):
        loads(text.replace("WANDB_API_KEY", "BAD-NAME"), str(tmp_path / "m.toml"))


def test_a_manifest_inside_its_workdir_is_not_its_own_jobs_content(tmp_path):
    """Editing a comment in the manifest re-ran the job (and gave a search a new id) while
    the manifest travelled with the job; other files there still count."""
    proj = project(tmp_path)
    job = JOB.replace('workdir = "proj"', 'workdir = "."')
    search = job.replace('"own"', '"tune"') + (
        '[jobs.search]\nmetric = "loss"\n[jobs.search.space]\nx = { low = 0.0, high = 1.0 }\n'
    )

    def ids_of(comment: str) -> tuple[str, str]:
        text = f"# {comment}\n{job}{search}"
        (proj / "proj" / "m.toml").write_text(text)
        m = loads(text, str(proj / "proj" / "m.toml"))
        return m.jobs[0].job_id, m.searches[0].search_id

    first = ids_of("first")
    assert ids_of("an edited comment") == first
    (proj / "proj" / "helper.py").write_text("X = 2\n")
    assert ids_of("first")[0] != first[0]
