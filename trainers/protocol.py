"""What a worker and a trainer subprocess agree on: env vars, file names, exit codes, metric lines.

Pure, so the worker's parent process can parse trainer output without torch or xgboost.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

ENV_JOB_ID = "FLEET_JOB_ID"  # the job's content ID (64 hex characters)
ENV_JOB_NAME = "FLEET_JOB_NAME"  # its name in the manifest, e.g. "gbt-small[seed=1]"
ENV_HYPER = "FLEET_HYPER"  # its hyperparameters as JSON
ENV_SEED = "FLEET_SEED"  # its seed, an integer
ENV_JOB_SPEC = "FLEET_JOB_SPEC"  # path of a JSON file: model, hyper, seed, data, job_id, name
ENV_DATA_PATH = "FLEET_DATA_PATH"  # local path of the dataset, already fetched
ENV_OUTPUT_DIR = "FLEET_OUTPUT_DIR"  # folder the trainer writes its outputs into
ENV_DEVICE = "FLEET_DEVICE"  # "cuda" when the job holds a GPU, else "cpu"
ENV_CHECKPOINT_DIR = "FLEET_CHECKPOINT_DIR"  # the job's checkpoint dir, last synced state restored
ENV_GPUS = "FLEET_GPUS"  # how many GPUs the job holds (CUDA_VISIBLE_DEVICES lists them)
ENV_CORES = "FLEET_CORES"  # how many cores it holds: use that many threads
ENV_GPU_MEMORY_GIB = "FLEET_GPU_MEMORY_GIB"  # its VRAM budget on a GPU it shares (share_gpu)
ENV_CPU_AFFINITY = "FLEET_CPU_AFFINITY"  # the cores it is pinned to, e.g. "4,5" (Linux)
# thread pools of numeric libraries, each told the job's cores
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)

GBT_MODEL_FILE = "model.ubj"
MLP_MODEL_FILE = "model.pt"
METRICS_FILE = "metrics.json"
CHECKPOINT_FILE = "checkpoint.json"

EXIT_OK = 0
EXIT_CRASH = 1  # an unexpected exception; the traceback is on stderr
EXIT_BAD_INPUT = 2  # bad data, spec or environment; one clear message is on stderr

METRIC_PREFIX = "FLEET_METRIC "


def job_environment(
    *,
    job_id: str,
    name: str,
    spec: Path,
    output_dir: Path,
    hyper: dict,
    seed: int,
    data_path: Path | None,
    gpu_ids: Sequence[str] = (),
    cores: Sequence[int] = (),
    gpu_memory_gib: float = 0.0,
) -> dict[str, str]:
    """The variables a worker sets for a job: ``gpu_ids`` the GPUs it holds (UUIDs), ``cores``
    the cores it is pinned to, ``gpu_memory_gib`` its budget on a shared GPU (0: whole GPUs)."""
    env = {
        ENV_JOB_ID: job_id,
        ENV_JOB_NAME: name,
        ENV_JOB_SPEC: str(spec),
        ENV_OUTPUT_DIR: str(output_dir),
        ENV_HYPER: json.dumps(hyper),
        ENV_SEED: str(seed),
        ENV_DATA_PATH: str(data_path or ""),
        ENV_DEVICE: "cuda" if gpu_ids else "cpu",
        "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids),
        ENV_GPUS: str(len(gpu_ids)),
        # metric lines reach the worker as they are printed, not when a buffer fills
        "PYTHONUNBUFFERED": "1",
    }
    if cores:
        env[ENV_CORES] = str(len(cores))
        env[ENV_CPU_AFFINITY] = ",".join(str(c) for c in cores)
        env.update({var: str(len(cores)) for var in THREAD_VARS})
    if gpu_memory_gib > 0:
        env[ENV_GPU_MEMORY_GIB] = f"{gpu_memory_gib:g}"
    return env


def format_metric_line(report: dict) -> str:
    """``{"epoch": 3, ...}`` -> ``'FLEET_METRIC {"epoch": 3, ...}'``."""
    return METRIC_PREFIX + json.dumps(report, sort_keys=False)


def parse_metric_line(line: str) -> dict | None:
    """The report on a metric line, or None for any other line (or a malformed one)."""
    if not line.startswith(METRIC_PREFIX):
        return None
    try:
        report = json.loads(line[len(METRIC_PREFIX) :])
    except ValueError:
        return None
    return report if isinstance(report, dict) else None
