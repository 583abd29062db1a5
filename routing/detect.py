"""Detect this host's capability with psutil and NVML.

Never imports torch or initialises CUDA: the worker's parent process must stay light
and safe to fork.
"""

from __future__ import annotations

import glob
import os
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import psutil

from routing.capability import Capability, CudaDevice, from_environment, nvml_warning

GIB = 1024**3
VERSIONED = ("celery", "kombu", "redis", "zstandard", "xgboost", "torch", "numpy", "nvidia-ml-py")


NVIDIA_DEVICES = "/dev/nvidia*"
NVIDIA_DRIVER = "/proc/driver/nvidia"


def nvidia_evidence() -> list[str]:
    """The NVIDIA device files and driver directory present on this host."""
    return sorted(glob.glob(NVIDIA_DEVICES)) + (
        [NVIDIA_DRIVER] if os.path.isdir(NVIDIA_DRIVER) else []
    )


def _cuda_devices() -> tuple[tuple[CudaDevice, ...], str | None, str | None]:
    """The devices, the driver version, and a warning if NVML failed where a GPU is present."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # no driver, no library, no GPU: a CPU host, unless NVIDIA is there
        return (), None, nvml_warning(f"{type(e).__name__}: {e}", nvidia_evidence())
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                cc = f"{major}.{minor}"
            except Exception:
                cc = None
            name = pynvml.nvmlDeviceGetName(h)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            devices.append(
                CudaDevice(
                    i,
                    name.decode() if isinstance(name, bytes) else name,
                    round(mem.total / GIB, 2),
                    round(mem.free / GIB, 2),
                    cc,
                    uuid.decode() if isinstance(uuid, bytes) else uuid,
                )
            )
        return tuple(devices), driver.decode() if isinstance(driver, bytes) else driver, None
    finally:
        pynvml.nvmlShutdown()


def _versions() -> dict[str, str]:
    out = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _git_commit() -> str | None:
    try:
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return res.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def detect_raw() -> Capability:
    """What the hardware says, before any override."""
    vm = psutil.virtual_memory()
    devices, driver, warning = _cuda_devices()
    return Capability(
        hostname=socket.gethostname(),
        cpu_cores=psutil.cpu_count(logical=False) or os.cpu_count() or 1,
        ram_total_gib=round(vm.total / GIB, 2),
        ram_available_gib=round(vm.available / GIB, 2),
        cuda_devices=devices,
        driver_version=driver,
        versions=_versions(),
        git_commit=_git_commit(),
        warnings=(warning,) if warning else (),
    )


def detect() -> Capability:
    """This host's capability, with FLEET_CAPABILITY / FLEET_HOSTNAME applied."""
    return from_environment(detect_raw())
