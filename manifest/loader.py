"""Read and validate a manifest: every problem at once, each with file, line, field and fix.

Nothing is published from a manifest that has any problem.
"""
from __future__ import annotations

import difflib
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from fleet.constants import MAX_PRIORITY, PREFER_CUDA_GRACE_S, DEFAULT_PRIORITY
from fleet.errors import ManifestError, Problem
from manifest import ids, sweep
from manifest.lines import LineMap
from manifest.schema import HostPolicy, JobSpec, Manifest, Needs, TierSpec
from routing import tiers as routing
from trainers.schema import TRAINERS, check_hyper, resolve_hyper

# field -> kind; kinds are checked by _check_type
TIER_FIELDS = {"require_cuda": "bool", "min_vram_gib": "num", "min_ram_gib": "num", "min_cores": "int"}
HOST_FIELDS = {"tiers": "strs", "allow_models": "strs", "deny_models": "strs", "cpu_cores": "int",
               "ram_total_gib": "num", "ram_available_gib": "num", "cuda_devices": "tables"}
JOB_FIELDS = {
    "name": "str", "model": "str", "command": "strs", "artifacts": "strs", "data": "str",
    "hyper": "table", "seed": "int", "priority": "int", "require_cuda": "bool",
    "prefer_cuda": "bool", "prefer_cuda_grace_s": "num", "min_vram_gib": "num",
    "min_ram_gib": "num", "min_cores": "int", "allowed_hosts": "strs", "denied_hosts": "strs",
    "timeout_s": "num", "max_attempts": "int", "sweep": "table",
}
TOP_LEVEL = {"tiers": "table", "hosts": "table", "jobs": "tables"}
QUEUE_SAFE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
KIND_WORDS = {"bool": "true or false", "int": "an integer", "num": "a number", "str": "a string",
              "strs": "a list of strings", "table": "a table", "tables": "a list of tables"}


class _Problems:
    """Collects problems for one file, resolving each field path to its line."""

    def __init__(self, file: str, lines: LineMap):
        self.file, self.lines, self.items = file, lines, []

    def add(self, path: tuple, message: str, fix: str = "") -> None:
        self.items.append(Problem(self.file, self.lines.line(*path), _field(path), message, fix))


def _field(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _suggest(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return "known keys: " + ", ".join(sorted(known))


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "num":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "strs":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "table":
        return isinstance(value, dict)
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def _check_table(p: _Problems, path: tuple, table: dict, fields: dict[str, str]) -> dict:
    """Report unknown keys and wrong types; return only the well-typed entries."""
    good = {}
    for key, value in table.items():
        if key not in fields:
            p.add(path + (key,), "unknown key", _suggest(key, fields))
        elif not _is_kind(value, fields[key]):
            p.add(path + (key,), f"must be {KIND_WORDS[fields[key]]}, got {value!r}",
                  f"write it as {KIND_WORDS[fields[key]]}")
        else:
            good[key] = value
    return good


def _non_negative(p: _Problems, path: tuple, table: dict, keys) -> None:
    for key in keys:
        if key in table and table[key] < 0:
            p.add(path + (key,), f"must be >= 0, got {table[key]}", "use 0 or a positive number")


def _needs(t: dict) -> Needs:
    return Needs(bool(t.get("require_cuda", False)), float(t.get("min_vram_gib", 0)),
                 float(t.get("min_ram_gib", 0)), int(t.get("min_cores", 0)))


def _tiers(p: _Problems, raw: dict | None) -> tuple[TierSpec, ...]:
    if not raw:
        return routing.DEFAULT_TIERS
    out = []
    for name, table in raw.items():
        path = ("tiers", name)
        if not QUEUE_SAFE.match(name):
            p.add(path, f"tier name {name!r} is not a usable queue name",
                  "use lowercase letters, digits, '-' and '_' (no dots)")
        if not isinstance(table, dict):
            p.add(path, "must be a table", f"write it as [tiers.{name}]")
            continue
        t = _check_table(p, path, table, TIER_FIELDS)
        _non_negative(p, path, t, ("min_vram_gib", "min_ram_gib", "min_cores"))
        if t.get("min_vram_gib", 0) > 0 and not t.get("require_cuda", False):
            p.add(path + ("min_vram_gib",), "a VRAM floor needs require_cuda = true",
                  "add require_cuda = true to this tier")
        out.append(TierSpec(name, _needs(t)))
    return routing.ordered(out)


def _hosts(p: _Problems, raw: dict | None, tier_names: set[str]) -> dict[str, HostPolicy]:
    out = {}
    for name, table in (raw or {}).items():
        path = ("hosts", name)
        if not isinstance(table, dict):
            p.add(path, "must be a table", f"write it as [hosts.{name}]")
            continue
        t = _check_table(p, path, table, HOST_FIELDS)
        for tier in t.get("tiers", []):
            if tier not in tier_names:
                p.add(path + ("tiers",), f"unknown tier {tier!r}", _suggest(tier, tier_names))
        for key in ("allow_models", "deny_models"):
            for model in t.get(key, []):
                if model not in TRAINERS and model != "command":
                    p.add(path + (key,), f"unknown model {model!r}",
                          _suggest(model, [*TRAINERS, "command"]))
        for i, dev in enumerate(t.get("cuda_devices", [])):
            if not isinstance(dev.get("vram_total_gib"), (int, float)):
                p.add(path + ("cuda_devices", i), "each device needs vram_total_gib (a number)",
                      "write {name = \"...\", vram_total_gib = 24}")
        declared = {k: t[k] for k in ("cpu_cores", "ram_total_gib", "ram_available_gib", "cuda_devices") if k in t}
        out[name] = HostPolicy(
            name, tuple(t["tiers"]) if "tiers" in t else None,
            tuple(t["allow_models"]) if "allow_models" in t else None,
            tuple(t.get("deny_models", ())), declared)
    return out


def _job_problems(p: _Problems, path: tuple, t: dict, base_dir: Path) -> None:
    """Checks of one job table that do not depend on its sweep point."""
    if "name" not in t:
        p.add(path, "a job needs a name", "add name = \"...\" (unique in the manifest)")
    has_model, has_command = "model" in t, "command" in t
    if has_model == has_command:
        p.add(path + ("model",), "a job needs exactly one of model or command",
              f"set model to one of {sorted(TRAINERS)} or command to an argv list")
    if has_model and t["model"] not in TRAINERS:
        p.add(path + ("model",), f"unknown model {t['model']!r}", _suggest(t["model"], TRAINERS))
    if has_command and not t["command"]:
        p.add(path + ("command",), "command is empty", 'write an argv list, e.g. ["python", "train.py"]')
    if "artifacts" in t and not has_command:
        p.add(path + ("artifacts",), "artifacts globs are for command jobs",
              "remove it: built-in trainers bundle their own outputs")
    if has_model and "data" not in t:
        p.add(path + ("data",), f"model {t['model']!r} needs data", "set data to a CSV/Parquet path or s3:// URI")
    if "priority" in t and not 0 <= t["priority"] <= MAX_PRIORITY:
        p.add(path + ("priority",), f"must be 0..{MAX_PRIORITY}, got {t['priority']}",
              f"use 0 (lowest) to {MAX_PRIORITY} (most urgent)")
    _non_negative(p, path, t, ("min_vram_gib", "min_ram_gib", "min_cores", "prefer_cuda_grace_s"))
    if "timeout_s" in t and t["timeout_s"] <= 0:
        p.add(path + ("timeout_s",), "must be > 0", "leave it out for no limit")
    if "max_attempts" in t and t["max_attempts"] < 1:
        p.add(path + ("max_attempts",), "must be >= 1", "use 1 for a single try")
    if t.get("require_cuda") and t.get("prefer_cuda"):
        p.add(path + ("prefer_cuda",), "prefer_cuda with require_cuda has no effect",
              "drop prefer_cuda, or drop require_cuda to allow a CPU fallback")
    if t.get("min_vram_gib", 0) > 0 and not (t.get("require_cuda") or t.get("prefer_cuda")):
        p.add(path + ("min_vram_gib",), "a VRAM need without require_cuda or prefer_cuda",
              "add require_cuda = true (or prefer_cuda = true)")
    data = t.get("data")
    if data and not data.startswith("s3://") and "://" in data:
        p.add(path + ("data",), f"unsupported data URI {data!r}", "use a local path or s3://bucket/key")
    overlap = set(t.get("allowed_hosts", [])) & set(t.get("denied_hosts", []))
    if overlap:
        p.add(path + ("denied_hosts",), f"hosts both allowed and denied: {sorted(overlap)}", "list each host once")


def _resolve_data(data: str | None, base_dir: Path) -> str | None:
    if data is None or data.startswith("s3://"):
        return data
    return str((base_dir / os.path.expanduser(data)).resolve())


def _sweep_points(p: _Problems, path: tuple, t: dict) -> list[dict]:
    raw = t.get("sweep")
    if not raw:
        return [{}]
    points_ok = True
    for key, values in raw.items():
        if not isinstance(values, list) or not values:
            p.add(path + ("sweep", key), "a sweep value must be a non-empty list", f"write {key} = [a, b, ...]")
            points_ok = False
        elif key == "seed" and not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            p.add(path + ("sweep", "seed"), "seeds must be integers", "write seed = [0, 1, 2]")
            points_ok = False
        elif key != "seed" and key in (t.get("hyper") or {}):
            p.add(path + ("sweep", key), f"{key} is set in both hyper and sweep", "keep it in one place")
            points_ok = False
    return sweep.expand(raw) if points_ok else []


def _jobs(p: _Problems, raw: list, base_dir: Path, tiers, hosts) -> tuple[JobSpec, ...]:
    out: list[JobSpec] = []
    seen: dict[str, tuple] = {}
    ids_seen: dict[str, str] = {}
    for i, table in enumerate(raw or []):
        path = ("jobs", i)
        before = len(p.items)
        t = _check_table(p, path, table, JOB_FIELDS)
        _job_problems(p, path, t, base_dir)
        points = _sweep_points(p, path, t)
        if len(p.items) > before:
            # still check the written hyper, so every mistake is reported in one pass
            if t.get("model") in TRAINERS and "hyper" in t:
                for key, message, fix in check_hyper(t["model"], t["hyper"]):
                    p.add(path + ("hyper", key), message, fix)
            continue
        for point in points:
            hyper = dict(t.get("hyper", {}))
            hyper.update({k: v for k, v in point.items() if k != "seed"})
            seed = point.get("seed", t.get("seed", 0))
            if "model" in t:
                bad = check_hyper(t["model"], hyper)
                for key, message, fix in bad:
                    where = ("sweep", key) if key in point else ("hyper", key)
                    p.add(path + where, message, fix)
                if bad:
                    break
                hyper = resolve_hyper(t["model"], hyper)
            job = _build_job(t, point, hyper, seed, base_dir, table_line=p.lines.line(*path))
            if job.name in seen:
                p.add(path + ("name",), f"duplicate job name {job.name!r} (first at {_field(seen[job.name])})",
                      "give each job a unique name")
                continue
            seen[job.name] = path
            if job.job_id in ids_seen:
                p.add(path, f"job {job.name!r} has the same content as {ids_seen[job.job_id]!r} (same job ID), "
                      "so only one of them would run", "change its seed, data or hyper, or remove one")
                continue
            ids_seen[job.job_id] = job.name
            if tiers is None:  # the tiers have problems of their own
                out.append(job)
                continue
            r = routing.route(job, tiers, hosts)
            if r is None:
                p.add(path, f"job {job.name!r} needs {_describe(job.needs)} and no tier guarantees it",
                      f"add a tier whose floor covers it, e.g. [tiers.{_tier_hint(job.needs)}] with "
                      f"{_describe(job.needs, toml=True)}, or lower the job's needs")
            elif any(c and c.allowed is not None and not (c.allowed - c.denied)
                     for c in (r.constraint, r.fallback_constraint)):
                p.add(path + ("allowed_hosts",), f"job {job.name!r} can run on no host: every allowed host "
                      "is denied (by denied_hosts or a host's model policy)", "allow a host that accepts it")
            out.append(job)
    return tuple(out)


def _build_job(t: dict, point: dict, hyper: dict, seed: int, base_dir: Path, table_line) -> JobSpec:
    needs = _needs(t)
    data = _resolve_data(t.get("data"), base_dir)
    command = t.get("command")
    artifacts = list(t.get("artifacts", [])) if command else []
    jid = ids.job_id(model=t.get("model"), command=command, artifacts=artifacts,
                     data=data, hyper=hyper, seed=seed, needs=needs)
    return JobSpec(
        name=sweep.point_name(t["name"], point), job_id=jid, model=t.get("model"),
        command=tuple(command) if command else None, artifacts=tuple(artifacts), data=data,
        hyper=hyper, seed=seed, priority=t.get("priority", DEFAULT_PRIORITY), needs=needs,
        prefer_cuda=t.get("prefer_cuda", False),
        prefer_cuda_grace_s=float(t.get("prefer_cuda_grace_s", PREFER_CUDA_GRACE_S)),
        allowed_hosts=tuple(t.get("allowed_hosts", ())), denied_hosts=tuple(t.get("denied_hosts", ())),
        timeout_s=t.get("timeout_s"), max_attempts=t.get("max_attempts"), line=table_line)


def _describe(needs: Needs, toml: bool = False) -> str:
    parts = []
    if needs.require_cuda:
        parts.append("require_cuda = true" if toml else "CUDA")
    for key in ("min_vram_gib", "min_ram_gib", "min_cores"):
        if getattr(needs, key):
            parts.append(f"{key} = {getattr(needs, key):g}" if toml else f"{key}={getattr(needs, key):g}")
    return ", ".join(parts) or "nothing"


def _tier_hint(needs: Needs) -> str:
    return ("cuda" if needs.require_cuda else "cpu") + "-big"


def loads(text: str, path: str = "<manifest>") -> Manifest:
    """Validate manifest text; raise ManifestError listing every problem."""
    lines = LineMap(text)
    p = _Problems(path, lines)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ManifestError([Problem(path, int(m.group(1)) if m else None, "(syntax)",
                                     f"not valid TOML: {e}", "fix the TOML syntax at that line")]) from e
    doc = _check_table(p, (), doc, TOP_LEVEL)
    if not doc.get("jobs"):
        p.add(("jobs",), "the manifest has no jobs", "add at least one [[jobs]] table")
    before = len(p.items)
    tiers = _tiers(p, doc.get("tiers"))
    # a broken [tiers] table would make jobs look unroutable: report it once, not once per job
    route_tiers = tiers if len(p.items) == before else None
    hosts = _hosts(p, doc.get("hosts"), {t.name for t in tiers})
    base_dir = Path(path).resolve().parent if path != "<manifest>" else Path.cwd()
    jobs = _jobs(p, doc.get("jobs", []), base_dir, route_tiers, hosts)
    if p.items:
        raise ManifestError(sorted(p.items, key=lambda x: (x.line is None, x.line or 0)))  # in file order
    return Manifest(path, tiers, hosts, jobs)


def load(path: str | os.PathLike) -> Manifest:
    """Read and validate the manifest file at ``path``."""
    path = str(path)
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as e:
        raise ManifestError([Problem(path, None, "(file)", f"cannot read: {e.strerror}",
                                     "check the path")]) from e
    except UnicodeDecodeError as e:  # TOML is UTF-8 by definition
        raise ManifestError([Problem(path, None, "(file)", f"not UTF-8 text: {e.reason} at byte {e.start}",
                                     "save the file as UTF-8")]) from e
    return loads(text, path)
