"""A GPU host whose NVML does not start is not turned silently into a CPU host: detection
warns whenever NVIDIA devices or a driver are present (routing.detect, routing.capability)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from fleet.cli.hosts import render_hosts
from fleet.query.hosts import HostView
from routing import detect
from routing.capability import Capability, apply_override, nvml_warning

NOW = 1_700_000_000.0


def test_nvml_failing_where_there_is_no_nvidia_device_or_driver_is_a_plain_cpu_host():
    assert nvml_warning("NVMLError_LibraryNotFound: NVML Shared Library Not Found", []) is None


def test_nvml_failing_beside_nvidia_devices_names_them_the_error_and_what_to_check():
    said = nvml_warning(
        "NVMLError_DriverNotLoaded: Driver Not Loaded", ["/dev/nvidia0", "/dev/nvidiactl"]
    )
    assert "NVML failed to start (NVMLError_DriverNotLoaded: Driver Not Loaded)" in said
    assert "/dev/nvidia0, /dev/nvidiactl are present" in said
    assert "serves as a CPU host" in said and "nvidia-smi" in said


@pytest.fixture
def nvidia_driver_dir(tmp_path, monkeypatch):
    """A host with the NVIDIA driver's /proc directory but no NVML library (this machine's)."""
    driver = tmp_path / "proc-driver-nvidia"
    driver.mkdir()
    monkeypatch.setattr(detect, "NVIDIA_DRIVER", str(driver))
    monkeypatch.setattr(detect, "NVIDIA_DEVICES", str(tmp_path / "dev-nvidia*"))
    return driver


def test_detection_on_a_host_with_a_driver_but_no_working_nvml_warns(nvidia_driver_dir):
    pytest.importorskip("pynvml")
    cap = detect.detect_raw()
    if cap.cuda_devices:
        pytest.skip("NVML works on this host")
    assert len(cap.warnings) == 1 and str(nvidia_driver_dir) in cap.warnings[0]
    assert Capability.from_dict(cap.to_dict()).warnings == cap.warnings  # through a heartbeat


def test_declared_gpus_make_the_nvml_warning_moot():
    cap = Capability("h", 4, 8.0, 8.0, warnings=("NVML failed to start",))
    declared = apply_override(cap, {"cuda_devices": [{"name": "sim", "vram_total_gib": 16}]})
    assert declared.warnings == () and declared.overridden == ("cuda_devices",)


def test_fleet_hosts_shows_each_live_workers_warnings_under_the_table_at_80_columns():
    warned = HostView(
        "gpu1",
        "up",
        NOW - 2,
        "gpu1@x",
        Capability("gpu1", 8, 32.0, 32.0).to_dict(),
        warnings=(
            "NVML failed to start (NVMLError_DriverNotLoaded: Driver Not Loaded) although "
            "/proc/driver/nvidia is present: this host's GPUs are not detected",
        ),
    )
    gone = HostView("gpu2", "lost", NOW - 90, warnings=("stale",))
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(render_hosts([warned, gone], NOW, width=80))
    text = " ".join(console.export_text().split())
    assert "gpu1: warning: NVML failed to start (NVMLError_DriverNotLoaded" in text
    assert "stale" not in text
    assert warned.to_dict(NOW)["warnings"] == list(warned.warnings)
