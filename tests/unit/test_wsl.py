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


@pytest.mark.parametrize("osrelease, env", [
    ("6.8.0-49-generic", {}),                           # plain Linux
    ("4.4.0-19041-Microsoft", {}),                      # WSL1: no GPU there
])
def test_anything_but_wsl2_is_not_wsl2(osrelease, env):
    assert detect(osrelease, env, nvml_present=False) is None


def test_the_logon_task_starts_the_distributions_worker_and_keeps_it_running():
    script = render_task_script(TaskPlan("Ubuntu", "root", start_command(True, "fleet-worker.service")))
    assert "#requires -RunAsAdministrator" in script
    assert "New-ScheduledTaskAction -Execute 'wsl.exe' -Argument '-d Ubuntu -u root -- bash -c " \
           "\"systemctl start fleet-worker.service && exec sleep infinity\"'" in script
    assert "New-ScheduledTaskTrigger -AtLogOn" in script
    assert "-RestartCount 999" in script and "-ExecutionTimeLimit ([TimeSpan]::Zero)" in script
    assert "Register-ScheduledTask -TaskName 'fleet-worker'" in script and "-Force" in script
    assert script.endswith("\r\n") and "\n" not in script.replace("\r\n", "")


def test_the_boot_task_runs_as_system_before_anyone_logs_on():
    script = render_task_script(TaskPlan("Debian", "fleet", start_command(
        False, "", "/home/fleet/fleet/.venv/bin/celery", "/home/fleet/fleet"), trigger="boot"))
    assert "-AtStartup" in script and "-UserId 'SYSTEM'" in script
    assert "cd /home/fleet/fleet && exec /home/fleet/fleet/.venv/bin/celery -A tasks worker" in script


@pytest.mark.parametrize("plan", [
    TaskPlan("Ubuntu; rm -rf /", "root", "true"),
    TaskPlan("Ubuntu", "root'x", "true"),
    TaskPlan("Ubuntu", "root", 'echo "x"'),
    TaskPlan("Ubuntu", "root", "true", trigger="hourly"),
])
def test_values_that_could_break_out_of_the_script_are_refused(plan):
    with pytest.raises(ConfigError):
        render_task_script(plan)
