"""What an MLflow run is made of, before any MLflow call: tags, params as strings, and one
(key, value, time, step) per metric of every history point."""

from fleet import mlflow_export as M
from fleet.query.results import Trial


def a_trial(**kw):
    return Trial(
        trial=3,
        name="tune[trial=3]",
        job_id="j" * 64,
        state="pruned",
        params={"lr": 0.01, "hidden": [64, 32], "opt": "adam"},
        value=0.5,
        best_value=0.4,
        steps=2,
        host="gpu-1",
        gpu_s=12.5,
        owner="ana",
        gpus="0:H100",
        **kw,
    )


def test_tags_name_the_job_its_host_gpus_owner_state_and_bundle():
    t = a_trial(artifact={"uri": "s3://b/x.tar.zst", "sha256": "ab" * 32}, search="s1")
    tags = M.tags(t, "loss")
    assert (
        tags[M.JOB_TAG] == "j" * 64
        and tags["fleet.host"] == "gpu-1"
        and tags["fleet.gpus"] == "0:H100"
    )
    assert (
        tags["fleet.owner"] == "ana"
        and tags["fleet.state"] == "pruned"
        and tags["fleet.search"] == "s1"
    )
    assert (
        tags["fleet.bundle_uri"] == "s3://b/x.tar.zst" and tags["fleet.bundle_sha256"] == "ab" * 32
    )
    assert M.tags(a_trial(), "loss")["fleet.bundle_uri"] == "" and "fleet.search" not in M.tags(
        a_trial(), "loss"
    )


def test_params_are_strings_lists_as_compact_json():
    assert M.params(a_trial()) == {"lr": "0.01", "hidden": "[64,32]", "opt": "adam"}


def test_every_metric_of_every_point_goes_at_its_step_with_its_time_in_ms():
    history = [
        {"step": 1, "t": 10.5, "run": 1, "loss": 2.0, "acc": 0.5},
        {"step": 2, "t": 11.0, "run": 2, "loss": 1},
    ]
    assert M.points(history) == [
        ("loss", 2.0, 10500, 1),
        ("acc", 0.5, 10500, 1),
        ("loss", 1.0, 11000, 2),
    ]


def test_a_pruned_trial_is_killed_and_a_queued_one_scheduled():
    assert M.STATUS["pruned"] == "KILLED" and M.STATUS["queued"] == "SCHEDULED"
    assert M.STATUS["succeeded"] == "FINISHED" and M.STATUS["failed"] == "FAILED"


def test_the_step_keys_are_the_x_axis_not_metrics():
    history = [{"step": 2, "epoch": 2, "epochs": 20, "round": 2, "t": 1.0, "run": 1, "loss": 3}]
    assert M.points(history) == [("loss", 3.0, 1000, 2)]


def test_params_are_every_hyperparameter_the_sampled_values_winning():
    t = a_trial(hyper={"lr": 0.5, "epochs": 20, "opt": "adam"})
    assert M.params(t) == {"lr": "0.01", "epochs": "20", "opt": "adam", "hidden": "[64,32]"}


def test_the_runs_description_names_its_bundle_or_says_there_is_none():
    t = a_trial(artifact={"uri": "s3://b/x.tar.zst", "sha256": "ab" * 32, "size": 9})
    assert "[s3://b/x.tar.zst](s3://b/x.tar.zst)" in M.note(t) and "ab" * 32 in M.note(t)
    assert "no bundle stored" in M.tags(a_trial(), "loss")[M.NOTE_TAG]
