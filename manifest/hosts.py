"""The ``[hosts.NAME]`` tables: which tiers and models a host takes, and what it declares.

Declared capability (cores, RAM, CUDA devices) caps what the host detects of itself; the
policy is published to Redis as JSON.
"""

from __future__ import annotations

from manifest.fields import check_table, date_problem
from manifest.hyper import TRAINERS
from manifest.jobchecks import ENV_NAME
from manifest.problems import Problems, suggest
from manifest.schema import HostPolicy

HOST_FIELDS = {
    "tiers": "strs",
    "allow_models": "strs",
    "deny_models": "strs",
    "cpu_cores": "int",
    "ram_total_gib": "num",
    "ram_available_gib": "num",
    "cuda_devices": "tables",
    "pass_env": "strs",
}
DECLARED = ("cpu_cores", "ram_total_gib", "ram_available_gib", "cuda_devices")
MODELS = (*TRAINERS, "command")  # what allow_models and deny_models may name


def read_hosts(p: Problems, raw: dict | None, tier_names: set[str]) -> dict[str, HostPolicy]:
    """Each host's policy by name; ``tier_names`` are the tiers its ``tiers`` list may name."""
    out = {}
    for name, table in (raw or {}).items():
        path = ("hosts", name)
        if not isinstance(table, dict):
            p.add(path, "must be a table", f"write it as [hosts.{name}]")
            continue
        t = check_table(p, path, table, HOST_FIELDS)
        _check_names(p, path, t, tier_names)
        _check_devices(p, path, t.get("cuda_devices", []))
        for bad in [n for n in t.get("pass_env", []) if not ENV_NAME.match(n)]:
            p.add(
                path + ("pass_env",),
                f"{bad!r} is not a variable name",
                "list names like WANDB_API_KEY",
            )
        out[name] = HostPolicy(
            name,
            tuple(t["tiers"]) if "tiers" in t else None,
            tuple(t["allow_models"]) if "allow_models" in t else None,
            tuple(t.get("deny_models", ())),
            {k: t[k] for k in DECLARED if k in t},
            tuple(t.get("pass_env", ())),
        )
    return out


def _check_names(p: Problems, path: tuple, t: dict, tier_names: set[str]) -> None:
    """Every tier and model the host names exists."""
    for tier in t.get("tiers", []):
        if tier not in tier_names:
            p.add(path + ("tiers",), f"unknown tier {tier!r}", suggest(tier, tier_names))
    for key in ("allow_models", "deny_models"):
        for model in t.get(key, []):
            if model not in MODELS:
                p.add(path + (key,), f"unknown model {model!r}", suggest(model, MODELS))


def _check_devices(p: Problems, path: tuple, devices: list[dict]) -> None:
    for i, dev in enumerate(devices):
        if not isinstance(dev.get("vram_total_gib"), (int, float)):
            p.add(
                path + ("cuda_devices", i),
                "each device needs vram_total_gib (a number)",
                'write {name = "...", vram_total_gib = 24}',
            )
        elif bad := date_problem(dev):  # the policy is published as JSON
            p.add(path + ("cuda_devices", i), *bad)
