"""The host's owner on a real GPU: a plain CUDA process fleet did not start. Creates a context
on CUDA device 0, holds some memory, says "ready" once NVML can list it, then waits to be killed."""

import ctypes
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
for rc, what in (
    (cuda.cuInit(0), "cuInit"),
    (cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet"),
    (cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate"),
    (cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(256 << 20)), "cuMemAlloc"),
):
    if rc != 0:
        raise SystemExit(f"{what} failed: CUresult {rc}")
print("ready", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 300)
