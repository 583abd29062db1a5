"""What one ``[[jobs]]`` table must satisfy on its own, whatever its sweep point.

Each check reports at the key it is about, with a fix; a value of the wrong kind was
reported already (``manifest.fields``) and is not in the table these checks see.
"""

from __future__ import annotations

import re

from core.constants import MAX_NODES, MAX_PRIORITY
from manifest.checkpoint import checkpoint_problem
from manifest.fields import MAX_SEED, check_needs, needs_cuda, non_negative
from manifest.hyper import TRAINERS
from manifest.owner import OWNER_RULE, owner_ok
from manifest.problems import Problems, suggest

JOB_FIELDS = {
    "name": "str",
    "model": "str",
    "command": "strs",
    "artifacts": "strs",
    "data": "str",
    "hyper": "table",
    "seed": "int",
    "priority": "int",
    "require_cuda": "bool",
    "prefer_cuda": "bool",
    "prefer_cuda_grace_s": "num",
    "min_vram_gib": "num",
    "min_ram_gib": "num",
    "min_cores": "int",
    "allowed_hosts": "strs",
    "denied_hosts": "strs",
    "timeout_s": "num",
    "max_attempts": "int",
    "sweep": "table",
    "checkpoint": "str",
    "gpus": "int",
    "share_gpu": "bool",
    "workdir": "str",
    "requirements": "str|strs",
    "python": "str",
    "env": "table",
    "preemptible": "bool",
    "search": "table",
    "owner": "str",
    "nodes": "int",
    "after": "strs",  # a pipeline's edges (manifest.edges)
    "inputs": "strs",
    "params_from": "str",
}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PYTHON_VERSION = re.compile(r"^3(\.\d{1,2}){0,2}$")
RESERVED_ENV = ("FLEET_", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "VIRTUAL_ENV", "PATH")


def job_problems(p: Problems, path: tuple, t: dict, written: set[str]) -> None:
    """Report every problem of well-typed job table ``t``.

    ``written`` is every key of the table, so a mistyped model or command (already reported)
    does not also read as a missing one.
    """
    _what_runs(p, path, t, written)
    _numbers(p, path, t)
    _cuda(p, path, t)
    _where(p, path, t)
    _own_code(p, path, t)
    _gang(p, path, t)


def _what_runs(p: Problems, path: tuple, t: dict, written: set[str]) -> None:
    """Its name, and exactly one of a known model (with data) or a command."""
    if "name" not in written:
        p.add(path, "a job needs a name", 'add name = "..." (unique in the manifest)')
    elif "name" in t and not t["name"].strip():
        p.add(
            path + ("name",), "a job name cannot be empty", "write a name, unique in the manifest"
        )
    has_command = "command" in written
    if ("model" in written) == has_command:
        p.add(
            path + ("model",),
            "a job needs exactly one of model or command",
            f"set model to one of {sorted(TRAINERS)} or command to an argv list",
        )
    if "model" in t and t["model"] not in TRAINERS:
        p.add(path + ("model",), f"unknown model {t['model']!r}", suggest(t["model"], TRAINERS))
    if "command" in t and not t["command"]:
        p.add(
            path + ("command",),
            "command is empty",
            'write an argv list, e.g. ["python", "train.py"]',
        )
    if "artifacts" in t and not has_command:
        p.add(
            path + ("artifacts",),
            "artifacts globs are for command jobs",
            "remove it: built-in trainers bundle their own outputs",
        )
    for pattern in t.get("artifacts", []):
        if bad := glob_problem(pattern):
            p.add(path + ("artifacts",), *bad)
    if "model" in t and "data" not in written:
        p.add(
            path + ("data",),
            f"model {t['model']!r} needs data",
            "set data to a CSV/Parquet path or s3:// URI",
        )
    if "owner" in t and not owner_ok(t["owner"]):
        p.add(
            path + ("owner",), f"{t['owner']!r} is not an owner's name", f"write one: {OWNER_RULE}"
        )


def _numbers(p: Problems, path: tuple, t: dict) -> None:
    """Seed, priority, needs, timeout and attempts in their ranges."""
    if "seed" in t and not 0 <= t["seed"] <= MAX_SEED:
        p.add(
            path + ("seed",),
            f"must be 0..{MAX_SEED}, got {t['seed']}",
            "numpy and xgboost take 32-bit seeds",
        )
    if "priority" in t and not 0 <= t["priority"] <= MAX_PRIORITY:
        p.add(
            path + ("priority",),
            f"must be 0..{MAX_PRIORITY}, got {t['priority']}",
            f"use 0 (lowest) to {MAX_PRIORITY} (most urgent)",
        )
    check_needs(p, path, t)
    non_negative(p, path, t, ("prefer_cuda_grace_s",))
    if "timeout_s" in t and t["timeout_s"] <= 0:
        p.add(path + ("timeout_s",), "must be > 0", "leave it out for no limit")
    if "max_attempts" in t and t["max_attempts"] < 1:
        p.add(path + ("max_attempts",), "must be >= 1", "use 1 for a single try")


def _cuda(p: Problems, path: tuple, t: dict) -> None:
    """require_cuda and prefer_cuda agree (gpus or min_vram_gib alone imply require_cuda)."""
    if t.get("require_cuda") and t.get("prefer_cuda"):
        p.add(
            path + ("prefer_cuda",),
            "prefer_cuda with require_cuda has no effect",
            "drop prefer_cuda, or drop require_cuda to allow a CPU fallback",
        )
    _sharing(p, path, t)


def _sharing(p: Problems, path: tuple, t: dict) -> None:
    """A job that shares a GPU asks for one GPU, on CUDA, with a VRAM budget."""
    if not t.get("share_gpu"):
        return
    if not needs_cuda(t):
        p.add(
            path + ("share_gpu",),
            "share_gpu without require_cuda",
            "add require_cuda = true (sharing is for jobs that need a GPU)",
        )
    if t.get("gpus", 1) != 1:
        p.add(
            path + ("gpus",),
            f"share_gpu shares one GPU, but gpus = {t['gpus']}",
            "drop gpus (or set gpus = 1), or drop share_gpu to hold whole GPUs",
        )
    if not t.get("min_vram_gib", 0) > 0:
        p.add(
            path + ("share_gpu",),
            "share_gpu needs a VRAM budget",
            "set min_vram_gib to what the job uses at most: it may share a GPU while budgets fit",
        )


def _where(p: Problems, path: tuple, t: dict) -> None:
    """Its data URI, checkpoint folder and host lists."""
    if unsupported_data(t.get("data")):
        p.add(
            path + ("data",),
            f"unsupported data URI {t['data']!r}",
            "use a local path or s3://bucket/key",
        )
    if "checkpoint" in t and (bad := checkpoint_problem(t["checkpoint"])):
        p.add(path + ("checkpoint",), *bad)
    overlap = set(t.get("allowed_hosts", [])) & set(t.get("denied_hosts", []))
    if overlap:
        p.add(
            path + ("denied_hosts",),
            f"hosts both allowed and denied: {sorted(overlap)}",
            "list each host once",
        )


def _own_code(p: Problems, path: tuple, t: dict) -> None:
    """Its workdir, requirements, python and env variables."""
    reqs = t.get("requirements")
    if isinstance(reqs, str) and "workdir" not in t:
        p.add(
            path + ("requirements",),
            f"requirements file {reqs!r} needs a workdir to be read from",
            'add workdir = "." (the folder holding it), or list the requirements: ["numpy==2.1"]',
        )
    if isinstance(reqs, list) and any(not r.strip() for r in reqs):
        p.add(path + ("requirements",), "a requirement cannot be empty", "remove the empty entry")
    if "python" in t and not PYTHON_VERSION.match(t["python"]):
        p.add(
            path + ("python",),
            f"python {t['python']!r} is not a Python 3 version",
            'write a version like "3.12"',
        )
    if "python" in t and not (reqs or "workdir" in t):
        p.add(
            path + ("python",),
            "python is the version of the job's own environment, which needs "
            "requirements or a uv.lock project",
            "add requirements = [...], or remove python",
        )
    for key, value in t.get("env", {}).items():
        if not ENV_NAME.match(key):
            p.add(path + ("env", key), "is not a variable name", "use letters, digits and _ only")
        elif key.startswith(RESERVED_ENV[0]) or key in RESERVED_ENV[1:]:
            p.add(path + ("env", key), "is set by the worker", "choose another name")
        if not isinstance(value, str):
            p.add(
                path + ("env", key), f"must be a string, got {value!r}", f'write {key} = "{value}"'
            )


def _gang(p: Problems, path: tuple, t: dict) -> None:
    """``nodes = N``: N distinct hosts, each meeting the job's needs (manifest.gangs)."""
    if "nodes" not in t:
        return
    if not 2 <= t["nodes"] <= MAX_NODES:
        p.add(
            path + ("nodes",),
            f"must be 2..{MAX_NODES}, got {t['nodes']}",
            "leave nodes out for a job on one host",
        )
        return
    for key, why, fix in _NOT_WITH_NODES:
        if t.get(key):
            p.add(path + (key,), f"{key} does not go with nodes: {why}", fix)


# what a gang cannot be yet, with why and the fix (docs/gangs.md, limits)
_NOT_WITH_NODES = (
    (
        "share_gpu",
        "a gang's members hold whole hosts' GPUs and meet in collectives at full speed",
        "drop share_gpu (set gpus per node), or drop nodes to share one GPU",
    ),
    (
        "prefer_cuda",
        "every member of a gang runs on the same kind of host",
        "set require_cuda = true, or drop prefer_cuda to run on CPU hosts",
    ),
)


def unsupported_data(data: str | None) -> bool:
    """A URI of a scheme other than s3:// (a plain path has none)."""
    return bool(data) and not data.startswith("s3://") and "://" in data


def glob_problem(pattern: str) -> tuple[str, str] | None:
    """(message, fix) for an artifacts glob that could match files outside the job's directory."""
    parts = pattern.replace("\\", "/").split("/")
    if pattern.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", pattern):
        return (
            f"artifacts glob {pattern!r} is absolute: artifacts come from the job's directory only",
            f"write it relative to the job's directory, e.g. {'out/' + parts[-1]!r}",
        )
    if ".." in parts:
        return (
            f"artifacts glob {pattern!r} leaves the job's directory ('..')",
            "write the job's outputs under its directory (e.g. out/) and glob them there",
        )
    if not pattern.strip():
        return "an artifacts glob cannot be empty", "remove it, or write e.g. 'out/*'"
    return None
