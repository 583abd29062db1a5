"""What the GPU suite (tests/gpu/) shares: why a host cannot run it, NVML's view of a GPU,
the CUDA builds present, a trainer run on a GPU and the manifests of CUDA command jobs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from routing.detect import detect_raw

ROOT = Path(__file__).resolve().parents[2]
GPU_TESTS = ROOT / "tests" / "gpu"
CUDA_JOB = GPU_TESTS / "cuda_job.py"
OWNER_CUDA = GPU_TESTS / "owner_cuda.py"
NVML_LISTS_WITHIN_S = 10.0
MOONS = ROOT / "examples" / "data" / "moons.csv"


def no_gpu_reason() -> str | None:
    """Why this host cannot run the GPU suite, or None when it can."""
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU: nvidia-smi is not on PATH"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception as e:  # no driver, no library
        return f"no NVIDIA GPU: NVML does not start ({e})"
    return None if count else "no NVIDIA GPU: NVML sees none"


NO_GPU = no_gpu_reason()


def smi(*fields: str) -> list[list[str]]:
    """One row per GPU of ``nvidia-smi --query-gpu=FIELDS``."""
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines()]


def mig_enabled() -> bool:
    import pynvml

    pynvml.nvmlInit()
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                current, _ = pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(i))
            except pynvml.NVMLError:  # a GPU without MIG support
                continue
            if current:
                return True
        return False
    finally:
        pynvml.nvmlShutdown()


def needs_whole_gpus() -> None:
    if mig_enabled():
        pytest.skip(
            "a GPU is in MIG mode: fleet hands out whole GPUs (CUDA_VISIBLE_DEVICES=GPU-uuid)"
        )


def gpu_pids(uuid: str) -> set[int]:
    """The pids NVML lists on the GPU with this UUID (compute processes)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        return {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
    finally:
        pynvml.nvmlShutdown()


def nvml_hides_our_pids(uuid: str) -> str | None:
    """Why NVML's process list on this GPU cannot be matched to our pids, or None when it can:
    a CUDA process of the test's own must show there under its pid. In a container without
    the host's PID namespace NVML names the host's pids, so no VRAM budget can be watched."""
    proc = subprocess.Popen(
        [sys.executable, str(OWNER_CUDA), "60"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": uuid},
    )
    try:
        assert proc.stdout.readline().strip() == "ready", "the probe CUDA process did not start"
        deadline = time.monotonic() + NVML_LISTS_WITHIN_S
        while proc.pid not in (pids := gpu_pids(uuid)):
            if time.monotonic() > deadline:
                return (
                    f"NVML lists pids {sorted(pids)} on {uuid}, "
                    f"not our CUDA process's {proc.pid}: this "
                    "PID namespace is not the host's, "
                    "so VRAM budgets cannot be watched (docs/limits.md)"
                )
            time.sleep(0.1)
        return None
    finally:
        proc.kill()
        proc.wait()


def needs_visible_pids(uuid: str) -> None:
    hidden = nvml_hides_our_pids(uuid)
    if hidden:
        pytest.skip(hidden)


def torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.version.cuda is not None and torch.cuda.is_available()


def xgboost_cuda() -> bool:
    try:
        from trainers.gbt import cuda_usable
    except ImportError:
        return False
    return cuda_usable()


def run_trainer(tmp_path: Path, model: str, hyper: dict, visible: str = "0") -> dict:
    spec = tmp_path / f"{model}.json"
    spec.write_text(
        json.dumps(
            {
                "model": model,
                "hyper": hyper,
                "seed": 0,
                "data": MOONS.name,
                "job_id": "gpu",
                "name": f"{model}-gpu",
            }
        )
    )
    env = {
        **os.environ,
        "FLEET_JOB_SPEC": str(spec),
        "FLEET_DATA_PATH": str(MOONS),
        "FLEET_OUTPUT_DIR": str(tmp_path / model),
        "FLEET_DEVICE": "cuda",
        "CUDA_VISIBLE_DEVICES": visible,
    }
    done = subprocess.run(
        [sys.executable, "-m", "trainers.run"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((tmp_path / model / "metrics.json").read_text())


def cuda_manifest(chaos, jobs: dict[str, float], needs: str = "require_cuda = true\n") -> Path:
    text = ""
    for seed, (name, hold_s) in enumerate(jobs.items()):  # a seed each: jobs that differ only
        # in name are one job to the manifest (same content, same ID)
        text += (
            f'[[jobs]]\nname = "{name}"\n'
            f'command = ["{sys.executable}", "{CUDA_JOB}", "{hold_s}", "{chaos.tag}"]\n'
            f'artifacts = ["out/*"]\n{needs}seed = {seed}\n'
        )
    path = chaos.root / f"m-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(text)
    return path


def reports(chaos, names) -> dict[str, dict]:
    return {n: json.loads((chaos.counts / f"{n}.json").read_text()) for n in names}


def fewer_than_two_gpus() -> str | None:
    if NO_GPU is not None:
        return NO_GPU
    count = len(detect_raw().cuda_devices)
    return None if count >= 2 else f"needs 2 GPUs: this host has {count}"


TOO_FEW = fewer_than_two_gpus()


SHARING = "require_cuda = true\nshare_gpu = true\nmin_vram_gib = 2\n"
