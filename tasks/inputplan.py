"""What a released pipeline follower starts with, decided from its record and its upstreams'
records as plain values: the hyperparameters it runs with (params_from's values under its
own) and the bundles it fetches as inputs. Pure: ``tasks.inputs`` reads and fetches.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from artifacts.inputs import Wanted
from core.constants import BUNDLE_NAME
from core.errors import InputUnavailable
from core.ids import short_id
from manifest.pipeline import Kind, Upstream
from state.jobrecord import JobRecord, JobState

GAVE = (JobState.SUCCEEDED, JobState.PRUNED)  # an upstream in these states has its bundle


@dataclass(frozen=True)
class Merged:
    """A follower's hyperparameters with params_from's values, and what its run's log says of
    where each came from."""

    hyper: dict
    lines: tuple[str, ...]


def merge_params(own: Mapping, params: Mapping, source: str) -> Merged:
    """``params`` (a search's best trial's values) under ``own`` (the job's hyper): the job's
    own value wins on a key both have. ``source`` names the search in the lines."""
    hyper = {**params, **own}
    taken = [k for k in params if k not in own]
    kept = [k for k in params if k in own]
    lines = []
    if taken:
        values = ", ".join(f"{k}={_shown(params[k])}" for k in taken)
        lines.append(f"params_from {source}: {values} (its best trial's)")
    if kept:
        values = ", ".join(f"{k}={_shown(own[k])} (not {_shown(params[k])})" for k in kept)
        lines.append(f"params_from {source}: the job's own {values}")
    return Merged(hyper, tuple(lines))


def source_name(after: Iterable[Upstream], search_id: str) -> str:
    """How the run's log names the params_from search: ``search tune``."""
    names = [u.name for u in after if u.kind is Kind.SEARCH and u.id == search_id]
    return f"search {names[0] if names else short_id(search_id)}"


def missing_params(source: str, job_name: str) -> InputUnavailable:
    return InputUnavailable(
        f"params_from {source}: the job's record holds no values from it (released before "
        f"the search had a best trial?); run it again (`fleet requeue {job_name}`) once the "
        "search has one"
    )


def plan(
    job_name: str,
    declared: Iterable[str],
    input_jobs: Iterable[Mapping],
    upstreams: Mapping[str, JobRecord],
) -> list[Wanted]:
    """The bundles to fetch, one per resolved input (``input_jobs``: ``{dir, job_id}`` as the
    release wrote them), from each upstream job's record (``upstreams`` by job ID). Each
    declared input folder (``declared``) must be among them. InputUnavailable names the input,
    its upstream and what to do when one cannot give its bundle."""
    wanted = [
        _wanted(job_name, e["dir"], e["job_id"], upstreams.get(e["job_id"])) for e in input_jobs
    ]
    resolved = {w.dir for w in wanted}
    for d in declared:
        if d not in resolved:
            raise InputUnavailable(
                f"input {d}: the job's record names no upstream job for it (its upstream gave "
                f"no bundle when this job was released); run it again (`fleet requeue "
                f"{job_name}`) once {d} has succeeded"
            )
    return wanted


def _wanted(job_name: str, name: str, job_id: str, rec: JobRecord | None) -> Wanted:
    if rec is None:
        raise InputUnavailable(
            f"input {name}: upstream job {short_id(job_id)} has no record (deleted, or lost "
            f"with Redis's data); publish it again, then run this job again "
            f"(`fleet requeue {job_name}`)"
        )
    art = rec.artifact or {}
    uri, sha256 = str(art.get("uri") or ""), str(art.get("sha256") or "")
    if rec.state not in GAVE or not uri or not sha256:
        now = rec.state.value if rec.state not in GAVE else "recorded without a bundle"
        raise InputUnavailable(
            f"input {name}: upstream {rec.name} ({short_id(job_id)}) is {now}, so it has no "
            f"bundle to give; run this job again (`fleet requeue {job_name}`) once "
            f"{rec.name} succeeded"
        )
    return Wanted(name, rec.name, job_id, bundle_kind(uri, sha256, name), sha256)


def bundle_kind(uri: str, sha256: str, name: str) -> str:
    """The store folder of the bundle a record names (``<store>/<kind>/<sha256>/bundle...``)."""
    parts = uri.rstrip("/").split("/")
    if len(parts) < 4 or parts[-1] != BUNDLE_NAME or parts[-2] != sha256:
        raise InputUnavailable(
            f"input {name}: its upstream's record names bundle {uri!r}, not "
            f"<store>/<kind>/{sha256}/{BUNDLE_NAME}; the record was changed by hand: run the "
            "upstream again"
        )
    return parts[-3]


def _shown(value) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)
