"""The glue a job imports (trainers/report.py): a metric line that survives a progress bar on
the same output, thread pools sized to the job's cores, and no stack imported by trainers."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from trainers import protocol
from trainers.report import cores, report, threads_per_process, use_cores


def lines_read(text: str) -> list[dict]:
    """What a reader that splits on newlines and on a bar's carriage returns keeps of it."""
    out = []
    for line in text.replace("\r", "\n").split("\n"):
        got = protocol.parse_metric_line(line)
        if got is not None:
            out.append(got)
    return out


def test_a_metric_line_printed_after_an_open_bar_starts_a_line_of_its_own():
    out = io.StringIO()
    out.write("\r 40%|████      | 4/10")  # tqdm's bar: drawn with \r, never ended
    report({"epoch": 3, "loss": 0.5}, stream=out)
    out.write("\r 50%|█████     | 5/10")
    assert out.getvalue().split("\n")[1] == 'FLEET_METRIC {"epoch": 3, "loss": 0.5}'
    assert lines_read(out.getvalue()) == [{"epoch": 3, "loss": 0.5}]


def test_the_cores_are_the_jobs_and_torchruns_ranks_share_them():
    assert cores({protocol.ENV_CORES: "4"}) == 4
    assert threads_per_process({protocol.ENV_CORES: "4", "LOCAL_WORLD_SIZE": "2"}) == 2
    assert threads_per_process({protocol.ENV_CORES: "1", "LOCAL_WORLD_SIZE": "2"}) == 1
    assert threads_per_process({protocol.ENV_CORES: "3"}) == 3


def test_use_cores_sets_every_pool_and_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    for var in (*protocol.THREAD_VARS, "LOKY_MAX_CPU_COUNT"):
        monkeypatch.setenv(var, "7")  # put back as it was after the test
    try:
        assert use_cores({protocol.ENV_CORES: "2", "LOCAL_WORLD_SIZE": "2"}) == 1
        assert all(os.environ[v] == "1" for v in protocol.THREAD_VARS)
        assert os.environ["LOKY_MAX_CPU_COUNT"] == "1" and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_importing_trainers_and_the_report_glue_imports_no_stack():
    code = (
        "import sys, trainers, trainers.report, trainers.protocol;"
        "print([m for m in ('torch', 'pytorch_lightning', 'lightning', 'transformers',"
        " 'sklearn', 'xgboost') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
