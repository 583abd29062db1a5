"""Read and validate a manifest: every problem at once, each with file, line, field and fix.

Nothing is published from a manifest that has any problem.
"""
from __future__ import annotations

import datetime as dt
import difflib
import json
import math
import os
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.constants import MAX_PRIORITY, PREFER_CUDA_GRACE_S, DEFAULT_PRIORITY
from core.gcpause import gc_paused
from core.errors import DataProblem, ManifestError, Problem
from artifacts.identity import DataResolver
from manifest import ids, sweep
from manifest.checkpoint import checkpoint_dir, checkpoint_problem
from manifest.lines import LineMap, scan
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
    "checkpoint": "str",
}
TOP_LEVEL = {"tiers": "table", "hosts": "table", "jobs": "tables"}
QUEUE_SAFE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
KIND_WORDS = {"bool": "true or false", "int": "an integer", "num": "a number", "str": "a string",
              "strs": "a list of strings", "table": "a table", "tables": "a list of tables"}
# what routing reads: when all of these that are written are well-typed, routing can be checked
ROUTING_FIELDS = ("require_cuda", "prefer_cuda", "min_vram_gib", "min_ram_gib", "min_cores",
                  "allowed_hosts", "denied_hosts")
MAX_SEED = 2**32 - 1  # numpy's and xgboost's seeds are unsigned 32-bit
# tables and arrays inside one another: far more than a manifest needs, far less than
# Python's recursion limit (tomllib and the checks below recurse once per level)
MAX_NESTING = 32
NESTING_FIX = f"flatten it: a manifest needs a few levels, at most {MAX_NESTING}"
CLOSERS = {"array": "]", "inline table": "}", "string": 'a matching quote (" or \')',
           "multi-line string": 'a matching """ or \'\'\''}
# fields outside the job ID (manifest.ids): a problem in one of them still lets us compare IDs
NOT_IN_ID = {"name", "priority", "prefer_cuda", "prefer_cuda_grace_s", "allowed_hosts",
             "denied_hosts", "timeout_s", "max_attempts", "checkpoint"}


class _Problems:
    """Collects problems for one file, resolving each field path to its line."""

    def __init__(self, file: str, lines: LineMap):
        self.file, self.lines, self.items = file, lines, []
        self.paths: list[tuple] = []  # the key path of each item, for checks that depend on others

    def add(self, path: tuple, message: str, fix: str = "") -> None:
        self.items.append(Problem(self.file, self.lines.line(*path), _field(path), message, fix))
        self.paths.append(path)


@dataclass(frozen=True)
class _Routes:
    """What a job's routing check needs; ``defaults`` when no [tiers] table was written."""

    tiers: tuple[TierSpec, ...]
    hosts: dict[str, HostPolicy]
    defaults: bool


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
            p.add(path + (key,), *_wrong_kind(key, value, fields[key]))
        elif isinstance(value, float) and not math.isfinite(value):  # TOML has inf and nan
            p.add(path + (key,), f"must be a finite number, got {value}", "write a number, e.g. 1.5")
        else:
            good[key] = value
    return good


def _wrong_kind(key: str, value: Any, kind: str) -> tuple[str, str]:
    """(message, fix) for a value of the wrong kind; two common slips get a fix of their own."""
    if key == "command" and isinstance(value, str):  # a shell line where an argv list belongs
        return f"must be an argv list, got the string {value!r}", f"write command = {_argv(value)}"
    if key == "jobs" and isinstance(value, dict):  # [jobs] where [[jobs]] was meant
        return "is a single [jobs] table, not a list of jobs", "use [[jobs]] (double brackets) for each job"
    return f"must be {KIND_WORDS[kind]}, got {value!r}", f"write it as {KIND_WORDS[kind]}"


def _argv(line: str) -> str:
    try:
        words = shlex.split(line)
    except ValueError:  # unbalanced quotes: a plain split still shows the shape
        words = line.split()
    return json.dumps(words or ["python", "train.py"], ensure_ascii=False)


def _first_date(value: Any) -> dt.date | dt.time | None:
    """The first TOML date or time inside ``value``, or None.

    Job IDs, Celery messages and published host policies are JSON, which has no dates.
    """
    if isinstance(value, (dt.date, dt.time)):  # datetime is a date too
        return value
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((d for d in map(_first_date, inner) if d is not None), None)


def _date_problem(value: Any) -> tuple[str, str] | None:
    """(message, fix) when ``value`` holds a TOML date or time, else None."""
    d = _first_date(value)
    if d is None:
        return None
    return f"TOML dates and times are not supported, got {d.isoformat()}", f'use a string, e.g. "{d.isoformat()}"'


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
            elif bad := _date_problem(dev):  # the policy is published as JSON
                p.add(path + ("cuda_devices", i), *bad)
        declared = {k: t[k] for k in ("cpu_cores", "ram_total_gib", "ram_available_gib", "cuda_devices") if k in t}
        out[name] = HostPolicy(
            name, tuple(t["tiers"]) if "tiers" in t else None,
            tuple(t["allow_models"]) if "allow_models" in t else None,
            tuple(t.get("deny_models", ())), declared)
    return out


def _job_problems(p: _Problems, path: tuple, t: dict, written: set[str]) -> None:
    """Checks of one job table that do not depend on its sweep point.

    ``written`` is every key of the table, so a mistyped model or command (already reported)
    does not also read as a missing one.
    """
    if "name" not in written:
        p.add(path, "a job needs a name", "add name = \"...\" (unique in the manifest)")
    elif "name" in t and not t["name"].strip():
        p.add(path + ("name",), "a job name cannot be empty", "write a name, unique in the manifest")
    has_model, has_command = "model" in written, "command" in written
    if has_model == has_command:
        p.add(path + ("model",), "a job needs exactly one of model or command",
              f"set model to one of {sorted(TRAINERS)} or command to an argv list")
    if "model" in t and t["model"] not in TRAINERS:
        p.add(path + ("model",), f"unknown model {t['model']!r}", _suggest(t["model"], TRAINERS))
    if "command" in t and not t["command"]:
        p.add(path + ("command",), "command is empty", 'write an argv list, e.g. ["python", "train.py"]')
    if "artifacts" in t and not has_command:
        p.add(path + ("artifacts",), "artifacts globs are for command jobs",
              "remove it: built-in trainers bundle their own outputs")
    for pattern in t.get("artifacts", []):
        if bad := _glob_problem(pattern):
            p.add(path + ("artifacts",), *bad)
    if "model" in t and "data" not in written:
        p.add(path + ("data",), f"model {t['model']!r} needs data", "set data to a CSV/Parquet path or s3:// URI")
    if "seed" in t and not 0 <= t["seed"] <= MAX_SEED:
        p.add(path + ("seed",), f"must be 0..{MAX_SEED}, got {t['seed']}", "numpy and xgboost take 32-bit seeds")
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
    # a mistyped require_cuda / prefer_cuda is reported already; it does not make a VRAM need orphan
    cuda_flags_ok = all(k in t for k in ("require_cuda", "prefer_cuda") if k in written)
    if t.get("min_vram_gib", 0) > 0 and cuda_flags_ok and not (t.get("require_cuda") or t.get("prefer_cuda")):
        p.add(path + ("min_vram_gib",), "a VRAM need without require_cuda or prefer_cuda",
              "add require_cuda = true (or prefer_cuda = true)")
    data = t.get("data")
    if data and not data.startswith("s3://") and "://" in data:
        p.add(path + ("data",), f"unsupported data URI {data!r}", "use a local path or s3://bucket/key")
    if "checkpoint" in t and (bad := checkpoint_problem(t["checkpoint"])):
        p.add(path + ("checkpoint",), *bad)
    overlap = set(t.get("allowed_hosts", [])) & set(t.get("denied_hosts", []))
    if overlap:
        p.add(path + ("denied_hosts",), f"hosts both allowed and denied: {sorted(overlap)}", "list each host once")


def _glob_problem(pattern: str) -> tuple[str, str] | None:
    """(message, fix) for an artifacts glob that could match files outside the job's directory."""
    parts = pattern.replace("\\", "/").split("/")
    if pattern.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", pattern):
        return (f"artifacts glob {pattern!r} is absolute: artifacts come from the job's directory only",
                f"write it relative to the job's directory, e.g. {'out/' + parts[-1]!r}")
    if ".." in parts:
        return (f"artifacts glob {pattern!r} leaves the job's directory ('..')",
                "write the job's outputs under its directory (e.g. out/) and glob them there")
    if not pattern.strip():
        return "an artifacts glob cannot be empty", "remove it, or write e.g. 'out/*'"
    return None


def _pin_data(p: _Problems, path: tuple, t: dict, base_dir: Path, resolver: DataResolver) -> str | None:
    """The job's data pinned to its content, or None (and a problem) when it cannot be."""
    data = t.get("data")
    if not data or ("://" in data and not data.startswith("s3://")):
        return None  # no data, or an unsupported URI (reported by _job_problems)
    try:
        return resolver.pin(data, base_dir)
    except DataProblem as e:
        p.add(path + ("data",), e.message, e.fix)
        return None


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
        elif key == "seed" and (bad := [v for v in values if not 0 <= v <= MAX_SEED]):
            p.add(path + ("sweep", "seed"), f"seeds must be 0..{MAX_SEED}, got {bad[0]}",
                  "numpy and xgboost take 32-bit seeds")
            points_ok = False
        elif key != "seed" and key in (t.get("hyper") or {}):
            p.add(path + ("sweep", key), f"{key} is set in both hyper and sweep", "keep it in one place")
            points_ok = False
    return sweep.expand(raw) if points_ok else []


def _hyper_values(t: dict):
    """(where, key, value) for every written hyper value and every swept one."""
    for key, value in (t.get("hyper") or {}).items():
        yield ("hyper", key), key, value
    for key, values in (t.get("sweep") or {}).items():
        if key != "seed" and isinstance(values, list):
            for value in values:
                yield ("sweep", key), key, value


def _hyper_problems(p: _Problems, path: tuple, t: dict) -> None:
    """Report every bad hyper value, written or swept, once each.

    Values are checked one by one, not point by point: a sweep's cross product would repeat
    each bad value once per point it is in.
    """
    reported = set()
    for where, key, value in _hyper_values(t):
        if t.get("model") in TRAINERS:  # its schema rejects dates too: no trainer takes one
            bad = [(m, f) for _, m, f in check_hyper(t["model"], {key: value})]
        else:
            bad = [b] if (b := _date_problem(value)) else []
        for message, fix in bad:
            if (where, message) not in reported:
                reported.add((where, message))
                p.add(path + where, message, fix)


def _routing_problems(p: _Problems, path: tuple, t: dict, routes: _Routes) -> None:
    """A job no tier guarantees, or one no host may run; needs only the routing fields."""
    name = t.get("name") or _field(path)
    probe = JobSpec(name=name, job_id="", model=t.get("model"), needs=_needs(t),
                    prefer_cuda=t.get("prefer_cuda", False), allowed_hosts=tuple(t.get("allowed_hosts", ())),
                    denied_hosts=tuple(t.get("denied_hosts", ())))
    r = routing.route(probe, routes.tiers, routes.hosts)
    if r is None:
        p.add(path, f"job {name!r} needs {_describe(probe.needs)} and no tier guarantees it",
              _unroutable_fix(probe.needs, routes.defaults))
    elif set(probe.allowed_hosts) & set(probe.denied_hosts):
        return  # already reported as hosts both allowed and denied
    elif any(c and c.allowed is not None and not (c.allowed - c.denied)
             for c in (r.constraint, r.fallback_constraint)):
        p.add(path + ("allowed_hosts",), f"job {name!r} can run on no host: every allowed host "
              "is denied (by denied_hosts or a host's model policy)", "allow a host that accepts it")


def _unroutable_fix(needs: Needs, defaults: bool) -> str:
    # adding one [tiers.X] to a manifest without [tiers] drops every default tier
    note = ""
    if defaults:
        names = [t.name for t in routing.DEFAULT_TIERS]
        note = (" (a [tiers] table replaces the default tiers: copy "
                f"{', '.join(names[:-1])} and {names[-1]} into it too)")
    return (f"add a tier whose floor covers it, e.g. [tiers.{_tier_hint(needs)}] with "
            f"{_describe(needs, toml=True)}{note}, or lower the job's needs")


class _Unique:
    """Job names and IDs seen so far, so that a clash is reported at the second job."""

    def __init__(self):
        self.names: dict[str, tuple] = {}  # job name -> path of its table
        self.ids: dict[str, str] = {}      # job ID -> job name

    def name_taken(self, p: _Problems, path: tuple, name: str) -> bool:
        if name in self.names:
            p.add(path + ("name",), f"duplicate job name {name!r} (first at {_field(self.names[name])})",
                  "give each job a unique name")
            return True
        self.names[name] = path
        return False

    def id_taken(self, p: _Problems, path: tuple, job: JobSpec) -> bool:
        if job.job_id in self.ids:
            p.add(path, f"job {job.name!r} has the same content as {self.ids[job.job_id]!r} (same job ID), "
                  "so only one of them would run", "change its seed, data or hyper, or remove one")
            return True
        self.ids[job.job_id] = job.name
        return False


def _jobs(p: _Problems, raw: list, base_dir: Path, routes: _Routes | None,
          resolver: DataResolver) -> tuple[JobSpec, ...]:
    """Every job of every table; ``routes`` None when the tiers have problems of their own."""
    out: list[JobSpec] = []
    unique = _Unique()
    for i, table in enumerate(raw or []):
        path = ("jobs", i)
        before = len(p.paths)
        t = _check_table(p, path, table, JOB_FIELDS)
        _job_problems(p, path, t, set(table))
        data = _pin_data(p, path, t, base_dir, resolver)  # once per table, not per sweep point
        points = _sweep_points(p, path, t)
        _hyper_problems(p, path, t)
        # a problem in the job's content would make its ID (and so an ID clash) meaningless
        content_ok = not any(len(q) > 2 and q[2] not in NOT_IN_ID for q in p.paths[before:])
        if routes and all(key in t for key in ROUTING_FIELDS if key in table):
            _routing_problems(p, path, t, routes)
        if not t.get("name", "").strip():
            continue
        table_line = p.lines.line(*path)
        for point in points:
            name = sweep.point_name(t["name"], point)
            if unique.name_taken(p, path, name) or not content_ok:
                continue
            job = _build_job(t, point, name, data, table_line=table_line)
            if not unique.id_taken(p, path, job):
                out.append(job)
    return tuple(out)


def _point_hyper(t: dict, point: dict) -> dict:
    """The job's hyper at one sweep point, with a trainer's defaults filled in."""
    hyper = {**t.get("hyper", {}), **{k: v for k, v in point.items() if k != "seed"}}
    return resolve_hyper(t["model"], hyper) if "model" in t else hyper


def _build_job(t: dict, point: dict, name: str, data: str | None, table_line) -> JobSpec:
    """One job of table ``t`` at a sweep point; ``name`` is the point's, ``data`` pinned."""
    needs = _needs(t)
    hyper, seed = _point_hyper(t, point), point.get("seed", t.get("seed", 0))
    command = t.get("command")
    artifacts = list(t.get("artifacts", [])) if command else []
    jid = ids.job_id(model=t.get("model"), command=command, artifacts=artifacts,
                     data=data, hyper=hyper, seed=seed, needs=needs)
    return JobSpec(
        name=name, job_id=jid, model=t.get("model"),
        command=tuple(command) if command else None, artifacts=tuple(artifacts), data=data,
        hyper=hyper, seed=seed, priority=t.get("priority", DEFAULT_PRIORITY), needs=needs,
        prefer_cuda=t.get("prefer_cuda", False),
        prefer_cuda_grace_s=float(t.get("prefer_cuda_grace_s", PREFER_CUDA_GRACE_S)),
        allowed_hosts=tuple(t.get("allowed_hosts", ())), denied_hosts=tuple(t.get("denied_hosts", ())),
        timeout_s=t.get("timeout_s"), max_attempts=t.get("max_attempts"), line=table_line,
        checkpoint=checkpoint_dir(t["checkpoint"]) if "checkpoint" in t else None)


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


def _parse(text: str, path: str) -> dict:
    """tomllib's document, or a ManifestError that names the line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        if m:
            raise ManifestError([Problem(path, int(m.group(1)), "(syntax)", f"not valid TOML: {e}",
                                         "fix the TOML syntax at that line")]) from e
        raise ManifestError([_unclosed_problem(path, text, e)]) from e
    except RecursionError as e:  # tomllib recurses once per nesting level
        line = scan(text, MAX_NESTING).too_deep
        raise ManifestError([Problem(path, line, "(syntax)", f"nested more than {MAX_NESTING} levels deep",
                                     NESTING_FIX)]) from e


def _unclosed_problem(path: str, text: str, e: Exception) -> Problem:
    """At the end of the text tomllib names no line: name the one where the open construct began."""
    found = scan(text)
    if found.unclosed is None:
        return Problem(path, None, "(syntax)", f"not valid TOML: {e}", "fix the TOML syntax")
    what = found.unclosed
    where = f"; it is inside the {found.outer.kind} opened at line {found.outer.line}" if found.outer else ""
    return Problem(path, what.line, "(syntax)",
                   f"not valid TOML: {e}: the {what.kind} opened at line {what.line} is never closed{where}",
                   f"close it with {CLOSERS[what.kind]}")


def _too_deep(doc: dict, limit: int) -> tuple | None:
    """The key path of the first value nested more than ``limit`` tables or arrays deep.

    Iterative: later checks (and JSON) recurse over values, so the depth is bounded first.
    """
    todo: list[tuple[tuple, Any]] = [((), doc)]
    while todo:
        path, value = todo.pop()
        if len(path) > limit:
            return path[:limit + 1]
        if isinstance(value, dict):
            todo.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((path + (i,), v) for i, v in enumerate(value) if isinstance(v, (dict, list)))
    return None


def loads(text: str, path: str = "<manifest>", data: DataResolver | None = None) -> Manifest:
    """Validate manifest text; raise ManifestError listing every problem.

    ``data`` pins each job's data to its content (hashing local files, asking S3 for objects).
    """
    resolver = data or DataResolver()
    lines = LineMap(text)
    p = _Problems(path, lines)
    doc = _parse(text, path)
    if deep := _too_deep(doc, MAX_NESTING):
        raise ManifestError([Problem(path, lines.line(*deep), _field(deep[:8]) + "...",
                                     f"nested more than {MAX_NESTING} levels deep", NESTING_FIX)])
    written_jobs = doc.get("jobs", [])
    doc = _check_table(p, (), doc, TOP_LEVEL)
    if written_jobs == []:  # jobs of the wrong kind are reported as such, not also as missing
        p.add(("jobs",), "the manifest has no jobs", "add at least one [[jobs]] table")
    before = len(p.items)
    tiers = _tiers(p, doc.get("tiers"))
    # a broken [tiers] table would make jobs look unroutable: report it once, not once per job
    tiers_ok = len(p.items) == before
    hosts = _hosts(p, doc.get("hosts"), {t.name for t in tiers})
    routes = _Routes(tiers, hosts, defaults=not doc.get("tiers")) if tiers_ok else None
    base_dir = Path(path).resolve().parent if path != "<manifest>" else Path.cwd()
    jobs = _jobs(p, doc.get("jobs", []), base_dir, routes, resolver)
    if p.items:
        raise ManifestError(sorted(p.items, key=lambda x: (x.line is None, x.line or 0)))  # in file order
    return Manifest(path, tiers, hosts, jobs, dict(resolver.sources))


def load(path: str | os.PathLike, data: DataResolver | None = None) -> Manifest:
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
    with gc_paused():  # a large sweep's jobs are many small acyclic objects
        return loads(text, path, data)
