"""The ``mlp`` trainer resumes from FLEET_CHECKPOINT_DIR: a run killed mid-training and run
again ends with the very model an uninterrupted run gives (same seed), killed once or twice."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pandas")

from trainers.protocol import parse_metric_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MOONS = ROOT / "examples" / "data" / "moons.csv"
EPOCHS = 24
HYPER = {"epochs": EPOCHS, "batch_size": 64, "dropout": 0.1, "hidden_sizes": "32,32"}


def weights_digest(model_file: Path) -> str:
    """sha256 over every tensor of the saved model, in key order: equal only for equal weights."""
    saved = torch.load(model_file, map_location="cpu", weights_only=True)
    digest = hashlib.sha256()
    for name, tensor in sorted(saved["state_dict"].items()):
        digest.update(name.encode() + tensor.numpy().tobytes())
    return digest.hexdigest()


def trainer(
    tmp_path: Path,
    out: str,
    ckpt: Path | None,
    kill_after_epoch: int | None = None,
    hyper: dict | None = None,
) -> list[dict]:
    """Run ``python -m trainers.run``; SIGKILL it once it reports ``kill_after_epoch``."""
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "model": "mlp",
                "hyper": hyper or HYPER,
                "seed": 11,
                "data": "moons.csv",
                "job_id": "j",
                "name": "resume",
            }
        )
    )
    env = {
        **os.environ,
        "FLEET_JOB_SPEC": str(spec),
        "FLEET_DATA_PATH": str(MOONS),
        "FLEET_OUTPUT_DIR": str(tmp_path / out),
        "FLEET_DEVICE": "cpu",
        "PYTHONUNBUFFERED": "1",
    }
    if ckpt is not None:
        env["FLEET_CHECKPOINT_DIR"] = str(ckpt)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainers.run"],
        env=env,
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    reports = []
    for line in proc.stdout:
        report = parse_metric_line(line.strip())
        if report is not None:
            reports.append(report)
            if kill_after_epoch is not None and report.get("epoch", 0) >= kill_after_epoch:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait(120)
    assert proc.returncode == (-signal.SIGKILL if kill_after_epoch is not None else 0), reports
    return reports


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
