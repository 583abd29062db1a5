"""The manifest package reads manifests alone; pinning data and routing jobs are passed in.

``manifest.loader`` imports nothing above the model: ``fleet.manifests`` hands it the real
DataResolver and routing check, and the tests here hand it small stand-ins.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import DataProblem, ManifestError
from manifest import loader
from manifest.dataref import DataSource
from manifest.hooks import JobProblem, Routes
from manifest.schema import DEFAULT_TIERS, JobSpec

TWO_TABLES = (
    '[[jobs]]\nname = "a"\ncommand = ["x"]\ndata = "d.csv"\n[jobs.sweep]\nseed = [0, 1, 2]\n'
    '[[jobs]]\nname = "b"\ncommand = ["x"]\ndata = "s3://b/k"\n'
)


class Recording:
    """Pins every entry to a fixed digest and remembers what it was asked."""

    def __init__(self):
        self.asked: list[tuple[str, Path]] = []

    @property
    def sources(self) -> dict[str, DataSource]:
        return {"ab" * 32: DataSource("ab" * 32, Path("/d.csv"), "file", 3)}

    def pin(self, written: str, base_dir: Path) -> str:
        self.asked.append((written, base_dir))
        if written == "absent.csv":
            raise DataProblem("data 'absent.csv' does not exist", "check the path")
        return f"pinned:{written}"


def test_without_a_pinner_data_stays_as_written_and_nothing_is_staged():
    m = loader.loads(TWO_TABLES, "m.toml")
    assert [j.data for j in m.jobs] == ["d.csv"] * 3 + ["s3://b/k"] and m.data_sources == {}


def test_a_pinner_is_asked_once_per_table_from_the_manifests_directory_and_its_sources_kept(
    tmp_path,
):
    pinner = Recording()
    m = loader.loads(TWO_TABLES, str(tmp_path / "m.toml"), pin_data=pinner)
    assert pinner.asked == [("d.csv", tmp_path), ("s3://b/k", tmp_path)]
    assert [j.data for j in m.jobs] == ["pinned:d.csv"] * 3 + ["pinned:s3://b/k"]
    assert list(m.data_sources) == ["ab" * 32]


def test_a_data_problem_from_the_pinner_is_a_manifest_problem_at_the_data_line():
    with pytest.raises(ManifestError) as e:
        loader.loads(
            '[[jobs]]\nname = "a"\ncommand = ["x"]\ndata = "absent.csv"\n',
            "m.toml",
            pin_data=Recording(),
        )
    [p] = e.value.problems
    assert (p.line, p.field, p.message, p.fix) == (
        4,
        "jobs[0].data",
        "data 'absent.csv' does not exist",
        "check the path",
    )


def test_without_a_route_check_a_cuda_job_with_no_cuda_tier_loads():
    text = (
        '[tiers.small]\nmin_cores = 1\n[[jobs]]\nname = "a"\ncommand = ["x"]\nrequire_cuda = true\n'
    )
    assert loader.loads(text, "m.toml").jobs[0].needs.require_cuda


def test_a_route_checks_problems_are_reported_at_the_job_or_its_key_with_the_routes_it_was_given():
    seen: list[tuple[JobSpec, Routes]] = []

    def check(job: JobSpec, routes: Routes) -> list[JobProblem]:
        seen.append((job, routes))
        return [
            JobProblem("no tier", "add one"),
            JobProblem("no host", "allow one", key="allowed_hosts"),
        ]

    with pytest.raises(ManifestError) as e:
        loader.loads(
            '[[jobs]]\nname = "a"\ncommand = ["x"]\nallowed_hosts = ["h"]\nmin_cores = 2\n',
            "m.toml",
            check_route=check,
        )
    assert [(p.line, p.field, p.message, p.fix) for p in e.value.problems] == [
        (1, "jobs[0]", "no tier", "add one"),
        (4, "jobs[0].allowed_hosts", "no host", "allow one"),
    ]
    [(job, routes)] = seen
    assert (job.name, job.job_id, job.needs.min_cores, job.allowed_hosts) == ("a", "", 2, ("h",))
    assert routes == Routes(DEFAULT_TIERS, {}, defaults=True)


@pytest.mark.parametrize(
    "text",
    [
        # broken tiers
        '[tiers.gpu]\nrequire_cuda = "yes"\n[[jobs]]\nname = "a"\ncommand = ["x"]\n',
        '[[jobs]]\nname = "a"\ncommand = ["x"]\nmin_cores = "2"\n',  # a mistyped need
    ],
)
def test_the_route_check_is_not_asked_when_the_tiers_or_the_jobs_needs_are_broken(text):
    asked = []
    with pytest.raises(ManifestError):
        loader.loads(text, "m.toml", check_route=lambda job, routes: asked.append(job) or [])
    assert asked == []


def test_loading_a_manifest_imports_nothing_above_the_model():
    code = (
        "import sys, manifest.loader; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'artifacts', 'routing', "
        "'state', 'trainers', 'tasks', 'fleet', 'celery', 'redis', 'boto3'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
