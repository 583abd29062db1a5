"""Detect this host's capability with psutil and NVML.

Never imports torch or initialises CUDA: the worker's parent process must stay light
and safe to fork.
"""
from __future__ import annotations

import os
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import psutil

from routing.capability import Capability, CudaDevice, from_environment

GIB = 1024 ** 3
VERSIONED = ("celery", "kombu", "redis", "zstandard", "xgboost", "torch", "numpy", "nvidia-ml-py")


def _cuda_devices() -> tuple[tuple[CudaDevice, ...], str | None]:
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # no driver, no library, no GPU: a CPU host
        return (), None
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
            devices.append(CudaDevice(i, name.decode() if isinstance(name, bytes) else name,
                                      round(mem.total / GIB, 2), round(mem.free / GIB, 2), cc,
                                      uuid.decode() if isinstance(uuid, bytes) else uuid))
        return tuple(devices), driver.decode() if isinstance(driver, bytes) else driver
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
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=5)
        return res.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def detect_raw() -> Capability:
    """What the hardware says, before any override."""
    vm = psutil.virtual_memory()
    devices, driver = _cuda_devices()
    return Capability(
        hostname=socket.gethostname(),
        cpu_cores=psutil.cpu_count(logical=False) or os.cpu_count() or 1,
        ram_total_gib=round(vm.total / GIB, 2), ram_available_gib=round(vm.available / GIB, 2),
        cuda_devices=devices, driver_version=driver, versions=_versions(), git_commit=_git_commit())


def detect() -> Capability:
    """This host's capability, with FLEET_CAPABILITY / FLEET_HOSTNAME applied."""
    return from_environment(detect_raw())
