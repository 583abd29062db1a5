"""``preemptible = true``: a job that loses nothing when stopped, outside the job ID."""

from __future__ import annotations

import pytest

from core.errors import ManifestError
from fleet.manifests import loads
from manifest.schema import JobSpec

JOB = '[[jobs]]\nname = "a"\ncommand = ["true"]\n'


def test_a_preemptible_job_says_so_and_keeps_the_id_it_had_without_the_field():
    plain, marked = (
        loads(JOB, "a.toml").jobs[0],
        loads(JOB + "preemptible = true\n", "b.toml").jobs[0],
    )
    assert marked.preemptible and not plain.preemptible
    assert marked.job_id == plain.job_id


def test_a_job_that_leaves_it_out_has_the_spec_it_had_before():
    spec = loads(JOB, "a.toml").jobs[0].to_dict()
    assert "preemptible" not in spec
    assert JobSpec.from_dict(spec) == loads(JOB, "a.toml").jobs[0]


def test_a_preemptible_spec_round_trips():
    job = loads(JOB + "preemptible = true\n", "a.toml").jobs[0]
    assert JobSpec.from_dict(job.to_dict()).preemptible


def test_a_preemptible_that_is_not_a_bool_names_the_line_and_field():
    with pytest.raises(ManifestError) as e:
        loads(JOB + 'preemptible = "yes"\n', "m.toml")
    assert "m.toml:4: jobs[0].preemptible" in str(e.value)
