"""examples/pipeline/ as the docs and the README show it: its manifest joins prep, the tune
search and final as docs/pipelines.md says, and its two scripts train for real: prep writes the
data files, train reads them from $FLEET_INPUTS/prep/ as a worker lays a bundle out, prints the
FLEET_METRIC lines the search ranks by, and with --full trains with the values it is given."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from manifest.loader import load

pytestmark = pytest.mark.integration
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline"


def test_the_example_manifest_joins_prep_the_search_and_final():
    m = load(EXAMPLE / "manifest.toml")
    jobs = {j.name: j for j in m.jobs}
    [tune] = m.searches
    assert [u.name for u in tune.base.after] == ["prep"]
    assert [(i.name, i.dir) for i in tune.base.inputs] == [("prep", "prep")]
    assert {u.name for u in jobs["final"].after} == {"tune", "prep"}
    assert jobs["final"].params_from == tune.search_id
    assert jobs["final"].hyper["epochs"] == 200  # its own value wins over the search's


def run(script: str, work: Path, *args: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / script), *args],
        cwd=work,
        env={**os.environ, "FLEET_OUTPUT_DIR": str(work / "out"), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def metrics(out: str) -> list[dict]:
    return [
        json.loads(ln.split(" ", 1)[1]) for ln in out.splitlines() if ln.startswith("FLEET_METRIC ")
    ]


def test_prep_then_train_learn_the_moons_from_the_inputs_folder(tmp_path):
    prep, trial, final = tmp_path / "prep", tmp_path / "trial", tmp_path / "final"
    for d in (prep, trial, final):
        d.mkdir()
    run("prep.py", prep, FLEET_SEED="0")
    inputs = tmp_path / "inputs"
    shutil.copytree(prep / "out", inputs / "prep" / "out")  # the bundle holds out/*
    hyper = {"lr": 0.5, "l2": 1e-4, "epochs": 20}
    lines = metrics(run("train.py", trial, FLEET_INPUTS=str(inputs), FLEET_HYPER=json.dumps(hyper)))
    assert [m["epoch"] for m in lines] == list(range(1, 21))
    assert lines[-1]["valid_loss"] < lines[0]["valid_loss"] < 0.7  # it learns
    best = {**hyper, "epochs": 60}
    run("train.py", final, "--full", FLEET_INPUTS=str(inputs), FLEET_HYPER=json.dumps(best))
    assert json.loads((final / "out" / "params.json").read_text()) == best
    assert (final / "out" / "model.npz").stat().st_size > 0


def test_train_without_preps_files_says_which_input_it_needs(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py")],
        cwd=tmp_path,
        env={**os.environ, "FLEET_INPUTS": str(tmp_path / "none")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "inputs = ['prep']" in done.stderr
