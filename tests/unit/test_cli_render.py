"""The status table at 80 and 100 columns: names, IDs, states and hosts stay whole, IDs are
unique prefixes, errors get their own line; --wide shows every column."""

import io
import sys

import pytest
from rich.console import Console

from fleet.cli.jobs import render, unique_prefix_len
from fleet.query import jobs as Q
from state.jobrecord import JobRecord, JobState, RunEnd

NOW = 1_700_000_000.0
ERROR = (
    "job gbt-breast-cancer[max_depth=2,seed=0] (b22a6aa4039b) exited with status 1; last output:\n"
    "Traceback (most recent call last):\n"
    "ValueError: learning_rate must be > 0, got -0.1 in the manifest"
)
ROWS = [
    JobRecord(
        "b0f99a1111aa",
        "gbt-breast-cancer[max_depth=2,seed=0]",
        JobState.FAILED,
        "cpu",
        1,
        "local-cpu",
        started_at=NOW - 20,
        finished_at=NOW - 5,
        last_error=ERROR,
        end=RunEnd.FAILED,
        end_reason="exit 1: ValueError: learning_rate must be > 0, got -0.1 in the manifest",
    ),
    JobRecord(
        "b0f99b2222bb",
        "mlp-diabetes-large",
        JobState.RUNNING,
        "cuda-large",
        1,
        "local-cuda-large",
        started_at=NOW - 30,
        progress={"metrics": {"epoch": 3, "train_loss": 0.51234}},
    ),
    JobRecord(
        "c1d2e3f4a5b6",
        "gbt-diabetes-prefers-gpu",
        JobState.SUCCEEDED,
        "cuda",
        1,
        "local-cuda",
        started_at=NOW - 60,
        finished_at=NOW - 50,
        artifact={"sha256": "ab" * 32},
        result={"metrics": {"train_loss": 38.76, "valid_loss": 55.43}},
    ),
    JobRecord("d4e5f6a7b8c9", "mlp-wine", JobState.QUEUED, "cuda", 0, "", created_at=NOW - 12),
]


def text_at(width: int, wide: bool = False) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(render(Q.view(ROWS, now=NOW, limit=None), width=width, wide=wide))
    return console.export_text()


def test_a_gangs_worker_cell_names_each_members_host():
    from fleet.cli.jobs import worker_cell

    row = JobRecord("a" * 12, "g", JobState.RUNNING, "cpu", 1, "ga", gang_hosts="ga,gb")
    assert worker_cell(row) == "ga + gb"


@pytest.mark.parametrize("width", [80, 100])
def test_at_80_and_100_columns_names_hosts_and_states_stay_whole(width):
    text = text_at(width)
    assert max(len(line) for line in text.splitlines()) <= width
    for row in ROWS:
        assert row.name in text and row.state.value in text
        assert row.worker in text
    assert "…" not in text


@pytest.mark.parametrize("width", [80, 100])
def test_ids_are_the_shortest_unique_prefix_and_errors_have_their_own_line(width):
    text = text_at(width)
    assert "b0f99a " in text and "b0f99b " in text
    assert (
        "\ngbt-breast-cancer[max_depth=2,seed=0]: exit 1: ValueError: learning_rate must be" in text
    )
    # too narrow for a notes column
    assert "\nmlp-diabetes-large: train_loss=0.5123 epoch=3" in text


def test_a_terminal_of_120_columns_shows_notes_it_would_cut_and_the_error_below_it():
    text = text_at(120)
    assert "\nmlp-diabetes-large: train_loss=0.5123 epoch=3" in text and "…" not in text
    assert (
        "\ngbt-breast-cancer[max_depth=2,seed=0]: exit 1: ValueError: learning_rate must be > 0"
        in text
    )
    assert max(len(line) for line in text.splitlines()) <= 120


def test_fit_columns_keeps_the_essentials_and_adds_the_rest_in_order_while_they_fit():
    from fleet.cli.jobs import STATUS

    fit_columns = STATUS.fit
    natural = {
        "job": 20,
        "id": 6,
        "state": 9,
        "owner": 8,
        "queue": 10,
        "tries": 5,
        "worker": 16,
        "time": 16,
        "progress / error": 40,
        "artifact": 12,
    }
    assert list(fit_columns(natural, 60)) == ["job", "id", "state", "worker"]
    assert fit_columns(natural, 80)["time"] == 16 and "progress / error" not in fit_columns(
        natural, 80
    )
    assert fit_columns(natural, 100)["progress / error"] == 100 - (20 + 6 + 9 + 16 + 16) - 3 * 5


def test_unique_prefix_len_grows_until_every_id_differs():
    assert unique_prefix_len(["b0f99a11", "b0f99b22"]) == 6
    assert unique_prefix_len(["b0f99a11", "b0f99a22"]) == 7
    assert unique_prefix_len([]) == 6


def test_wide_shows_queue_tries_and_artifact():
    text = text_at(200, wide=True)
    assert "artifact" in text and "tries" in text and "abababababab" in text
    assert "gbt-breast-cancer[max_depth=2,seed=0]" in text_at(100, wide=True)


def test_fleet_local_progress_shows_counts_then_each_running_jobs_time_host_and_progress():
    from fleet.cli.local import progress_lines

    console = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    console.print(progress_lines(Q.view(ROWS, now=NOW, limit=None)))
    text = console.export_text()
    assert text.startswith("waiting for jobs: 1 running, 1 failed, 1 queued, 1 succeeded")
    assert (
        "  mlp-diabetes-large  running 30s on local-cuda-large | train_loss=0.5123 epoch=3" in text
    )
    assert "  mlp-wine  waiting 12s" in text and "gbt-diabetes-prefers-gpu" not in text


def test_artifacts_are_marked_current_only_for_the_jobs_whose_records_were_read():
    from fleet.query.artifacts import ArtifactRow, ArtifactsView, mark_current

    v = ArtifactsView(
        [
            ArtifactRow("a", "gbt", "s1", 1, "u1", job_id="j1"),
            ArtifactRow("a", "gbt", "s2", 1, "u2", job_id="j1"),
            ArtifactRow("b", "gbt", "s3", 1, "u3", job_id="j2"),
        ]
    )
    assert [r.current for r in mark_current(v, {"j1": "s2"}).rows] == [False, True, None]


@pytest.mark.parametrize(
    "field, shown",
    [
        ("0:NVIDIA H100", "gpu8 (GPU 0)"),
        ("0:NVIDIA H100,1:NVIDIA H100", "gpu8 (GPU 0,1)"),
        ("4:A,5:A,6:A,7:A", "gpu8 (GPU 4-7)"),
        ("0:A,2:A,3:A,4:A", "gpu8 (GPU 0,2-4)"),
        ("", "gpu8"),
    ],
)
def test_a_running_jobs_worker_cell_names_the_gpus_it_holds(field, shown):
    from fleet.cli.jobs import worker_cell

    row = JobRecord("a" * 12, "ddp", JobState.RUNNING, "cuda", 1, "gpu8", gpu=field)
    assert worker_cell(row) == shown


@pytest.mark.parametrize("width", [80, 100])
def test_a_job_holding_four_gpus_shows_them_beside_its_host_at_80_and_100_columns(width):
    rows = ROWS + [
        JobRecord(
            "e5f6a7b8c9d0",
            "ddp-llama[seed=0]",
            JobState.RUNNING,
            "cuda.gpus4.vram24",
            1,
            "big4",
            gpu="0:NVIDIA H100,1:NVIDIA H100,2:NVIDIA H100,3:NVIDIA H100",
            started_at=NOW - 9,
        )
    ]
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(render(Q.view(rows, now=NOW, limit=None), width=width))
    text = console.export_text()
    assert "big4 (GPU 0-3)" in text and max(len(line) for line in text.splitlines()) <= width


def test_status_json_and_show_list_each_gpu_a_job_holds():
    row = JobRecord(
        "a" * 12, "ddp", JobState.RUNNING, "cuda", 1, "gpu8", gpu="0:NVIDIA H100,1:NVIDIA H100"
    )
    held = [{"index": 0, "name": "NVIDIA H100"}, {"index": 1, "name": "NVIDIA H100"}]
    got = Q.row_dict(row, NOW)
    assert got["gpus"] == held and got["gpu"] == "0:NVIDIA H100,1:NVIDIA H100"
    assert Q.record_view({"gpu": "0:NVIDIA H100,1:NVIDIA H100"})["gpus"] == held
    assert Q.record_view({"gpu": None, "state": "queued"})["gpus"] == []


SHORT = [
    JobRecord(
        "b0f99b" + "1" * 58,
        "mlp-a",
        JobState.RUNNING,
        "cuda",
        1,
        "local-cuda-large",
        started_at=NOW - 30,
        progress={"metrics": {"train_loss": 0.512345, "valid_loss": 0.61234, "epoch": 3}},
    ),
    JobRecord(
        "c1d2e3" + "2" * 58,
        "gbt-b",
        JobState.SUCCEEDED,
        "cuda",
        1,
        "local-cuda",
        started_at=NOW - 60,
        finished_at=NOW - 50,
        result={"metrics": {"train_loss": 38.76, "valid_loss": 55.43}},
    ),
]


@pytest.mark.parametrize("width", [80, 100])
def test_metrics_the_column_cannot_hold_go_whole_on_their_own_line_never_cut(width):
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(render(Q.view(SHORT, now=NOW, limit=None), width=width))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    assert "\nmlp-a: train_loss=0.5123 valid_loss=0.6123 epoch=3" in text


def test_at_80_columns_a_time_that_would_be_cut_shows_its_short_form_whole():
    """The example manifest's names leave ~12 columns for time: "ran 4s, 4m1…" said nothing."""
    rows = [
        JobRecord("aa11", "gbt-breast-cancer[seed=0]", JobState.SUCCEEDED, "cpu", 1,
                  "local-cuda-large", started_at=NOW - 256, finished_at=NOW - 252),
        JobRecord("bb22", "mlp-diabetes-large", JobState.RUNNING, "cuda", 1, "local-cuda",
                  started_at=NOW - 256),
        JobRecord("cc33", "mlp-wine", JobState.QUEUED, "cuda", 0, "", created_at=NOW - 12),
    ]  # fmt: skip
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(render(Q.view(rows, now=NOW, limit=None), width=80))
    lines = {ln.split()[0]: ln.rstrip() for ln in console.export_text().splitlines() if ln}
    assert lines["gbt-breast-cancer[seed=0]"].endswith("4m12s ago")  # ended 252 s ago
    assert lines["mlp-diabetes-large"].split()[-3:] == ["running", "local-cuda", "4m16s"]
    assert lines["mlp-wine"].endswith("12s") and "…" not in "".join(lines.values())
    # where the whole form fits it stays: how long it ran, and when it ended
    wide = Console(width=140, record=True, file=io.StringIO(), color_system=None)
    wide.print(render(Q.view(rows, now=NOW, limit=None), width=140))
    text = wide.export_text()
    assert "ran 4s, 4m12s ago" in text and "running 4m16s" in text


def test_a_job_name_with_an_emoji_code_prints_as_written(monkeypatch):
    """rich would print ':rocket:' as the emoji in a plain line (`fleet cancel`'s report, an
    error naming the job); fleet's consoles print names as they are written."""
    from fleet.cli import common

    out = io.StringIO()
    # the console writes to whatever sys.stdout is (it holds no file of its own): patching its
    # `file` would leave it holding this test's capture stream after the undo, and every later
    # test in the process would print past its own capsys
    monkeypatch.setattr(sys, "stdout", out)
    common.console.print("  ship:rocket: (b0f99a) was queued")
    common.say("no job named 'ship:fire:'", to=common.console)
    assert out.getvalue() == "  ship:rocket: (b0f99a) was queued\nno job named 'ship:fire:'\n"
