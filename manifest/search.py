"""A job's ``[jobs.search]`` table: an adaptive search over ``[jobs.search.space]``.

Pure: the table is checked like ``hyper`` (each bound and choice against the trainer's
schema, "did you mean" for unknown keys) and becomes a ``SearchSpec``, whose id is the
digest of the base job's content and the search's own settings. The samplers and pruners
are Optuna's, named here and built where the search runs (``state.study``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from core.constants import DEFAULT_MAX_FAILURES
from core.ids import short_id
from manifest.fields import check_table, is_kind
from manifest.hyper import TRAINERS, check_hyper, unknown_key_fix
from manifest.problems import Problems, suggest
from manifest.schema import JobSpec

SEARCH_FIELDS = {
    "trials": "int",
    "parallel": "int",
    "metric": "str",
    "direction": "str",
    "sampler": "str",
    "pruner": "str",
    "seed": "int",
    "max_failures": "int",
    "space": "table",
    "min_resource": "int",
}
# the pruners that judge by rungs; min_resource is their first rung's step ("auto" when left out)
RUNG_PRUNERS = ("asha", "hyperband")
RANGE_FIELDS = {"low": "num", "high": "num", "log": "bool", "step": "num", "choices": "table"}
# Optuna's samplers and pruners by the names a manifest uses (state.study builds them)
SAMPLERS = ("tpe", "random", "grid", "qmc", "cmaes", "gp", "nsga2", "bruteforce")
PRUNERS = ("none", "median", "asha", "hyperband", "percentile")
DIRECTIONS = ("minimize", "maximize")
DEFAULTS = {
    "trials": 20,
    "parallel": 4,
    "direction": "minimize",
    "sampler": "tpe",
    "pruner": "none",
    "seed": 0,
    "max_failures": DEFAULT_MAX_FAILURES,
}
MAX_TRIALS = 100_000


@dataclass(frozen=True)
class SearchSpec:
    """One search: its base job (name, fixed hyper, needs) and its settings and space."""

    search_id: str
    base: JobSpec  # the job every trial is, before the trial's values go into hyper
    config: dict  # trials, parallel, metric, direction, sampler, pruner, seed, max_failures, space

    @property
    def name(self) -> str:
        return self.base.name

    def trial_name(self, number: int) -> str:
        return f"{self.base.name}[trial={number}]"

    def describe(self) -> list[str]:
        """What `publish --dry-run` shows: the budget, how many at once, the space."""
        c = self.config
        lines = [
            f"search {self.name} ({short_id(self.search_id)}): {c['trials']} trials, "
            f"at most {c['parallel']} at once, {c['direction']} {c['metric']}, "
            f"sampler {c['sampler']}, pruner {c['pruner']}, "
            f"stops after {c['max_failures']} failed in a row"
        ]
        lines += [f"  {k}: {space_text(v)}" for k, v in c["space"].items()]
        return lines


def space_text(dist: dict) -> str:
    """``{"low": 1e-4, "high": 0.1, "log": true}`` -> ``log-uniform in [0.0001, 0.1]``."""
    if "choices" in dist:
        return "one of " + ", ".join(json.dumps(c) for c in dist["choices"])
    kind = ("log-" if dist.get("log") else "") + ("integer" if dist["int"] else "uniform")
    step = f" step {dist['step']:g}" if dist.get("step") is not None else ""
    return f"{kind} in [{dist['low']:g}, {dist['high']:g}]{step}"


def trial_job_id(search_id: str, number: int) -> str:
    """A trial's job ID: from its search and its number only."""
    return hashlib.sha256(f"search:{search_id}:trial:{number}".encode()).hexdigest()


def search_id(base_canonical: bytes, config: dict) -> str:
    """The digest of the base job's canonical content (manifest.ids) and the search's settings."""
    doc = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(b"search:" + base_canonical + b"\n" + doc).hexdigest()


def read_config(p: Problems, path: tuple, t: dict) -> dict | None:
    """Job table ``t``'s search settings with defaults filled, its space checked; None when it
    has none, or has a problem (each reported at its key)."""
    raw = t.get("search")
    if raw is None:
        return None
    mark = len(p.paths)
    path = path + ("search",)
    s = check_table(p, path, raw, SEARCH_FIELDS)
    config = {**DEFAULTS, **s}
    _settings(p, path, raw, config)
    if t.get("sweep"):
        p.add(
            path[:-1] + ("sweep",),
            "a job cannot have both sweep and search",
            "move each swept key into [jobs.search.space] as { choices = [...] }, "
            "or split the job in two",
        )
    if t.get("prefer_cuda"):
        p.add(
            path[:-1] + ("prefer_cuda",),
            "a search's trials cannot fall back from GPU to CPU yet",
            "set require_cuda = true, or leave both out to run on CPU",
        )
    config["space"] = _space(p, path + ("space",), s.get("space"), t, config["sampler"])
    return None if len(p.paths) > mark else config


def _settings(p: Problems, path: tuple, raw: dict, c: dict) -> None:
    if "metric" not in raw:
        p.add(
            path,
            "a search needs the metric it optimises",
            'add metric = "valid_loss" (a key of the job\'s FLEET_METRIC lines)',
        )
    for key, lo, hi in (
        ("trials", 1, MAX_TRIALS),
        ("parallel", 1, 10_000),
        ("max_failures", 1, MAX_TRIALS),
        ("seed", 0, 2**32 - 1),
    ):
        if is_kind(c.get(key), "int") and not lo <= c[key] <= hi:
            p.add(path + (key,), f"must be {lo}..{hi}, got {c[key]}", f"use a value in {lo}..{hi}")
    for key, names in (("direction", DIRECTIONS), ("sampler", SAMPLERS), ("pruner", PRUNERS)):
        if isinstance(c.get(key), str) and c[key] not in names:
            p.add(path + (key,), f"unknown {key} {c[key]!r}", f"use one of: {', '.join(names)}")
    if "min_resource" in raw and c.get("pruner") not in RUNG_PRUNERS:
        p.add(
            path + ("min_resource",),
            f"min_resource is the first rung of {' or '.join(RUNG_PRUNERS)}",
            'set pruner = "asha", or remove min_resource',
        )
    elif is_kind(c.get("min_resource"), "int") and c["min_resource"] < 1:
        p.add(
            path + ("min_resource",),
            f"must be >= 1, got {c['min_resource']}",
            "use e.g. 1 (the first step)",
        )


def _space(p: Problems, path: tuple, space: dict | None, t: dict, sampler: str) -> dict:
    if not space:
        p.add(
            path,
            "a search needs a space of at least one key",
            "add [jobs.search.space] with e.g. "
            "learning_rate = { low = 1e-4, high = 1e-1, log = true }",
        )
        return {}
    out = {}
    for name, raw in space.items():
        if (dist := _one(p, path + (name,), name, raw, t, sampler)) is not None:
            out[name] = dist
    return out


def _one(p: Problems, path: tuple, name: str, raw: Any, t: dict, sampler: str) -> dict | None:
    """One key of the space, normalised: ``{choices}`` or ``{low, high, log, step, int}``."""
    model = t.get("model")
    if model in TRAINERS and name not in TRAINERS[model]:
        p.add(path, f"unknown key for model {model!r}", unknown_key_fix(name, TRAINERS[model]))
        return None
    if name in (t.get("hyper") or {}):
        p.add(path, f"{name} is set in both hyper and the search space", "keep it in one place")
        return None
    if not isinstance(raw, dict):
        p.add(path, "must be a table", "write { low = ..., high = ... } or { choices = [...] }")
        return None
    bad = [k for k in raw if k not in RANGE_FIELDS]
    for k in bad:
        p.add(path + (k,), "unknown key", suggest(k, RANGE_FIELDS))
    if bad:
        return None
    dist = (
        _choices(p, path, raw, model, name)
        if "choices" in raw
        else _range(p, path, raw, model, name)
    )
    if (
        dist is not None
        and sampler == "grid"
        and "choices" not in dist
        and dist.get("step") is None
    ):
        p.add(path, "the grid sampler needs a finite grid", "give it choices = [...] or a step")
        return None
    return dist


def _choices(p: Problems, path: tuple, raw: dict, model: str | None, name: str) -> dict | None:
    choices = raw["choices"]
    if not isinstance(choices, list) or not choices or len(raw) > 1:
        p.add(path, "choices must be a non-empty list, alone", "write { choices = [a, b, ...] }")
        return None
    if model in TRAINERS:
        choices = [_as_param(TRAINERS[model][name].type, c) for c in choices]
        if not _checked(p, path + ("choices",), model, name, choices):
            return None
    return {"choices": choices}


def _as_param(kind: type, value: Any) -> Any:
    # a list of layer widths reads as the trainer's "128,64"
    if kind is str and isinstance(value, list) and all(is_kind(v, "int") for v in value):
        return ",".join(map(str, value))
    return value


def _range(p: Problems, path: tuple, raw: dict, model: str | None, name: str) -> dict | None:
    if not all(is_kind(raw.get(k), "num") for k in ("low", "high")):
        p.add(path, "a range needs numbers low and high", "write { low = 0.001, high = 0.1 }")
        return None
    low, high, log, step = raw["low"], raw["high"], bool(raw.get("log", False)), raw.get("step")
    as_int = all(is_kind(v, "int") for v in (low, high, step if step is not None else 0))
    if model in TRAINERS:
        as_int = TRAINERS[model][name].type is int
        if as_int and not all(is_kind(v, "int") for v in (low, high)):
            p.add(
                path,
                f"{name} is an integer: low and high must be integers",
                "write e.g. { low = 32, high = 256 }",
            )
            return None
        if not _checked(p, path, model, name, [low, high]):
            return None
    problem = _range_problem(low, high, log, step)
    if problem:
        p.add(path, *problem)
        return None
    return {"low": low, "high": high, "log": log, "step": step, "int": as_int}


def _range_problem(low, high, log, step) -> tuple[str, str] | None:
    if low > high:
        return f"low {low} is above high {high}", "swap them"
    if log and low <= 0:
        return f"a log range needs low > 0, got {low}", "use e.g. low = 1e-5"
    if log and step is not None:
        return "a range is either log or stepped, not both", "remove log or step"
    if step is not None and step <= 0:
        return f"step must be > 0, got {step}", "use e.g. step = 1"
    return None


def _checked(p: Problems, path: tuple, model: str, name: str, values: list) -> bool:
    """Each value against the trainer's schema; False (reported) on the first bad one."""
    for v in values:
        for _, message, fix in check_hyper(model, {name: v}):
            p.add(path, message, fix)
            return False
    return True
