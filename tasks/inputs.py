"""A released pipeline follower's start on a worker (docs/pipelines.md): the values its
release stored (params_from: the search's best trial's) merged under its own hyper, and its
upstreams' bundles fetched through the store into ``$FLEET_INPUTS/<dir>/``
(``artifacts.inputs``). What to fetch and how values merge is decided in
``tasks.inputplan``; this module reads the records and fetches.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from artifacts import inputs as fetched
from core.constants import DATA_CACHE_DIR
from core.ids import short_id
from manifest.schema import JobSpec
from state import jobrecord
from tasks import inputplan
from tasks.host import HostContext
from tasks.retry import retry_redis
from tasks.run import Run

log = logging.getLogger("fleet.inputs")
# what the release wrote in the follower's record (state/lua/release.lua)
EDGE_FIELDS = ("input_jobs", "params", "params_from")
UPSTREAM_FIELDS = ("name", "state", "artifact")  # what says where an upstream's bundle is


@dataclass(frozen=True)
class Started:
    """What the run starts with: its job with params_from's values in its hyper, and the
    folder of its inputs (None: it takes none)."""

    job: JobSpec
    inputs: Path | None = None


def prepare(ctx: HostContext, run: Run) -> Started:
    """The run's hyper and inputs from its record (a job without edges reads nothing): the
    lines saying where its values and inputs came from go to its log (`fleet logs`)."""
    job = run.job
    if not (job.inputs or job.params_from or job.search):  # a search's trial: its inputs too
        return Started(job)
    rec = retry_redis(
        lambda: jobrecord.fetch(ctx.redis, job.job_id, EDGE_FIELDS),
        what="read the job's inputs",
        stop=ctx.shutdown,
    )
    if rec is None:  # claimed, so recorded: only a record deleted since has none
        return Started(job)
    hyper = _hyper(job, rec, run)
    wanted = inputplan.plan(
        job.name, [i.dir for i in job.inputs], rec.input_jobs or [], _upstreams(ctx, rec)
    )
    if not wanted:  # a trial of a search without inputs: no store opened
        return Started(replace(job, hyper=hyper))
    folder = fetched.fetch(
        wanted,
        ctx.work_root / DATA_CACHE_DIR,
        ctx.open_store(None),
        run.work.parent,  # the run's folder: its pins apart from its data's (owned by work)
        ctx.settings.data_cache_bytes,
    )
    for w in wanted:
        _say(run, f"input {w.folder}/: {w.upstream}'s bundle (sha256 {short_id(w.sha256)})")
    return Started(replace(job, hyper=hyper), folder)


def _hyper(job: JobSpec, rec: jobrecord.JobRecord, run: Run) -> dict:
    """The job's hyper with its params_from values under it (a trial's own ``params`` are
    its search's choice, already in its hyper)."""
    sid = rec.params_from or job.params_from
    if not sid:
        return job.hyper
    source = inputplan.source_name(job.after, sid)
    if rec.params is None:
        raise inputplan.missing_params(source, job.name)
    merged = inputplan.merge_params(job.hyper, rec.params, source)
    for line in merged.lines:
        _say(run, line)
    return merged.hyper


def _upstreams(ctx: HostContext, rec: jobrecord.JobRecord) -> dict[str, jobrecord.JobRecord]:
    ids = [e["job_id"] for e in rec.input_jobs or []]
    if not ids:
        return {}
    found = retry_redis(
        lambda: jobrecord.fetch_many(ctx.redis, ids, UPSTREAM_FIELDS),
        what="read the upstreams' bundles",
        stop=ctx.shutdown,
    )
    return {r.job_id: r for r in found}


def _say(run: Run, line: str) -> None:
    log.info("%s (%s): %s", run.job.name, short_id(run.job.job_id), line)
    run.output.append(line)
