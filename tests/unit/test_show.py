"""`fleet show` to read (fleet.cli.show), and the note on a name several jobs share
(fleet.query.refs.shared_name_note): pure, from record views."""

import io

from rich.console import Console

from fleet.cli.show import render_show, show_rows
from fleet.query.refs import shared_name_note

JID = "1a2b3c4d5e6f" + "0" * 52
DONE = {
    "job_id": JID,
    "name": "mlp-moons",
    "state": "succeeded",
    "queue": "cuda",
    "worker": "big4",
    "gpus": [{"index": 0, "name": "NVIDIA H100"}],
    "cores": 4,
    "runs": 1,
    "attempts": 1,
    "owner": "alice",
    "created_at": "2026-11-25T12:00:00+00:00",
    "finished_at": "2026-11-25T12:05:00+00:00",
    "progress": {"tail": ["epoch 351 of 400"], "metrics": {"epoch": 351}},
    "result": {"metrics": {"train_loss": 0.0123456, "valid_acc": 0.97, "epoch": 400}},
    "artifact": {"uri": "s3://b/runs/mlp/x.tar.zst", "sha256": "ab" * 32, "size": 123456},
    "spec": {"model": "mlp", "data": "store://moons.csv", "hyper": {"epochs": 400}, "seed": 0},
}


def rows(v: dict) -> dict:
    return dict(show_rows(v))


def test_a_succeeded_jobs_progress_is_its_final_metrics_not_its_last_tick():
    assert rows(DONE)["progress"] == "train_loss=0.01235 valid_acc=0.97 epoch=400"


def test_show_names_every_member_host_of_a_gang_by_rank():
    assert rows({**DONE, "gang_hosts": "ga,gb", "gpus": []})["worker"] == (
        "rank 0 ga, rank 1 gb, 4 cores"
    )


def test_show_names_where_it_ran_its_owner_artifact_and_spec():
    r = rows(DONE)
    assert r["worker"] == "big4, GPU 0 NVIDIA H100, 4 cores" and r["owner"] == "alice"
    assert r["artifact"] == "s3://b/runs/mlp/x.tar.zst (sha256 abababababab, 123,456 bytes)"
    assert r["spec"] == 'model mlp, data store://moons.csv, hyper {"epochs": 400}, seed 0'
    assert "ended" not in r and "started" not in r  # nothing to say: no row


def test_a_failed_job_shows_how_it_ended_in_one_line_and_its_last_progress():
    failed = {
        **DONE,
        "state": "failed",
        "result": None,
        "artifact": None,
        "end_reason": "exit 1: KeyError: 'label'",
        "last_error": (
            "job mlp-moons (1a2b) exited with status 1; last output:\nTraceback\nKeyError: 'label'"
        ),
    }
    r = rows(failed)
    assert (
        r["ended"] == "exit 1: KeyError: 'label'" and r["progress"] == "epoch=351; epoch 351 of 400"
    )
    older = rows({**failed, "end_reason": ""})  # a record from before ends were stored
    assert older["ended"] == "job mlp-moons (1a2b) exited with status 1; last output:"


def test_show_reads_at_80_columns_with_long_values_wrapped_in_their_column():
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(render_show({**DONE, "spec": {"command": ["python", "-c", "x" * 150]}}))
    text = console.export_text()
    assert text.startswith("mlp-moons (1a2b3c4d5e6f")
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "progress  train_loss=0.01235" in text


def test_a_name_other_jobs_share_says_which_was_picked_and_how_to_reach_the_others():
    note = shared_name_note("a", "f" * 64, ["e" * 64, "d" * 64], "logs")
    assert note == (
        "note: 3 jobs are named 'a'; this is ffffffffffff, the one published last; for the others: "
        "`fleet logs eeeeeeeeeeee`, `fleet logs dddddddddddd`"
    )
    assert shared_name_note("a", "f" * 64, [], "logs") is None
