"""A job's checkpoint dir: a relative folder inside its work dir, outside the job ID."""

import pytest

from core.errors import ManifestError
from fleet.manifests import loads
from manifest.checkpoint import checkpoint_dir, checkpoint_problem

JOB = '[[jobs]]\nname = "a"\ncommand = ["true"]\n'


@pytest.mark.parametrize(
    "value, normal",
    [
        ("ckpt/", "ckpt"),
        ("./ckpt", "ckpt"),
        ("state/latest", "state/latest"),
        ("ckpt/./x/", "ckpt/x"),
    ],
)
def test_a_relative_folder_is_accepted_in_its_normal_form(value, normal):
    assert checkpoint_problem(value) is None and checkpoint_dir(value) == normal


@pytest.mark.parametrize(
    "value, says",
    [
        ("", "empty"),
        ("  ", "empty"),
        ("/ckpt", "relative"),
        ("~/ckpt", "relative"),
        ("..", "inside"),
        ("a/../../b", "inside"),
        (".", "inside"),
        ("out/ckpt", "'out'"),
        ("job.json", "'job.json'"),
        ("c:\\ckpt", "relative"),
    ],
)
def test_a_path_outside_the_work_dir_or_on_the_workers_files_is_refused(value, says):
    message, fix = checkpoint_problem(value)
    assert says in message and "checkpoint =" in fix


def test_the_manifest_names_the_line_and_field_of_a_bad_checkpoint():
    with pytest.raises(ManifestError) as e:
        loads(JOB + 'checkpoint = "../up"\n', "m.toml")
    assert "m.toml:4: jobs[0].checkpoint: checkpoint '../up' must stay inside" in str(e.value)


def test_a_checkpoint_is_on_the_job_and_does_not_change_its_id():
    with_ckpt, without = loads(JOB + 'checkpoint = "ckpt/"\n').jobs[0], loads(JOB).jobs[0]
    assert with_ckpt.checkpoint == "ckpt" and without.checkpoint is None
    assert with_ckpt.job_id == without.job_id


def test_a_checkpoint_that_is_not_a_string_is_a_type_error():
    with pytest.raises(ManifestError, match="checkpoint: must be a string"):
        loads(JOB + "checkpoint = 3\n")
