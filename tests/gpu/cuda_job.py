"""A command job for the GPU suite: what CUDA shows it, and when it used the GPU.

Talks to the driver through ctypes (libcuda), so it needs no CUDA build of torch. Writes
COUNT_DIR/<job name>.json: CUDA_VISIBLE_DEVICES, the device count and first device's UUID
as CUDA sees them, and wall times of process start, first and last GPU work, and exit.
"""

import ctypes
import json
import os
import pathlib
import sys
import time

t_start = time.time()
HOLD_S = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
BYTES = int(os.environ.get("CUDA_JOB_MIB", "256")) << 20  # what it allocates on the GPU
cuda = ctypes.CDLL("libcuda.so.1")


def check(rc: int, what: str) -> None:
    if rc != 0:
        raise SystemExit(f"{what} failed: CUresult {rc}")


def uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


check(cuda.cuInit(0), "cuInit")
count = ctypes.c_int()
check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
raw_uuid = (ctypes.c_char * 16)()
check(cuda.cuDeviceGetUuid(raw_uuid, dev), "cuDeviceGetUuid")
ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(BYTES)), "cuMemAlloc")
check(cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(1), ctypes.c_size_t(BYTES)), "cuMemsetD8")
check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
t_gpu_first = time.time()
deadline = time.monotonic() + HOLD_S
while time.monotonic() < deadline:  # keep the GPU busy, not just holding memory
    check(cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(2), ctypes.c_size_t(BYTES)), "cuMemsetD8")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
t_gpu_last = time.time()
check(cuda.cuMemFree_v2(ptr), "cuMemFree")
check(cuda.cuCtxDestroy_v2(ctx), "cuCtxDestroy")
report = {
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    "count": count.value,
    "uuid": uuid_text(bytes(raw_uuid)),
    "t_start": t_start,
    "t_gpu_first": t_gpu_first,
    "t_gpu_last": t_gpu_last,
    "t_end": time.time(),
}
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/cuda.json").write_text(json.dumps(report))
(pathlib.Path(os.environ["COUNT_DIR"]) / f"{os.environ['FLEET_JOB_NAME']}.json").write_text(
    json.dumps(report)
)
