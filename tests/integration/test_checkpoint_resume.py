"""The ``mlp`` trainer resumes from FLEET_CHECKPOINT_DIR: a run killed mid-training and run
again ends with the very model an uninterrupted run gives (same seed), killed once or twice."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pandas")

from tests.harness.trainers import EPOCHS, HYPER, trainer, weights_digest  # noqa: E402


def resumed_from(reports: list[dict]) -> int:
    return next((r["resumed_from_epoch"] for r in reports if "resumed_from_epoch" in r), 0)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("whole")
    trainer(tmp, "out", None)
    return weights_digest(tmp / "out" / "model.pt")


def test_a_killed_mlp_run_resumes_from_its_last_epoch_and_ends_with_the_uninterrupted_model(
    tmp_path, uninterrupted
):
    ckpt = tmp_path / "ckpt"
    trainer(tmp_path, "first", ckpt, kill_after_epoch=EPOCHS // 2)
    reports = trainer(tmp_path, "out", ckpt)
    start = resumed_from(reports)
    assert EPOCHS // 2 - 1 <= start < EPOCHS  # the state is saved just after the epoch reports
    assert [r["epoch"] for r in reports if "epoch" in r] == list(range(start + 1, EPOCHS + 1))
    assert (
        json.loads((tmp_path / "out" / "metrics.json").read_text())["resumed_from_epoch"] == start
    )
    assert weights_digest(tmp_path / "out" / "model.pt") == uninterrupted


def test_a_mlp_run_killed_twice_still_ends_with_the_uninterrupted_model(tmp_path, uninterrupted):
    ckpt = tmp_path / "ckpt"
    trainer(tmp_path, "first", ckpt, kill_after_epoch=EPOCHS // 4)
    second = trainer(tmp_path, "second", ckpt, kill_after_epoch=EPOCHS // 2)
    third = trainer(tmp_path, "out", ckpt)
    assert 0 < resumed_from(second) < resumed_from(third) < EPOCHS
    assert weights_digest(tmp_path / "out" / "model.pt") == uninterrupted


def test_a_checkpoint_of_other_hyperparameters_is_not_resumed(tmp_path):
    ckpt = tmp_path / "ckpt"
    trainer(tmp_path, "first", ckpt, kill_after_epoch=2)
    HYPER["learning_rate"] = 0.01
    try:
        reports = trainer(tmp_path, "out", ckpt)
    finally:
        del HYPER["learning_rate"]
    assert resumed_from(reports) == 0 and reports[0]["epoch"] == 1
