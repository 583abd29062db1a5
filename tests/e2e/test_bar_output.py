"""A job that prints its metric lines beside a real tqdm bar, run by a real worker: every
point reaches the job's history and its result, and `fleet logs` shows each bar's last state."""

import sys
from pathlib import Path

import pytest

from state import history
from tests.harness.manifests import command_job

pytestmark = pytest.mark.e2e
BARJOB = str(Path(__file__).with_name("barjob.py"))
EPOCHS = 7


def test_metric_lines_beside_a_tqdm_bar_all_reach_the_history_and_logs_show_the_bars_end(chaos):
    chaos.start("bar-a")
    path = chaos.root / "bars.toml"
    path.write_text(command_job("bars", [sys.executable, BARJOB, "bar", str(EPOCHS)]))
    ids = chaos.publish(path)
    rec = chaos.wait(ids)["bars"]
    points = history.read(chaos.client(), ids["bars"])
    assert [p["step"] for p in points] == list(range(EPOCHS)), points
    assert points[-1]["loss"] == pytest.approx(1 / EPOCHS)
    assert rec.result["metrics"]["epoch"] == EPOCHS - 1, rec.result
    assert "bad_metric_lines" not in rec.result
    shown = chaos.fleet("logs", "bars").stdout.splitlines()
    ends = [line for line in shown if f"{20}/20" in line]
    assert len(ends) == EPOCHS and all("100%|" in line for line in ends), shown
    assert not any("\r" in line or " 0%|" in line for line in shown), shown
