"""Entry point of a built-in trainer subprocess: ``python -m trainers.run``.

A worker starts it with these environment variables (names in ``trainers.protocol``):

``FLEET_JOB_SPEC``
    Path of a JSON file with at least ``model`` ("gbt" or "mlp"), ``hyper`` (a table checked by
    ``manifest.hyper``), ``seed`` (int), ``data`` (the dataset's source, recorded only),
    ``job_id`` and ``name``.
``FLEET_DATA_PATH``
    Local path of the dataset (.csv or .parquet), already fetched.
``FLEET_OUTPUT_DIR``
    Folder to write into (created if missing).
``FLEET_CHECKPOINT_DIR``
    Optional. The job's checkpoint folder, with its last synced state restored: ``mlp`` saves
    its state there after every epoch and resumes from it (``gbt`` does not checkpoint).
``FLEET_DEVICE``
    "cuda" when the job holds a GPU (the worker sets CUDA_VISIBLE_DEVICES), else "cpu".
    When "cuda" is asked for but no GPU is usable, a warning line is printed and it trains on CPU.

It writes ``model.ubj`` (gbt) or ``model.pt`` (mlp), ``metrics.json`` and ``checkpoint.json``
to the output folder, prints progress lines to stdout, and one line per metric report:
``FLEET_METRIC {"epoch": 3, "epochs": 20, "train_loss": 0.41, "valid_loss": 0.45}``
(gbt reports ``round``/``rounds``/``metric`` instead of ``epoch``/``epochs``).

Exit status: 0 on success, 2 on bad input (data, spec, environment) with one message on stderr,
1 on an unexpected crash with its traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import numpy as np

from core.errors import ConfigError, ManifestError
from manifest.hyper import resolve_hyper
from trainers import data, distributed, protocol

DEVICES = ("cpu", "cuda")
VERSIONED_PACKAGES = ("numpy", "pandas", "pyarrow", "xgboost", "torch")
# the same import under another distribution name: a CPU host's bootstrap installs xgboost-cpu
DISTRIBUTIONS = {"xgboost": ("xgboost", "xgboost-cpu")}
HASH_CHUNK_BYTES = 1 << 20


def main() -> int:
    try:
        return run(os.environ)
    except (data.DataError, ConfigError, ManifestError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return protocol.EXIT_BAD_INPUT


def run(env: dict) -> int:
    spec_path, data_path, output_dir = (
        Path(_env(env, name))
        for name in (protocol.ENV_JOB_SPEC, protocol.ENV_DATA_PATH, protocol.ENV_OUTPUT_DIR)
    )
    spec = read_spec(spec_path)
    model, seed = spec["model"], spec["seed"]
    hyper = resolve_hyper(model, spec.get("hyper") or {})
    if model == "mlp":
        distributed.relaunch(env)  # several GPUs: one process per GPU under torchrun
    world = distributed.world(env)
    say = print if world.main else (lambda *a, **k: None)
    device = pick_device(env.get(protocol.ENV_DEVICE, "cpu"), model, quiet=not world.main)
    seed_everything(seed, torch_too=model == "mlp")
    threads = limit_resources(env, model, device)
    df = data.load_table(data_path)
    say(f"loaded {len(df)} rows x {len(df.columns)} columns from {data_path.name}", flush=True)
    task, classes = decide_task(model, hyper, df)
    train_df, valid_df = data.split(df, hyper["target"], hyper["valid_fraction"], seed)
    train_t = data.to_table(train_df, hyper["target"], classes)
    valid_t = data.to_table(valid_df, hyper["target"], classes)
    procs = f" x {world.size} processes" if world.distributed else ""
    say(
        f"training {model} ({task}) on {device}{procs}: {len(train_df)} train rows, "
        f"{len(valid_df)} valid rows, {len(train_t.feature_names)} features",
        flush=True,
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    trainer = _trainer(model)
    started = time.monotonic()
    # mlp resumes from FLEET_CHECKPOINT_DIR; gbt trains from scratch (a rerun is cheap)
    extra = (
        {"checkpoint_dir": Path(env[protocol.ENV_CHECKPOINT_DIR])}
        if (model == "mlp" and env.get(protocol.ENV_CHECKPOINT_DIR))
        else {}
    )
    if world.distributed:
        extra["world"] = world
    if model == "gbt" and threads:
        extra["threads"] = threads
    metrics = trainer.train(
        train_t,
        valid_t,
        hyper,
        seed=seed,
        device=distributed.start(world, device),
        output_dir=output_dir,
        **extra,
    )
    distributed.finish(world)
    if not world.main:
        return protocol.EXIT_OK
    metrics = {
        "model": model,
        "task": task,
        "device": device,
        "device_requested": env.get(protocol.ENV_DEVICE, "cpu"),
        "processes": world.size,
        "threads": threads,
        "n_train": len(train_df),
        "n_valid": len(valid_df),
        "n_features": len(train_t.feature_names),
        "train_seconds": round(time.monotonic() - started, 3),
        **metrics,
    }
    _write_json(output_dir / protocol.METRICS_FILE, metrics)
    _write_json(
        output_dir / protocol.CHECKPOINT_FILE,
        checkpoint(spec, hyper, train_t, task, data_path, model),
    )
    print(f"done: valid {json.dumps(metrics['valid'])}; wrote {output_dir}", flush=True)
    return protocol.EXIT_OK


def read_spec(path: Path) -> dict:
    """The job spec, with ``model`` and an integer ``seed`` checked."""
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{protocol.ENV_JOB_SPEC}={path}: cannot read JSON: {e}") from e
    if not isinstance(spec, dict) or "model" not in spec:
        raise ConfigError(f"{protocol.ENV_JOB_SPEC}={path}: needs a JSON object with 'model'")
    spec.setdefault("seed", 0)
    if isinstance(spec["seed"], bool) or not isinstance(spec["seed"], int):
        raise ConfigError(
            f"{protocol.ENV_JOB_SPEC}={path}: seed must be an integer, got {spec['seed']!r}"
        )
    return spec


def pick_device(requested: str, model: str, *, quiet: bool = False) -> str:
    """The device to train on: cuda only when asked for and really usable."""
    if requested not in DEVICES:
        raise ConfigError(f"{protocol.ENV_DEVICE}={requested!r}: use one of {', '.join(DEVICES)}")
    if requested == "cuda" and not _cuda_usable(model):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        if not quiet:
            print(
                f"warning: {protocol.ENV_DEVICE}=cuda but no CUDA device is usable here "
                f"(CUDA_VISIBLE_DEVICES={visible}); training on cpu",
                flush=True,
            )
        return "cpu"
    return requested


def limit_resources(env: dict, model: str, device: str) -> int:
    """Use exactly the cores the job holds (FLEET_CORES; 0: as many as the library likes), and
    on a shared GPU no more than the job's VRAM budget (FLEET_GPU_MEMORY_GIB)."""
    threads = int(env.get(protocol.ENV_CORES) or 0)
    if model != "mlp":
        return threads
    import torch

    if threads:
        torch.set_num_threads(threads)
    budget = float(env.get(protocol.ENV_GPU_MEMORY_GIB) or 0)
    if budget > 0 and device == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory / (1 << 30)
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), 0)
        print(f"capped at {budget:g} GiB of the GPU's {total:.0f} GiB (share_gpu)", flush=True)
    return threads


def seed_everything(seed: int, *, torch_too: bool) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if torch_too:
        import torch

        torch.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def decide_task(model: str, hyper: dict, df) -> tuple[str, tuple]:
    """('classification', classes) or ('regression', ()) from the hyper and the labels."""
    data.check_target(df, hyper["target"])
    labels = df[hyper["target"]]
    if model == "gbt":
        from trainers.gbt import task_of

        task = task_of(hyper["objective"]) or data.infer_task(labels)
    else:
        task = data.infer_task(labels) if hyper["task"] == "auto" else hyper["task"]
    if task == "regression":
        return task, ()
    classes = data.label_classes(labels)
    if len(classes) < 2:
        raise data.DataError(
            f"target column {hyper['target']!r} has {len(classes)} class(es); "
            "classification needs at least 2"
        )
    return task, classes


def checkpoint(
    spec: dict, hyper: dict, table: data.Table, task: str, data_path: Path, model: str
) -> dict:
    model_file = protocol.GBT_MODEL_FILE if model == "gbt" else protocol.MLP_MODEL_FILE
    return {
        "trainer": model,
        "model_file": model_file,
        "task": task,
        "job_id": spec.get("job_id"),
        "name": spec.get("name"),
        "versions": {"python": sys.version.split()[0], **_versions()},
        "hyper": hyper,
        "seed": spec["seed"],
        "feature_names": list(table.feature_names),
        "classes": list(table.classes),
        "data": spec.get("data"),
        "data_sha256": sha256_file(data_path),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _versions() -> dict[str, str | None]:
    found = {}
    for name in VERSIONED_PACKAGES:
        found[name] = None
        for dist in DISTRIBUTIONS.get(name, (name,)):
            try:
                found[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def _env(env: dict, name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise ConfigError(f"{name} is not set; the worker must set it to a path")
    return value


def _trainer(model: str):
    # Imported here so a bad spec fails fast, before torch or xgboost loads.
    if model == "gbt":
        from trainers import gbt

        return gbt
    from trainers import mlp

    return mlp


def _cuda_usable(model: str) -> bool:
    if model == "gbt":
        from trainers.gbt import cuda_usable

        return cuda_usable()
    import torch

    return torch.cuda.is_available()


def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=False) + "\n")


if __name__ == "__main__":
    sys.exit(main())
