"""What a worker and a trainer subprocess agree on: env vars, file names, exit codes, metric lines.

Pure, so the worker's parent process can parse trainer output without torch or xgboost.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from core import constants as C

ENV_JOB_ID = "FLEET_JOB_ID"  # the job's content ID (64 hex characters)
ENV_JOB_NAME = "FLEET_JOB_NAME"  # its name in the manifest, e.g. "gbt-small[seed=1]"
ENV_HYPER = "FLEET_HYPER"  # its hyperparameters as JSON
ENV_SEED = "FLEET_SEED"  # its seed, an integer
ENV_JOB_SPEC = "FLEET_JOB_SPEC"  # path of a JSON file: model, hyper, seed, data, job_id, name
ENV_DATA_PATH = "FLEET_DATA_PATH"  # local path of the dataset, already fetched
# a pipeline follower's inputs: one folder per upstream, <dir>/ holding its bundle's files
ENV_INPUTS = "FLEET_INPUTS"
ENV_OUTPUT_DIR = "FLEET_OUTPUT_DIR"  # folder the trainer writes its outputs into
ENV_DEVICE = "FLEET_DEVICE"  # "cuda" when the job holds a GPU, else "cpu"
ENV_CHECKPOINT_DIR = "FLEET_CHECKPOINT_DIR"  # the job's checkpoint dir, last synced state restored
ENV_GPUS = "FLEET_GPUS"  # how many GPUs the job holds (CUDA_VISIBLE_DEVICES lists them)
ENV_CORES = "FLEET_CORES"  # how many cores it holds: use that many threads
ENV_GPU_MEMORY_GIB = "FLEET_GPU_MEMORY_GIB"  # its VRAM budget on a GPU it shares (share_gpu)
ENV_CPU_AFFINITY = "FLEET_CPU_AFFINITY"  # the cores it is pinned to, e.g. "4,5" (Linux)
ENV_NODES = "FLEET_NODES"  # how many hosts its gang spans (nodes = N), beside torch's variables
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
# Bounds on what one job's output can put in its record (docs/results.md)
MAX_METRIC_LINE_CHARS = 65_536  # a longer FLEET_METRIC line is a bad line, not read
MAX_METRIC_KEYS = 100  # keys kept of one report (and of a job's metrics)
MAX_METRIC_KEY_CHARS = 100
MAX_METRIC_TEXT_CHARS = 200  # a text value (or a list's JSON) is clipped to this
MAX_OUTPUT_LINE_CHARS = 4_096  # an output line in a record's tail (as `fleet logs` clips)
# a step past this is no longer exact as a float (JSON, plots) nor safe in an export's INTEGER
MAX_STEP = 2**53
CUT_KEY = "fleet_cut"  # set in a job's metrics when the bounds cut something


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
    inputs: Path | None = None,
) -> dict[str, str]:
    """The variables a worker sets for a job: ``gpu_ids`` the GPUs it holds (UUIDs), ``cores``
    the cores it is pinned to, ``gpu_memory_gib`` its budget on a shared GPU (0: whole GPUs),
    ``inputs`` a pipeline follower's folder of upstream bundles (unset for other jobs)."""
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
    if inputs is not None:
        env[ENV_INPUTS] = str(inputs)
    return env


def format_metric_line(report: dict) -> str:
    """``{"epoch": 3, ...}`` -> ``'FLEET_METRIC {"epoch": 3, ...}'``."""
    return METRIC_PREFIX + json.dumps(report, sort_keys=False)


class LineError(str, Enum):
    """Why a line that holds ``FLEET_METRIC `` carries no report (docs/results.md)."""

    TOO_LONG = "longer than the limit"
    NOT_JSON = "not JSON"
    NOT_OBJECT = "JSON but not an object"
    TOO_DEEP = "JSON nested too deeply"
    BAD_STEP = "a step outside 0..2^53"


@dataclass(frozen=True)
class MetricLine:
    """One ``FLEET_METRIC`` line read: its report (clipped, ``clip_report``), or why none."""

    report: dict | None
    error: LineError | None = None
    cut: bool = False  # the report lost keys or long values to the bounds


@dataclass(frozen=True)
class Point:
    """What one metric line adds to a job's curves: its step (``step_of``) and its numeric
    values, a non-finite one as the text ``"nan"``, ``"inf"`` or ``"-inf"``."""

    step: int
    values: dict[str, float | int | str]
    t: float = 0.0  # when the worker read it (time.time())

    def value(self, metric: str) -> float | None:
        """The metric's value on this line as a float (nan and infinities too), else None."""
        v = self.values.get(metric)
        return None if v is None else float(v)


def read_metric_line(line: str) -> MetricLine | None:
    """The report on a ``FLEET_METRIC`` line, or why it has none; None for any other line.
    The line starts at the prefix, whatever came before it (a progress bar left open prints
    its last state there). Never raises: a hostile line (megabytes, deep nesting, binary) is
    an error, not a crash."""
    at = line.find(METRIC_PREFIX)
    if at < 0:
        return None
    text = line[at + len(METRIC_PREFIX) :]
    if len(text) > MAX_METRIC_LINE_CHARS:
        return MetricLine(None, LineError.TOO_LONG)
    try:
        report = json.loads(text)
    except RecursionError:
        return MetricLine(None, LineError.TOO_DEEP)
    except ValueError:  # also an integer of more digits than Python converts
        return MetricLine(None, LineError.NOT_JSON)
    if not isinstance(report, dict):
        return MetricLine(None, LineError.NOT_OBJECT)
    clipped, cut = clip_report(report)
    if not _step_in_range(clipped):
        return MetricLine(None, LineError.BAD_STEP)
    return MetricLine(clipped, cut=cut)


def _step_in_range(report: dict) -> bool:
    """Whether the step ``step_of`` takes from ``report`` (when it names one) lies in
    0..``MAX_STEP``: 1e20 would pass to every reader of the history, and an export fails."""
    for k in C.METRIC_STEP_KEYS:
        v = report.get(k)
        if not _number(v) or v != v:  # not a number, or NaN: step_of looks further
            continue
        try:
            return 0 <= math.floor(v) <= MAX_STEP
        except OverflowError:  # an infinity
            return False
    return True


def parse_metric_line(line: str) -> dict | None:
    """The report on a metric line, or None for any other line (or a malformed one)."""
    got = read_metric_line(line)
    return got.report if got is not None else None


def clip_text(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} characters cut]"


def _scalar(v) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def clip_report(report: dict) -> tuple[dict, bool]:
    """A report within the bounds of a job's record: its first ``MAX_METRIC_KEYS`` keys, each
    key and text value clipped, a list or object kept as its clipped JSON text. Pure."""
    out: dict = {}
    cut = len(report) > MAX_METRIC_KEYS
    for k, v in list(report.items())[:MAX_METRIC_KEYS]:
        key = clip_text(str(k), MAX_METRIC_KEY_CHARS)
        if not _scalar(v):
            try:
                v = json.dumps(v)
            except (ValueError, RecursionError):
                v = "[unreadable]"
        if isinstance(v, str) and len(v) > MAX_METRIC_TEXT_CHARS:
            v, cut = clip_text(v, MAX_METRIC_TEXT_CHARS), True
        cut = cut or key != k
        out[key] = v
    return out, cut


def clip_metrics(metrics: dict) -> dict:
    """A job's metrics (its last report of each key, metrics.json) within the record's
    bounds; ``fleet_cut`` says so when something was cut."""
    clipped, cut = clip_report(metrics)
    # the record is JSON for every reader (Flower's page too): no bare NaN in it
    clipped = {k: _value(v) if isinstance(v, float) else v for k, v in clipped.items()}
    return {**clipped, CUT_KEY: True} if cut else clipped


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite_int(v) -> int | None:
    if not _number(v):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return math.floor(f) if math.isfinite(f) else None


def step_of(report: dict, count: int) -> int:
    """THE step of a metric line: the first of ``step``, ``epoch``, ``round`` that holds a
    finite number, rounded down (epoch 1.5 is step 1), else ``count``: the 1-based number of
    the run's metric lines so far. Pure."""
    for k in C.METRIC_STEP_KEYS:
        step = _finite_int(report.get(k))
        if step is not None:
            return step
    return count


def _value(v) -> float | int | str:
    """A number as a point keeps it: an int or float, a non-finite one as its text."""
    if isinstance(v, int) and abs(v) > 2**53:
        try:
            v = float(v)
        except OverflowError:
            return "inf" if v > 0 else "-inf"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def point_of(report: dict, count: int, t: float = 0.0) -> Point | None:
    """The point a metric line makes: its step and numeric values (not ``step`` itself), or
    None when it has no numeric value. Pure."""
    values = {k: _value(v) for k, v in report.items() if _number(v) and k != "step"}
    if not values:
        return None
    return Point(step_of(report, count), values, t)
