"""Manifests for the manifest tests: two valid jobs to append keys to, and helpers that write
a manifest (with the data files it names) to tmp_path and load it as publish does."""

from pathlib import Path
from textwrap import dedent

import pytest

from core.errors import ManifestError
from fleet.manifests import load

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "manifest.toml"

# One valid model job; tests append keys to it. Its lines: [[jobs]] 1, name 2, model 3, data 4.
GBT = """
[[jobs]]
name = "a"
model = "gbt"
data = "d.csv"
"""
# Its lines: [[jobs]] 1, name 2, command 3; what a test appends starts at line 4.
COMMAND = """
[[jobs]]
name = "a"
command = ["python", "train.py"]
"""
CPU_ONLY = "[tiers.small]\nmin_cores = 1\n"  # a [tiers] table without a CUDA tier


# the data files the job tables name, next to each manifest (a missing one is an error)
DATA_FILES = {"d.csv": "x,target\n1,0\n2,1\n", "other.csv": "x,target\n3,1\n4,0\n"}


def write(tmp_path: Path, text: str, name: str = "manifest.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dedent(text).lstrip("\n"))
    for data, content in DATA_FILES.items():
        if not (path.parent / data).exists():
            (path.parent / data).write_text(content)
    return path


def problems(tmp_path: Path, text: str) -> list:
    path = write(tmp_path, text)
    with pytest.raises(ManifestError) as e:
        load(path)
    for p in e.value.problems:
        assert p.file == str(path)
    return e.value.problems


def only_problem(tmp_path: Path, text: str):
    found = problems(tmp_path, text)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def jobs_of(tmp_path: Path, text: str, name: str = "manifest.toml"):
    return load(write(tmp_path, text, name)).jobs


def job_of(tmp_path: Path, text: str, name: str = "manifest.toml"):
    (job,) = jobs_of(tmp_path, text, name)
    return job
