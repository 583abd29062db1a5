"""What ``scripts/bootstrap`` installs for this host: fleet's requirements, with the torch and
xgboost builds chosen per host.

Standard library only: it runs on the system Python before ``.venv`` exists. The decision
(``plan``) is a pure function of the setting, the host and the wheels on disk, tested by a
table in ``tests/unit/test_torchplan.py``; ``main`` gathers those facts and prints the plan
as shell words for the script.

Why not plain ``torch==2.13.0``: on Linux, PyPI's build of it is the CUDA one, which pulls
several GB of NVIDIA libraries onto a CPU host or a publisher, and PyPI's xgboost pulls
NCCL (about 470 MB). A CPU host gets torch's ``+cpu`` build and ``xgboost-cpu`` instead; a host
with an NVIDIA driver gets the CUDA build that uv matches to the driver.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

# FLEET_TORCH's values: "auto" looks for an NVIDIA driver; cuXYZ names one CUDA build
CHOICES = ("auto", "cpu", "cuda", "none")
CUDA_BUILD = re.compile(r"^cu\d{3}$")
# What a publisher-only venv (FLEET_TORCH=none) gets: the CLI and search validation
PUBLISHER_EXTRAS = ("search",)


class PlanError(ValueError):
    """Raised when FLEET_TORCH or the project's pins cannot make a plan; says the fix."""


@dataclass(frozen=True)
class Host:
    """The facts about this host that choose the builds."""

    nvidia: bool  # an NVIDIA driver answers (nvidia-smi -L)
    local_wheels: tuple[str, ...] = ()  # wheel file names in pip's configured find-links


@dataclass(frozen=True)
class Plan:
    """What to install, and why, in words an operator reads while it installs."""

    extras: tuple[str, ...]  # fleet's extras, installed editable
    requirements: tuple[str, ...]  # the trainer packages, with their builds chosen
    uv_args: tuple[str, ...]  # e.g. --torch-backend=cpu, --find-links DIR
    remove: tuple[str, ...]  # packages of the other build, taken out first if present
    build: str  # "cpu", "cuda", "cu126", or "none"
    reason: str


def choose_build(setting: str, host: Host) -> tuple[str, str]:
    """(build, why) for FLEET_TORCH=``setting`` on ``host``."""
    setting = (setting or "auto").strip().lower()
    if setting == "auto":
        if host.nvidia:
            return "cuda", "an NVIDIA driver answers here (FLEET_TORCH=cpu for the CPU build)"
        return "cpu", "no NVIDIA GPU on this host (FLEET_TORCH=cuda for the CUDA build)"
    if setting in ("cpu", "cuda", "none") or CUDA_BUILD.match(setting):
        return setting, f"FLEET_TORCH={setting}"
    raise PlanError(
        f"FLEET_TORCH={setting!r}: not a choice; use one of {', '.join(CHOICES)} "
        "or a CUDA build such as cu126"
    )


def plan(setting: str, host: Host, train: list[str], extras: tuple[str, ...]) -> Plan:
    """The install for ``extras`` (plus the ``train`` extra's requirements unless the build
    is "none"), with torch and xgboost taken from the build this host should run."""
    build, reason = choose_build(setting, host)
    if build == "none":
        return Plan(PUBLISHER_EXTRAS, (), (), (), build, reason + ": no trainers, publish only")
    torch_pin = next((r for r in train if re.match(r"torch\s*==", r)), None)
    if torch_pin is None:
        raise PlanError("pyproject.toml's [train] extra must pin torch (torch==X.Y.Z)")
    version = torch_pin.split("==", 1)[1].split("+")[0].strip()
    reqs, args = [], []
    if build == "cpu":
        local = f"torch-{version}+cpu-"
        if any(w.startswith(local) for w in host.local_wheels):
            # pip's find-links holds this build: no index needed (uv reads no pip.conf)
            reqs.append(f"torch=={version}+cpu")
        else:
            reqs.append(f"torch=={version}")
            args.append("--torch-backend=cpu")
        xgb, other = "xgboost-cpu", "xgboost"
    else:
        reqs.append(f"torch=={version}")
        args.append(f"--torch-backend={'auto' if build == 'cuda' else build}")
        xgb, other = "xgboost", "xgboost-cpu"
    for r in train:
        name = re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0].lower()
        if name == "torch":
            continue
        reqs.append(xgb + r[len(name) :] if name == "xgboost" else r)
    return Plan(extras, tuple(reqs), tuple(args), (other,), build, reason)


def local_wheels() -> tuple[list[str], tuple[str, ...]]:
    """(find-links dirs as uv arguments, their wheel names) from pip's own configuration:
    a machine whose pip has a wheel folder (PIP_FIND_LINKS or pip.conf) lends it to uv."""
    dirs = os.environ.get("PIP_FIND_LINKS", "").split()
    if not dirs:
        try:
            got = subprocess.run(
                [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            dirs = got.stdout.split() if got.returncode == 0 else []
        except (OSError, subprocess.SubprocessError):
            dirs = []
    dirs = [d.removeprefix("file://") for d in dirs if Path(d.removeprefix("file://")).is_dir()]
    names = tuple(Path(p).name for d in dirs for p in glob.glob(os.path.join(d, "*.whl")))
    return dirs, names


def nvidia_driver() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def quote(words) -> str:
    """``words`` as bash words, each single-quoted (the script evals this module's output)."""
    return " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pyproject", default="pyproject.toml")
    p.add_argument("--extras", default="dev", help="fleet's extras besides the trainers")
    p.add_argument("--setting", default=os.environ.get("FLEET_TORCH", "auto"))
    a = p.parse_args(argv)
    project = tomllib.loads(Path(a.pyproject).read_text())["project"]
    train = project["optional-dependencies"]["train"]
    dirs, wheels = local_wheels()
    extras = tuple(e for e in a.extras.split(",") if e)
    try:
        got = plan(a.setting, Host(nvidia_driver(), wheels), train, extras)
    except PlanError as e:
        print(f"bootstrap: {e}", file=sys.stderr)
        return 2
    local = any("+" in r for r in got.requirements)
    links = [w for d in dirs for w in ("--find-links", d)] if local else []
    print(f"EXTRAS={','.join(got.extras)!r}")
    print(f"REQS=({quote(got.requirements)})")
    print(f"UV_ARGS=({quote([*got.uv_args, *links])})")
    print(f"REMOVE=({quote(got.remove)})")
    print(f"BUILD={got.build!r}")
    print(f"REASON={quote([got.reason])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
