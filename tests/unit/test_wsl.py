"""Windows GPUs through WSL2: detection and the Scheduled Task script (fleet.wsl)."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from fleet.wsl import NVML_LIB, TaskPlan, detect, render_task_script, start_command

WSL2_KERNEL = "5.15.167.4-microsoft-standard-WSL2\n"


def test_wsl2_is_detected_from_the_kernel_release_with_its_distribution():
    info = detect(WSL2_KERNEL, {"WSL_DISTRO_NAME": "Ubuntu-24.04"}, nvml_present=True)
    assert info.distro == "Ubuntu-24.04" and info.nvml
    assert NVML_LIB == "/usr/lib/wsl/lib/libnvidia-ml.so.1"


@pytest.mark.parametrize(
    "osrelease, env",
    [
        ("6.8.0-49-generic", {}),  # plain Linux
        ("4.4.0-19041-Microsoft", {}),  # WSL1: no GPU there
    ],
)
def test_anything_but_wsl2_is_not_wsl2(osrelease, env):
    assert detect(osrelease, env, nvml_present=False) is None


def test_the_logon_task_starts_the_distributions_worker_and_keeps_it_running():
    script = render_task_script(
        TaskPlan("Ubuntu", "root", start_command(True, "fleet-worker.service"))
    )
    assert "#requires -RunAsAdministrator" in script
    assert (
        "New-ScheduledTaskAction -Execute 'wsl.exe' -Argument '-d Ubuntu -u root -- bash -c "
        '"systemctl start fleet-worker.service && exec sleep infinity"\'' in script
    )
    assert "New-ScheduledTaskTrigger -AtLogOn" in script
    assert "-RestartCount 999" in script and "-ExecutionTimeLimit ([TimeSpan]::Zero)" in script
    assert "Register-ScheduledTask -TaskName 'fleet-worker'" in script and "-Force" in script
    assert script.endswith("\r\n") and "\n" not in script.replace("\r\n", "")


def test_the_boot_task_runs_as_system_before_anyone_logs_on():
    script = render_task_script(
        TaskPlan(
            "Debian",
            "fleet",
            start_command(False, "", "/home/fleet/fleet/.venv/bin/celery", "/home/fleet/fleet"),
            trigger="boot",
        )
    )
    assert "-AtStartup" in script and "-UserId 'SYSTEM'" in script
    assert (
        "cd /home/fleet/fleet && exec /home/fleet/fleet/.venv/bin/celery -A tasks worker" in script
    )


@pytest.mark.parametrize(
    "plan",
    [
        TaskPlan("Ubuntu; rm -rf /", "root", "true"),
        TaskPlan("Ubuntu", "root'x", "true"),
        TaskPlan("Ubuntu", "root", 'echo "x"'),
        TaskPlan("Ubuntu", "root", "true", trigger="hourly"),
    ],
)
def test_values_that_could_break_out_of_the_script_are_refused(plan):
    with pytest.raises(ConfigError):
        render_task_script(plan)


# --- what `fleet enroll --wsl` decides (fleet.wsl.enrollment) -------------------------------
def test_enrolling_in_wsl2_with_systemd_gives_a_task_that_starts_the_workers_unit():
    from fleet.wsl import enrollment

    info, script = enrollment(
        WSL2_KERNEL, {"WSL_DISTRO_NAME": "Ubuntu"}, True, True, "fleet-worker.service"
    )
    assert info.distro == "Ubuntu" and info.nvml
    assert (
        '-d Ubuntu -u root -- bash -c "systemctl start fleet-worker.service && exec sleep infinity"'
        in script
    )
    assert "-AtLogOn" in script


def test_a_boot_task_for_a_named_distribution_and_a_logon_task_for_one_windows_user():
    from fleet.wsl import enrollment

    _, boot = enrollment(
        WSL2_KERNEL, {"WSL_DISTRO_NAME": "Debian"}, False, True, "fleet-worker.service", "boot"
    )
    assert "-d Debian" in boot and "-AtStartup" in boot
    _, logon = enrollment(WSL2_KERNEL, {}, True, True, "fleet-worker.service", "logon", "PC\\alice")
    assert "-AtLogOn -User 'PC\\alice'" in logon


def test_nvml_is_looked_for_where_the_windows_driver_maps_it():
    info = detect(WSL2_KERNEL, {}, nvml_present=False)
    assert info is not None and not info.nvml
    from fleet.wsl import WSL_LIB_DIR

    assert NVML_LIB.startswith(WSL_LIB_DIR + "/") and WSL_LIB_DIR == "/usr/lib/wsl/lib"


def test_a_wsl2_kernel_without_the_wsl2_suffix_is_known_by_wsl_interop():
    assert (
        detect("5.10.16.3-microsoft-standard", {"WSL_INTEROP": "/run/WSL/1_interop"}, True)
        is not None
    )
    assert detect("5.10.16.3-microsoft-standard", {}, True) is None


@pytest.mark.parametrize(
    "osrelease, systemd, says",
    [
        ("6.8.0-49-generic", True, "not a WSL2 distribution"),
        ("4.4.0-19041-Microsoft", True, "WSL1 has no GPU"),
        (WSL2_KERNEL, False, "systemd=true"),
    ],
)
def test_enrolling_outside_wsl2_or_without_systemd_says_what_to_do(osrelease, systemd, says):
    from fleet.wsl import enrollment

    with pytest.raises(ConfigError, match=says):
        enrollment(osrelease, {}, True, systemd, "fleet-worker.service")


def test_windows_finds_the_script_under_the_distributions_unc_path():
    from fleet.wsl import windows_path

    assert (
        windows_path("Ubuntu-24.04", "/etc/fleet/fleet-worker-task.ps1")
        == "\\\\wsl.localhost\\Ubuntu-24.04\\etc\\fleet\\fleet-worker-task.ps1"
    )
