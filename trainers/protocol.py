"""What a worker and a trainer subprocess agree on: env vars, file names, exit codes, metric lines.

Pure, so the worker's parent process can parse trainer output without torch or xgboost.
"""
from __future__ import annotations

import json

ENV_JOB_SPEC = "FLEET_JOB_SPEC"        # path of a JSON file: model, hyper, seed, data, job_id, name
ENV_DATA_PATH = "FLEET_DATA_PATH"      # local path of the dataset, already fetched
ENV_OUTPUT_DIR = "FLEET_OUTPUT_DIR"    # folder the trainer writes its outputs into
ENV_DEVICE = "FLEET_DEVICE"            # "cuda" when the job holds a GPU, else "cpu"
ENV_CHECKPOINT_DIR = "FLEET_CHECKPOINT_DIR"  # the job's checkpoint dir, last synced state restored

GBT_MODEL_FILE = "model.ubj"
MLP_MODEL_FILE = "model.pt"
METRICS_FILE = "metrics.json"
CHECKPOINT_FILE = "checkpoint.json"

EXIT_OK = 0
EXIT_CRASH = 1        # an unexpected exception; the traceback is on stderr
EXIT_BAD_INPUT = 2    # bad data, spec or environment; one clear message is on stderr

METRIC_PREFIX = "FLEET_METRIC "


def format_metric_line(report: dict) -> str:
    """``{"epoch": 3, ...}`` -> ``'FLEET_METRIC {"epoch": 3, ...}'``."""
    return METRIC_PREFIX + json.dumps(report, sort_keys=False)


def parse_metric_line(line: str) -> dict | None:
    """The report on a metric line, or None for any other line (or a malformed one)."""
    if not line.startswith(METRIC_PREFIX):
        return None
    try:
        report = json.loads(line[len(METRIC_PREFIX):])
    except ValueError:
        return None
    return report if isinstance(report, dict) else None
