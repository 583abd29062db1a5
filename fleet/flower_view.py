"""What Flower's pages show of fleet, as plain values: pure, tested without Flower.

``fleet.flower_extras`` hands these to Flower: ``format_task`` (Flower's option of that name)
adds a task's owner and the GPUs it holds as columns of the Tasks page, drops the worker
of a job that is queued again, and names every member's host of a gang (one task: its
members deliver the same message); ``worker_resources`` is the one line of GPUs and cores the
Workers page shows under each worker (from the heartbeat ``fleet hosts`` reads); ``PAGE_STYLE``
and ``PAGE_SCRIPT`` go into every page (a short ID; no pool controls, which mean nothing for
fleet's thread pool whose size is the host's resources). ``task_fields`` is a job's record as
Flower's task, for a Flower that starts after the jobs (it saw none of their events);
``sort_key`` sorts a queued job, which no worker has received yet, first by time.
"""

from __future__ import annotations

import ast
import html
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from celery import states
from celery.events.state import Task, Worker

from fleet.query.pipeline import Edge
from state.events import owner_repr
from state.jobrecord import JobRecord, JobState, ran_on

# the Tasks page's columns, in order: Flower's own slugs, and fleet's two (TASK_COLUMNS)
TASKS_COLUMNS = "name,uuid,state,waits,owner,gpus,received,runtime,worker"
# a pipeline's follower waits PENDING until its upstreams succeed: the column says on what
TASK_COLUMNS = {"owner": "Owner", "gpus": "GPUs", "waits": "Waits for"}
QUEUED = ("PENDING",)  # states of a job waiting in its queue: no worker holds it
PRUNED = "PRUNED"  # a trial its search stopped early (tasks.events.pruned): not a SUCCESS
# a job's state as Flower's task state (Celery's names; PRUNED is fleet's own)
TASK_STATES = {
    JobState.QUEUED: states.PENDING,
    JobState.WAITING: states.PENDING,  # no message pushed yet: Celery has no nearer state
    JobState.RUNNING: states.STARTED,
    JobState.SUCCEEDED: states.SUCCESS,
    JobState.FAILED: states.FAILURE,
    JobState.CANCELLED: states.REVOKED,
    JobState.PRUNED: PRUNED,
}
# the task's time field that says when it ended, by its state
ENDED_AT = {
    states.SUCCESS: "succeeded",
    PRUNED: "succeeded",
    states.FAILURE: "failed",
    states.REVOKED: "revoked",
}
TIME_SORTS = ("received", "started")  # sorts by a time a queued job has not reached yet
_HERE = Path(__file__).with_name("flower_ui")
PAGE_STYLE = (_HERE / "fleet.css").read_text(encoding="utf-8")
PAGE_SCRIPT = (_HERE / "fleet.js").read_text(encoding="utf-8")
SEARCH_PAGE = (_HERE / "search.html").read_text(encoding="utf-8")
SEARCH_SCRIPT = (_HERE / "search.js").read_text(encoding="utf-8")


def owner_of(kwargs_repr: Any) -> str:
    """The owner a task's keyword arguments name (``{'owner': 'dave'}``, state.events), or ''."""
    try:
        kwargs = ast.literal_eval(kwargs_repr) if isinstance(kwargs_repr, str) else kwargs_repr
    except (ValueError, SyntaxError):
        return ""
    owner = kwargs.get("owner") if isinstance(kwargs, dict) else None
    return owner if isinstance(owner, str) else ""


def gpus_text(gpus: Any) -> str:
    """The GPUs a run holds, as its progress events list their indices: ``[0]`` -> ``GPU 0``,
    ``[0, 1]`` -> ``GPUs 0,1``, ``[]`` -> ``none`` (a bare ``0`` reads as no GPU); unknown: ''."""
    if not isinstance(gpus, (list, tuple)):
        return ""
    if not gpus:
        return "none"
    return ("GPU " if len(gpus) == 1 else "GPUs ") + ",".join(str(i) for i in gpus)


def gpu_indices(gpu: str) -> list[int] | None:
    """A record's ``gpu`` field (``0:NVIDIA H100,1:NVIDIA H100``) as indices; None: unreadable."""
    try:
        return [int(part.partition(":")[0]) for part in gpu.split(",") if part.strip()]
    except ValueError:
        return None


def waits_text(edges: Iterable[Edge]) -> str:
    """The Waits for cell of a waiting follower: ``prep (running), tune (search running)``,
    the upstreams it still waits on ('' for any other job)."""
    return ", ".join(e.label() for e in edges if e.awaited)


def task_fields(rec: JobRecord, edges: Iterable[Edge] = ()) -> dict[str, Any]:
    """A job's record as Flower's task fields (``Task(uuid, **fields)``): its name, state,
    owner, queue, times and how it ended, as Flower would know them had it seen the events;
    a waiting follower's ``waits``, from its upstreams as they stand (``edges``)."""
    state = TASK_STATES[rec.state]
    out: dict[str, Any] = {
        "name": rec.name,
        "state": state,
        "args": f"({rec.name!r})",
        "kwargs": owner_repr(rec.owner),
        "routing_key": rec.queue or rec.pri_queue or None,
        "sent": rec.queued_at or rec.created_at,
        "timestamp": rec.finished_at or rec.started_at or rec.queued_at or rec.created_at,
        "retries": max(rec.runs - 1, 0),
    }
    if rec.state is JobState.WAITING:
        out["waits"] = waits_text(edges)
    if state in QUEUED:
        return out
    out.update(received=rec.started_at, started=rec.started_at, gpus=gpu_indices(rec.gpu))
    if rec.gang_hosts:
        out["gang_hosts"] = rec.gang_hosts.split(",")
    if state == states.STARTED:
        return out
    out[ENDED_AT[state]] = rec.finished_at
    if rec.started_at and rec.finished_at:
        out["runtime"] = max(rec.finished_at - rec.started_at, 0.0)
    if state == states.FAILURE:
        out["exception"] = rec.end_detail or rec.last_error or rec.reason
    else:
        out["result"] = rec.reason or (rec.result and repr(rec.result))
    return out


def sort_key(flower_key, task, sort_by: str, task_id: str):
    """Flower's sort key, except that a queued job (no worker has received it) sorts as the
    latest by ``received`` or ``started``: Flower's default order (newest received first)
    shows it on page 1, not after every job that ran."""
    if sort_by in TIME_SORTS and getattr(task, sort_by, None) is None and task.state in QUEUED:
        return True, float("inf"), task_id
    return flower_key(task, sort_by, task_id)


class FleetTask(Task):
    """Flower's task state (``EventsState.Task``) with fleet's fields: what a run's events
    say beyond Celery's own is kept, copied (Flower copies a task before formatting it, and a
    copy keeps only ``_fields``) and exported."""

    owner = gpus = gang_hosts = waits = None
    _fields = Task._fields + tuple(TASK_COLUMNS) + ("gang_hosts",)


def format_task(task):
    """Flower's ``format_task``: ``task`` is Flower's copy of a task (a ``FleetTask``).

    Fills ``owner`` and ``gpus`` as the Tasks page shows them; a queued job shows no worker
    (a requeued job's task still names the worker of the run that was cancelled)."""
    queued = task.state in QUEUED
    task.owner = owner_of(task.kwargs)
    if not queued:  # what it waited on is over once a worker has it
        task.waits = ""
    task.gpus = "" if queued else gpus_text(getattr(task, "gpus", None))
    if task.state == PRUNED and task.runtime is None and task.started and task.succeeded:
        # Celery times a run only on task-succeeded: a pruned trial ran as long all the same
        task.runtime = max(task.succeeded - task.started, 0.0)
    if queued:
        task.worker = None
    elif hosts := hosts_text(getattr(task, "gang_hosts", None)):
        # a gang's members each deliver the one task: the last to send an event is no more
        # its worker than the others (fleet status says the same)
        task.worker = Worker(hostname=hosts)
    return task


def worker_name(host: str, nodes: Mapping[str, str]) -> str:
    """The Worker cell of a job whose record names ``host``: the Celery node name its worker
    runs as (``local-cpu@box``, as the tasks Flower saw run name it, and Flower's worker page
    is keyed by), from ``nodes`` (host -> node name, its heartbeat's); the host when unknown."""
    return nodes.get(host) or host


def hosts_text(gang_hosts: Any) -> str:
    """A gang's members' hosts by rank as `fleet status` shows them, ``ga + gb``; '' for
    anything else (a one-host job has none)."""
    if not isinstance(gang_hosts, (list, tuple)):
        return ""
    return ran_on(None, gang_hosts)


def worker_resources(heartbeat: Mapping[str, Any] | None) -> str:
    """``2 GPUs (sim-A100-80GB 80 GiB), 16 cores, 64 GiB RAM`` from a heartbeat's capability."""
    cap = (heartbeat or {}).get("capability") or {}
    if not cap:
        return ""
    gpus = cap.get("cuda_devices") or []
    parts = [
        f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}" + (f" ({_models(gpus)})" if gpus else "")
    ]
    parts.append(f"{cap.get('cpu_cores', '?')} cores")
    if cap.get("ram_total_gib") is not None:
        parts.append(f"{cap['ram_total_gib']:g} GiB RAM")
    return ", ".join(parts)


def _models(gpus: Iterable[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for g in gpus:
        label = f"{g.get('name', 'GPU')} {g.get('vram_total_gib', 0):g} GiB"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(label if n == 1 else f"{n}x {label}" for label, n in counts.items())


def with_page_extras(html: bytes) -> bytes:
    """A Flower page with fleet's style in its head and fleet's script at the end of its body."""
    style = f'<style id="fleet-style">{PAGE_STYLE}</style>'.encode()
    script = f'<script id="fleet-script">{PAGE_SCRIPT}</script>'.encode()
    if b"</head>" in html:
        html = html.replace(b"</head>", style + b"</head>", 1)
    if b"</body>" in html:
        head, _, tail = html.rpartition(b"</body>")
        html = head + script + b"</body>" + tail
    return html


def _filled(template: str, **values: str) -> str:
    # the page's CSS has braces of its own: only the named slots are filled
    for k, v in values.items():
        template = template.replace("{" + k + "}", v)
    return template


def search_page(name: str, prefix: str) -> str:
    """The live page of the search ``name``; its script draws ``/fleet/api/search/NAME``."""
    url = html.escape(f"{prefix}/fleet/api/search/{quote(name, safe='')}")
    main = (
        f'<main id="fleet-search" data-url="{url}"><h1>search {html.escape(name)}</h1>'
        '<p id="fleet-summary">loading...</p><p id="fleet-problem"></p>'
        '<div id="fleet-facts"></div><div id="fleet-chart"></div><p id="fleet-legend"></p>'
        '<div id="fleet-board"></div><div id="fleet-pbt"></div></main>'
    )
    return _filled(
        SEARCH_PAGE,
        title=html.escape(name),
        home=html.escape(prefix),
        main=main,
        script=SEARCH_SCRIPT,
    )


def search_index(rows: Iterable[Mapping[str, Any]], prefix: str) -> str:
    """The page that lists every search, each a link to its live page, with its status line."""
    items = "".join(
        f'<li><a href="{html.escape(prefix)}/fleet/search/{quote(r["name"], safe="")}">'
        f"{html.escape(r['name'])}</a>: {html.escape(r['summary'])}</li>"
        for r in rows
    )
    body = f'<ul class="fleet-searches">{items}</ul>' if items else "<p>No searches yet.</p>"
    return _filled(
        SEARCH_PAGE,
        title="searches",
        home=html.escape(prefix),
        main=f"<main><h1>Searches</h1>{body}</main>",
        script="",
    )


def json_text(data: Any) -> str:
    """``data`` as JSON a browser parses: a value that is not finite is null."""

    def finite(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v

    return json.dumps(finite(data), separators=(",", ":"), default=str)
