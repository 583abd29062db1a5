"""``python -m trainers.run`` as a real subprocess, as a worker runs it: one run to its end
(``run_trainer``), an ``mlp`` run that can be killed at an epoch (``trainer``), the digest
that says two saved models have the same weights, and the worker variables that hold a
worker's built-in trainer runs at an epoch (``held_trainer_env``)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from trainers.protocol import parse_metric_line

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data"
HELD_TRAINER = ROOT / "tests" / "e2e" / "heldtrainer"  # its sitecustomize.py holds the run
RUN_TIMEOUT_S = 120
# A worker gives a job that names no cores one (routing/pool.py DEFAULT_JOB_CORES), and its
# trainer runs that many threads; so do these runs unless the caller's environment says
# otherwise. At torch's default (one thread per core) two threads spun against each other on a
# busy 2-core box: the checkpoint e2e's uninterrupted run took 156 s where one thread takes 10,
# with the same weights.
AS_A_WORKER = {"FLEET_CORES": "1"}


def run_trainer(
    tmp_path: Path,
    model: str,
    hyper: dict,
    data: Path,
    *,
    device: str = "cpu",
    seed: int = 7,
    out: str = "out",
) -> tuple[subprocess.CompletedProcess, Path]:
    spec = {
        "model": model,
        "hyper": hyper,
        "seed": seed,
        "data": f"s3://bucket/{data.name}",
        "job_id": "job-1",
        "name": f"{model}-test",
    }
    spec_path = tmp_path / f"{out}-spec.json"
    spec_path.write_text(json.dumps(spec))
    output_dir = tmp_path / out
    env = {
        **AS_A_WORKER,
        **os.environ,
        "FLEET_JOB_SPEC": str(spec_path),
        "FLEET_DATA_PATH": str(data),
        "FLEET_OUTPUT_DIR": str(output_dir),
        "FLEET_DEVICE": device,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-m", "trainers.run"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    return done, output_dir


def metric_reports(stdout: str) -> list[dict]:
    return [r for r in map(parse_metric_line, stdout.splitlines()) if r is not None]


def assert_trained(done: subprocess.CompletedProcess, output_dir: Path, model_file: str) -> dict:
    assert done.returncode == 0, done.stderr
    for name in (model_file, "metrics.json", "checkpoint.json"):
        assert (output_dir / name).is_file(), name
    return json.loads((output_dir / "metrics.json").read_text())


MOONS = ROOT / "examples" / "data" / "moons.csv"
EPOCHS = 24
HYPER = {"epochs": EPOCHS, "batch_size": 64, "dropout": 0.1, "hidden_sizes": "32,32"}


def weights_digest(model_file: Path) -> str:
    """sha256 over every tensor of the saved model, in key order: equal only for equal weights."""
    import torch

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
        **AS_A_WORKER,
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


def held_trainer_env(env: Mapping[str, str], epoch: int, gate: Path) -> dict[str, str]:
    """Variables for a worker (beside ``env``, its others) whose built-in trainer runs stay
    at ``epoch`` until the file ``gate`` exists (``tests/e2e/heldtrainer/sitecustomize.py``);
    a run resumed past ``epoch`` does not stop."""
    path = os.pathsep.join(filter(None, [str(HELD_TRAINER), env.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "FLEET_TEST_HOLD_AT": str(epoch), "FLEET_TEST_HOLD_GATE": str(gate)}
