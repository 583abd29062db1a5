"""scripts/torchplan.py: which torch and xgboost builds bootstrap installs on which host."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("torchplan", ROOT / "scripts" / "torchplan.py")
torchplan = importlib.util.module_from_spec(_spec)
sys.modules["torchplan"] = torchplan  # dataclasses look their module up by name
_spec.loader.exec_module(torchplan)

TRAIN = ["numpy>=1.26", "xgboost>=2", "torch==2.13.0"]
CPU_WHEEL = ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",)
GPU = torchplan.Host(nvidia=True)
NO_GPU = torchplan.Host(nvidia=False)
WHEEL_HERE = torchplan.Host(nvidia=False, local_wheels=CPU_WHEEL)


@pytest.mark.parametrize(
    "setting, host, build, torch, args, xgb",
    [
        # no driver: the CPU build from PyTorch's CPU index, never PyPI's CUDA build
        ("auto", NO_GPU, "cpu", "torch==2.13.0", ("--torch-backend=cpu",), "xgboost-cpu>=2"),
        # pip's wheel folder holds the CPU build: taken from there, no index asked
        (
            "auto",
            torchplan.Host(False, CPU_WHEEL),
            "cpu",
            "torch==2.13.0+cpu",
            (),
            "xgboost-cpu>=2",
        ),
        # a driver answers: the CUDA build uv matches to it, and xgboost with NCCL
        ("auto", GPU, "cuda", "torch==2.13.0", ("--torch-backend=auto",), "xgboost>=2"),
        ("", GPU, "cuda", "torch==2.13.0", ("--torch-backend=auto",), "xgboost>=2"),
        # the setting wins over the host, either way
        ("cpu", GPU, "cpu", "torch==2.13.0", ("--torch-backend=cpu",), "xgboost-cpu>=2"),
        ("CUDA", NO_GPU, "cuda", "torch==2.13.0", ("--torch-backend=auto",), "xgboost>=2"),
        ("cu126", NO_GPU, "cu126", "torch==2.13.0", ("--torch-backend=cu126",), "xgboost>=2"),
    ],
)
def test_the_build_follows_the_setting_and_the_host(setting, host, build, torch, args, xgb):
    got = torchplan.plan(setting, host, TRAIN, ("dev",))
    assert (got.build, got.uv_args) == (build, args)
    assert got.requirements == (torch, "numpy>=1.26", xgb)
    # the other xgboost build, left by an earlier bootstrap, is taken out first
    assert got.remove == (("xgboost",) if xgb.startswith("xgboost-cpu") else ("xgboost-cpu",))
    assert got.extras == ("dev",)


def test_a_publisher_gets_no_trainers_at_all():
    got = torchplan.plan("none", GPU, TRAIN, ("dev",))
    assert got.requirements == () and got.uv_args == ()
    assert got.extras == ("search",) and "publish only" in got.reason


def test_the_reason_names_the_setting_that_changes_it():
    assert "FLEET_TORCH=cuda" in torchplan.plan("auto", NO_GPU, TRAIN, ()).reason
    assert "FLEET_TORCH=cpu" in torchplan.plan("auto", GPU, TRAIN, ()).reason


def test_an_unknown_setting_is_refused_with_the_choices():
    with pytest.raises(torchplan.PlanError, match="FLEET_TORCH='gpu'.*auto, cpu, cuda, none"):
        torchplan.plan("gpu", NO_GPU, TRAIN, ())


def test_a_train_extra_without_a_torch_pin_is_refused():
    with pytest.raises(torchplan.PlanError, match="must pin torch"):
        torchplan.plan("cpu", NO_GPU, ["torch>=2"], ())


def test_the_script_prints_bash_words_for_this_projects_pins(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "torchplan.py"), "--setting", "cpu"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PIP_FIND_LINKS": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    words = subprocess.run(
        ["bash", "-c", f'{out}\nprintf "%s|" "$BUILD" "${{REQS[0]}}" "${{UV_ARGS[@]}}"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert words == "cpu|torch==2.13.0|--torch-backend=cpu|"
