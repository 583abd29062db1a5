"""A command job for the multi-GPU tests: what it was given, what CUDA shows it, who leads it.

``multi_gpu_job.py HOLD_S [cuda]``: writes COUNT_DIR/<job name>.json with FLEET_GPUS,
CUDA_VISIBLE_DEVICES, FLEET_CORES and FLEET_CPU_AFFINITY, the cores it may run on, its process
group and its parent's command line (the supervisor), and a grandchild's process group. With
``cuda`` (a real GPU host) it also opens every device CUDA shows it, through ctypes (libcuda:
no CUDA build of torch needed), and reports each one's UUID. Standard library only.
"""

import ctypes
import json
import os
import pathlib
import subprocess
import sys
import time


def uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def cuda_uuids() -> list[str]:
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0, "cuInit failed"
    count = ctypes.c_int()
    assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
    out = []
    for i in range(count.value):
        dev, raw = ctypes.c_int(), (ctypes.c_char * 16)()
        assert cuda.cuDeviceGet(ctypes.byref(dev), i) == 0 and cuda.cuDeviceGetUuid(raw, dev) == 0
        out.append(uuid_text(bytes(raw)))
    return out


def parent_cmdline() -> str:
    try:
        return (
            pathlib.Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        )
    except OSError:
        return ""


grandchild = subprocess.run(
    [sys.executable, "-c", "import os; print(os.getpgid(0))"],
    capture_output=True,
    text=True,
    check=True,
)
report = {
    "gpus": os.environ.get("FLEET_GPUS"),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    "cores": os.environ.get("FLEET_CORES"),
    "affinity_env": os.environ.get("FLEET_CPU_AFFINITY", ""),
    "affinity": sorted(os.sched_getaffinity(0)),
    "pid": os.getpid(),
    "pgid": os.getpgid(0),
    "ppid": os.getppid(),
    "parent": parent_cmdline(),
    "grandchild_pgid": int(grandchild.stdout),
    "cuda_uuids": cuda_uuids() if "cuda" in sys.argv[2:] else None,
}
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
(pathlib.Path(os.environ["COUNT_DIR"]) / f"{os.environ['FLEET_JOB_NAME']}.json").write_text(
    json.dumps(report)
)
