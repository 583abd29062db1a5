"""A manifest's pipeline edges: ``after``, ``inputs`` and ``params_from`` resolved to the jobs
and searches they name, checked, and folded into the followers' IDs.

The tables are read first (``manifest.jobs``), each with a provisional ID; here, in an order
where every upstream comes before its followers, each follower's ID is made again to cover
its upstreams' IDs (``manifest.ids``, the ``own`` dict): publishing the same pipeline again
sends nothing new, and a changed upstream gives new followers. A job without edges keeps the
ID it always had. A name is a table of this manifest (a job, a sweep: every point, a search)
or, through ``Published``, one already published (its latest publish).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from typing import Protocol

from core.constants import MAX_INPUTS
from manifest import ids
from manifest.hyper import TRAINERS
from manifest.pipeline import Input, Kind, Upstream
from manifest.problems import Problems
from manifest.schema import JobSpec
from manifest.search.spec import SearchSpec, search_id

EDGE_KEYS = ("after", "inputs", "params_from")


class Published(Protocol):
    """Names already published, for a manifest that starts after them (``fleet.manifests``
    reads the names index and the searches)."""

    def lookup(self, name: str) -> Upstream | None:
        """The job or search last published under ``name``, or None."""
        ...


@dataclass(frozen=True)
class Table:
    """What one ``[[jobs]]`` table became: its jobs (a sweep's points), or its search."""

    index: int
    name: str
    raw: dict  # its well-typed keys
    jobs: tuple[JobSpec, ...] = ()
    search: SearchSpec | None = None
    sweep: bool = False

    @property
    def edges(self) -> bool:
        return any(k in self.raw for k in EDGE_KEYS)


def provisional(t: dict) -> dict:
    """What a table's edges add to its provisional ID (before they are resolved): the names as
    written, so two tables alike but for their edges are not one job to the clash check."""
    written = {k: t[k] for k in EDGE_KEYS if k in t}
    return {"edges": written} if written else {}


def link(
    p: Problems, tables: list[Table], published: Published | None
) -> tuple[tuple[JobSpec, ...], tuple[SearchSpec, ...]]:
    """Every job and search, followers with their edges resolved and their IDs made again."""
    by_name = {t.name: t for t in tables}
    deps = {t.name: _names(p, t, by_name, published) for t in tables if t.edges}
    order = _order(p, tables, deps)
    done: dict[str, Table] = {}
    for t in order:
        done[t.name] = _linked(p, t, deps.get(t.name), done, published) if t.name in deps else t
    out = [done.get(t.name, t) for t in tables]
    return (
        tuple(j for t in out for j in t.jobs),
        tuple(t.search for t in out if t.search is not None),
    )


def _names(
    p: Problems, t: Table, by_name: dict[str, Table], published: Published | None
) -> dict[str, list[str]]:
    """Each edge key's names that resolve (unknown ones and a job after itself reported)."""
    out: dict[str, list[str]] = {}
    path = ("jobs", t.index)
    for key in EDGE_KEYS:
        written = t.raw.get(key)
        if written is None:
            continue
        names = [written] if isinstance(written, str) else list(written)
        good = []
        for name in names:
            if name == t.name:
                p.add(path + (key,), f"{t.name!r} cannot start after itself", f"remove {name!r}")
            elif name not in by_name and (published is None or published.lookup(name) is None):
                p.add(path + (key,), f"unknown job, sweep or search {name!r}", _fix(name, by_name))
            else:
                good.append(name)
        out[key] = good
    if "params_from" in t.raw and t.search is not None:
        p.add(
            path + ("params_from",),
            "params_from is for a job that trains with a search's best values, not a search",
            "remove params_from from this [jobs.search] table",
        )
    return out


def _fix(name: str, by_name: dict[str, Table]) -> str:
    close = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "name a job, sweep or search of this manifest, or one already published"


def _order(p: Problems, tables: list[Table], deps: dict[str, dict[str, list[str]]]) -> list[Table]:
    """The tables, every upstream of this manifest before its followers; a cycle reported at
    the table that closes it (its tables are then left out)."""
    by_name = {t.name: t for t in tables}
    ups = {n: [u for names in d.values() for u in names if u in by_name] for n, d in deps.items()}
    order: list[Table] = []
    state: dict[str, int] = {}  # 1: on the path being walked, 2: placed

    def visit(name: str, trail: list[str]) -> bool:
        if state.get(name) == 2:
            return True
        if state.get(name) == 1:
            loop = trail[trail.index(name) :] + [name]
            t = by_name[trail[-1]]
            p.add(
                ("jobs", t.index, "after" if "after" in t.raw else "inputs"),
                "the pipeline has a cycle: " + " -> ".join(loop),
                "remove one of these edges: a job cannot wait, even through others, for itself",
            )
            return False
        state[name] = 1
        ok = all([visit(u, trail + [name]) for u in dict.fromkeys(ups.get(name, ()))])
        state[name] = 2
        if ok:
            order.append(by_name[name])
        return ok

    for t in tables:
        visit(t.name, [])
    return order


def _upstreams(
    name: str, done: dict[str, Table], published: Published | None
) -> tuple[list[Upstream], list[Input]]:
    """What ``name`` stands for: its upstreams, and its inputs (a sweep: one per point)."""
    t = done.get(name)
    if t is None:
        u = published.lookup(name) if published is not None else None
        return ([u], [Input(name, name, u.kind, u.id)]) if u else ([], [])
    if t.search is not None:
        sid = t.search.search_id
        return [Upstream(Kind.SEARCH, sid, name)], [Input(name, name, Kind.SEARCH, sid)]
    return (
        [Upstream(Kind.JOB, j.job_id, j.name) for j in t.jobs],
        [Input(name, j.name if t.sweep else name, Kind.JOB, j.job_id) for j in t.jobs],
    )


def _linked(
    p: Problems,
    t: Table,
    names: dict[str, list[str]],
    done: dict[str, Table],
    published: Published | None,
) -> Table:
    after: dict[str, Upstream] = {}
    inputs: list[Input] = []
    for key in EDGE_KEYS:
        for name in names.get(key, []):
            ups, ins = _upstreams(name, done, published)
            after.update((u.member, u) for u in ups)
            if key == "inputs":
                inputs += ins
    if len(inputs) > MAX_INPUTS:
        p.add(
            ("jobs", t.index, "inputs"),
            f"takes {len(inputs):,} bundles as inputs (a sweep gives one per point); "
            f"a job may take at most {MAX_INPUTS:,}",
            "name fewer sweeps in inputs, or put those that need no files in after",
        )
    params_from = _params_from(p, t, names.get("params_from", []), done, published)
    edges = (tuple(after.values()), tuple(inputs), params_from)
    if t.search is not None:
        base = _with_edges(t.search.base, *edges)
        sid = search_id(ids.canonical(**content(base)), t.search.config)
        return replace(t, search=SearchSpec(sid, replace(base, search=sid), t.search.config))
    jobs = []
    for job in t.jobs:
        job = _with_edges(job, *edges)
        jobs.append(replace(job, job_id=ids.job_id(**content(job))))
    return replace(t, jobs=tuple(jobs))


def _params_from(
    p: Problems,
    t: Table,
    names: list[str],
    done: dict[str, Table],
    published: Published | None,
) -> str | None:
    """The search params_from names, checked: a search, whose values the job's trainer takes."""
    if not names or t.search is not None:
        return None
    (name,) = names
    path = ("jobs", t.index, "params_from")
    ups, _ = _upstreams(name, done, published)
    if len(ups) != 1 or ups[0].kind is not Kind.SEARCH:
        p.add(path, f"{name!r} is not a search", "name a [jobs.search] table's job")
        return None
    up = done.get(name)
    model = t.raw.get("model")
    if up is not None and up.search is not None and model in TRAINERS:
        unknown = [k for k in up.search.config.space if k not in TRAINERS[model]]
        if unknown:
            p.add(
                path,
                f"{name!r} searches {', '.join(unknown)}, which model {model!r} does not take",
                f"search only {model}'s hyperparameters ({', '.join(sorted(TRAINERS[model]))})",
            )
    return ups[0].id


def _with_edges(
    job: JobSpec, after: tuple[Upstream, ...], inputs: tuple[Input, ...], params_from: str | None
) -> JobSpec:
    return replace(job, after=after, inputs=inputs, params_from=params_from)


def content(job: JobSpec) -> dict:
    """``job``'s content as ``manifest.ids.canonical`` takes it, its edges in ``own``."""
    own = {
        "workdir": job.workdir,
        "requirements": list(job.requirements),
        "env_lock": job.env_lock,
        "python": job.python,
        "env": dict(job.env),
    }
    if job.after:
        own["after"] = sorted(u.member for u in job.after)
        own["inputs"] = [[i.dir, i.member] for i in job.inputs]
        own["params_from"] = job.params_from
    return {
        "model": job.model,
        "command": list(job.command) if job.command else None,
        "artifacts": list(job.artifacts),
        "data": job.data,
        "hyper": job.hyper,
        "seed": job.seed,
        "needs": job.needs,
        "own": own,
        "nodes": job.nodes,
    }
