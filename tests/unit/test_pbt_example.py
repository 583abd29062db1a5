"""examples/pbt: its manifest publishes as docs/search.md shows it, and its train.py keeps a
PBT job's rules: it resumes from $FLEET_CHECKPOINT_DIR at the checkpoint's step with the
values FLEET_HYPER gives it now, and writes the checkpoint before each step's metric line."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from fleet.manifests import loads

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pbt"


def run(ckpt: Path, **hyper) -> list[dict]:
    env = dict(os.environ, FLEET_HYPER=json.dumps(hyper), FLEET_CHECKPOINT_DIR=str(ckpt))
    out = subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py")], env=env, capture_output=True, text=True,
        timeout=60, check=True,
    ).stdout  # fmt: skip
    return [json.loads(ln.split(" ", 1)[1]) for ln in out.splitlines() if ln.startswith("FLEET_")]


def test_the_example_manifest_is_the_one_docs_search_md_shows_and_publishes_a_population():
    text = (EXAMPLE / "fleet.toml").read_text()
    m = loads(text, str(EXAMPLE / "fleet.toml"))
    config = m.searches[0].config
    assert config.pbt.population == 8 and config.pbt.interval == 5 and config.last_step == 80
    doc = (ROOT / "docs" / "search.md").read_text()
    block = re.search(r"## Population-based training.*?```toml\n(.*?)```", doc, re.S).group(1)
    strip = [ln.split("#")[0].rstrip() for ln in block.splitlines()]
    assert [ln for ln in strip if ln] == [
        ln.split("#")[0].rstrip() for ln in text.splitlines() if ln.split("#")[0].strip()
    ]


def test_train_resumes_from_the_checkpoint_at_its_step_with_the_new_values(tmp_path):
    first = run(tmp_path, lr=0.3, last_step=20)
    assert [p["step"] for p in first] == list(range(1, 21))
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["step"] == 20  # written before the line of its step
    # an exploit: the same checkpoint, a lower learning rate from step 21 on
    low = run(tmp_path, lr=0.05, last_step=60)
    assert [p["step"] for p in low][0] == 21
    (tmp_path / "state.json").write_text(json.dumps(saved))
    high = run(tmp_path, lr=0.3, last_step=60)
    # the loss floor is the learning rate's: once down to it, the lower one goes further
    assert low[-1]["valid_loss"] < high[-1]["valid_loss"] / 3


def test_train_without_a_checkpoint_dir_runs_alone(tmp_path):
    env = dict(os.environ, FLEET_HYPER=json.dumps({"last_step": 3}))
    env.pop("FLEET_CHECKPOINT_DIR", None)
    out = subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py")], env=env, capture_output=True, text=True,
        timeout=60, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    assert out.count("FLEET_METRIC") == 3 and not list(tmp_path.iterdir())
