"""Hand out this host's GPUs: one job per GPU, the smallest device that fits first."""
from __future__ import annotations

import threading

from routing.capability import CudaDevice


class GpuSlots:
    def __init__(self, devices: tuple[CudaDevice, ...]):
        self._devices = sorted(devices, key=lambda d: d.vram_total_gib)
        self._busy: set[int] = set()
        self._cond = threading.Condition()

    def acquire(self, min_vram_gib: float, stop: threading.Event, poll_s: float = 1.0) -> CudaDevice | None:
        """Block until a free device with enough VRAM; None if ``stop`` is set first."""
        with self._cond:
            while not stop.is_set():
                for dev in self._devices:
                    if dev.index not in self._busy and dev.vram_total_gib >= min_vram_gib:
                        self._busy.add(dev.index)
                        return dev
                self._cond.wait(poll_s)
        return None

    def release(self, dev: CudaDevice) -> None:
        with self._cond:
            self._busy.discard(dev.index)
            self._cond.notify_all()

    def visible_id(self, dev: CudaDevice) -> str:
        """What CUDA_VISIBLE_DEVICES should say so the job sees only this device."""
        return dev.uuid or str(dev.index)
