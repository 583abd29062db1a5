"""The ``[[jobs]]`` tables to job specs: each table checked, its data pinned once, its
sweep expanded, its routing checked, and every name and job ID unique."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from core.constants import DEFAULT_PRIORITY, PREFER_CUDA_GRACE_S
from core.errors import DataProblem
from manifest import ids
from manifest.checkpoint import checkpoint_dir
from manifest.dataref import PinnedWorkdir
from manifest.edges import Published, Table, link, provisional
from manifest.fields import check_table, read_needs
from manifest.hooks import DataPinner, RouteCheck, Routes
from manifest.hyper import resolve_hyper
from manifest.jobchecks import JOB_FIELDS, job_problems, unsupported_data
from manifest.problems import Problems, field_name
from manifest.schema import JobSpec
from manifest.search.config import SearchConfig
from manifest.search.parse import read_config
from manifest.search.spec import SearchSpec, search_id
from manifest.sweep import hyper_problems, point_name, sweep_points

# fields outside the job ID (manifest.ids): a problem in one of them still lets us compare IDs
NOT_IN_ID = {
    "name",
    "priority",
    "prefer_cuda",
    "prefer_cuda_grace_s",
    "allowed_hosts",
    "denied_hosts",
    "timeout_s",
    "max_attempts",
    "checkpoint",
    "preemptible",
}
# what routing reads: when all of these that are written are well-typed, routing can be checked
ROUTING_FIELDS = (
    "require_cuda",
    "prefer_cuda",
    "min_vram_gib",
    "min_ram_gib",
    "min_cores",
    "gpus",
    "share_gpu",
    "allowed_hosts",
    "denied_hosts",
)


@dataclass(frozen=True)
class JobReading:
    """What reading the jobs takes beyond their tables.

    ``routes`` is None when the tiers have problems of their own (every job would look
    unroutable), ``check_route`` None when the caller checks no routing.
    """

    base_dir: Path  # data paths are relative to the manifest's directory
    pin_data: DataPinner
    routes: Routes | None = None
    check_route: RouteCheck | None = None
    published: Published | None = None  # names already published, for edges to them


class _Unique:
    """Job names and IDs seen so far, so that a clash is reported at the second job."""

    def __init__(self):
        self.names: dict[str, tuple] = {}  # job name -> path of its table
        self.ids: dict[str, str] = {}  # job ID -> job name

    def name_taken(self, p: Problems, path: tuple, name: str) -> bool:
        if name in self.names:
            p.add(
                path + ("name",),
                f"duplicate job name {name!r} (first at {field_name(self.names[name])})",
                "give each job a unique name",
            )
            return True
        self.names[name] = path
        return False

    def id_taken(self, p: Problems, path: tuple, job: JobSpec) -> bool:
        if job.job_id in self.ids:
            p.add(
                path,
                f"job {job.name!r} has the same content as {self.ids[job.job_id]!r} (same job ID), "
                "so only one of them would run",
                "change its seed, data or hyper, or remove one",
            )
            return True
        self.ids[job.job_id] = job.name
        return False


def read_jobs(
    p: Problems, raw: list, reading: JobReading
) -> tuple[tuple[JobSpec, ...], tuple[SearchSpec, ...]]:
    """Every job of every table, sweep points expanded; and the searches (a table with
    ``[jobs.search]`` is a search, whose trials are published as it runs)."""
    tables: list[Table] = []
    unique = _Unique()
    for i, table in enumerate(raw or []):
        path = ("jobs", i)
        mark = len(p.paths)
        t = check_table(p, path, table, JOB_FIELDS)
        job_problems(p, path, t, set(table))
        data = _pin_data(p, path, t, reading)  # once per table, not per sweep point
        code = _pin_workdir(p, path, t, reading)
        points = sweep_points(p, path, t)
        hyper_problems(p, path, t)
        config = read_config(p, path, t)
        # a problem in the job's content would make its ID (and so an ID clash) meaningless
        content_ok = not any(len(q) > 2 and q[2] not in NOT_IN_ID for q in p.since(mark))
        if all(key in t for key in ROUTING_FIELDS if key in table):
            _routing_problems(p, path, t, reading)
        if "search" in t and t.get("name", "").strip():
            if config is not None and content_ok and not unique.name_taken(p, path, t["name"]):
                search = _search(t, config, (data, code), p.lines.line(*path))
                tables.append(Table(i, t["name"], t, search=search))
            elif t["name"] not in {x.name for x in tables}:  # reported; still a name edges know
                tables.append(Table(i, t["name"], t))
        elif t.get("name", "").strip():
            jobs = _points(p, path, t, points, (data, code), unique, content_ok)
            tables.append(Table(i, t["name"], t, tuple(jobs), sweep="sweep" in t))
    return link(p, tables, reading.published)


def _search(
    t: dict,
    config: SearchConfig,
    pins: tuple[str | None, PinnedWorkdir | None],
    table_line: int | None,
) -> SearchSpec:
    """Table ``t``'s search: its base job (the fixed hyper, defaults filled) and its id."""
    base = _build_job(t, {}, t["name"], pins, table_line)
    sid = search_id(
        ids.canonical(
            model=base.model,
            command=list(base.command) if base.command else None,
            artifacts=list(base.artifacts),
            data=base.data,
            hyper=base.hyper,
            seed=base.seed,
            needs=base.needs,
            own={**own_code(t, pins[1]), **provisional(t)},
            nodes=base.nodes,  # a search of gangs is not the same search on one host
        ),
        config,
    )
    return SearchSpec(sid, replace(base, search=sid), config)


def _points(
    p: Problems,
    path: tuple,
    t: dict,
    points: list[dict],
    pins: tuple[str | None, PinnedWorkdir | None],
    unique: _Unique,
    content_ok: bool,
) -> list[JobSpec]:
    """The jobs of table ``t``, one per sweep point, skipping clashes (reported)."""
    out = []
    table_line = p.lines.line(*path)
    for point in points:
        name = point_name(t["name"], point)
        if unique.name_taken(p, path, name) or not content_ok:
            continue
        job = _build_job(t, point, name, pins, table_line)
        if not unique.id_taken(p, path, job):
            out.append(job)
    return out


def _pin_data(p: Problems, path: tuple, t: dict, reading: JobReading) -> str | None:
    """The job's data pinned to its content, or None (and a problem) when it cannot be."""
    data = t.get("data")
    if not data or unsupported_data(data):
        return None  # no data, or an unsupported URI (reported by job_problems)
    try:
        return reading.pin_data.pin(data, reading.base_dir)
    except DataProblem as e:
        p.add(path + ("data",), e.message, e.fix)
        return None


def _pin_workdir(p: Problems, path: tuple, t: dict, reading: JobReading) -> PinnedWorkdir | None:
    """The job's workdir pinned to the files that travel, or None (and a problem)."""
    if "workdir" not in t:
        return None
    reqs = t.get("requirements")
    try:
        code = reading.pin_data.pin_workdir(
            t["workdir"], reading.base_dir, reqs if isinstance(reqs, str) else None
        )
    except DataProblem as e:
        p.add(path + ("workdir",), e.message, e.fix)
        return None
    if "python" in t and not reqs and code.lock is None:
        p.add(
            path + ("python",),
            "python is the version of the job's own environment, but the workdir "
            "has no uv.lock (with pyproject.toml) and the job no requirements",
            "add requirements = [...], or remove python",
        )
    return code


def own_code(t: dict, code: PinnedWorkdir | None) -> dict:
    """The job's workdir URI and environment definition, as its spec and ID carry them."""
    reqs = t.get("requirements", [])
    if isinstance(reqs, str):
        reqs = list(code.requirements or ()) if code else []
    # requirements written win over a uv.lock that happens to be in the workdir
    lock = code.lock if code and "requirements" not in t else None
    return {
        "workdir": code.uri if code else None,
        "requirements": list(reqs),
        "env_lock": lock,
        "python": t.get("python"),
        "env": dict(t.get("env", {})),
    }


def _routing_problems(p: Problems, path: tuple, t: dict, reading: JobReading) -> None:
    """What the route check finds in the job; it needs only the routing fields, no ID."""
    if reading.routes is None or reading.check_route is None:
        return
    probe = JobSpec(
        name=t.get("name") or field_name(path),
        job_id="",
        model=t.get("model"),
        needs=read_needs(t),
        prefer_cuda=t.get("prefer_cuda", False),
        allowed_hosts=tuple(t.get("allowed_hosts", ())),
        denied_hosts=tuple(t.get("denied_hosts", ())),
    )
    for found in reading.check_route(probe, reading.routes):
        p.add(path + ((found.key,) if found.key else ()), found.message, found.fix)


def _point_hyper(t: dict, point: dict) -> dict:
    """The job's hyper at one sweep point, with a trainer's defaults filled in."""
    hyper = {**t.get("hyper", {}), **{k: v for k, v in point.items() if k != "seed"}}
    return resolve_hyper(t["model"], hyper) if "model" in t else hyper


def _build_job(
    t: dict,
    point: dict,
    name: str,
    pins: tuple[str | None, PinnedWorkdir | None],
    table_line: int | None,
) -> JobSpec:
    """One job of table ``t`` at a sweep point; ``name`` is the point's, data and workdir pinned."""
    data, code = pins
    own = own_code(t, code)
    needs = read_needs(t)
    edges = provisional(t)  # made again once the edges are resolved (manifest.edges)
    hyper, seed = _point_hyper(t, point), point.get("seed", t.get("seed", 0))
    command = t.get("command")
    artifacts = list(t.get("artifacts", [])) if command else []
    jid = ids.job_id(
        model=t.get("model"),
        command=command,
        artifacts=artifacts,
        data=data,
        hyper=hyper,
        seed=seed,
        needs=needs,
        own={**own, **edges},
        nodes=t.get("nodes", 1),
    )
    return JobSpec(
        name=name,
        job_id=jid,
        model=t.get("model"),
        command=tuple(command) if command else None,
        artifacts=tuple(artifacts),
        data=data,
        hyper=hyper,
        seed=seed,
        priority=t.get("priority", DEFAULT_PRIORITY),
        needs=needs,
        prefer_cuda=t.get("prefer_cuda", False),
        prefer_cuda_grace_s=float(t.get("prefer_cuda_grace_s", PREFER_CUDA_GRACE_S)),
        allowed_hosts=tuple(t.get("allowed_hosts", ())),
        denied_hosts=tuple(t.get("denied_hosts", ())),
        timeout_s=t.get("timeout_s"),
        max_attempts=t.get("max_attempts"),
        line=table_line,
        checkpoint=checkpoint_dir(t["checkpoint"]) if "checkpoint" in t else None,
        workdir=own["workdir"],
        requirements=tuple(own["requirements"]),
        env_lock=own["env_lock"],
        python=own["python"],
        env=own["env"],
        preemptible=t.get("preemptible", False),
        owner=t.get("owner"),
        nodes=t.get("nodes", 1),
    )
