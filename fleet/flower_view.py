"""What Flower's pages show of fleet, as plain values: pure, tested without Flower.

``fleet.flower_extras`` hands these to Flower: ``format_task`` (Flower's option of that name)
adds a task's owner and the GPUs it holds as columns of the Tasks page, and drops the worker
of a job that is queued again; ``worker_resources`` is the one line of GPUs and cores the
Workers page shows under each worker (from the heartbeat ``fleet hosts`` reads); ``PAGE_STYLE``
and ``PAGE_SCRIPT`` go into every page (a short ID; no pool controls, which mean nothing for
fleet's thread pool whose size is the host's resources).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from celery.events.state import Task

# the Tasks page's columns, in order: Flower's own slugs, and fleet's two (TASK_COLUMNS)
TASKS_COLUMNS = "name,uuid,state,owner,gpus,received,runtime,worker"
TASK_COLUMNS = {"owner": "Owner", "gpus": "GPUs"}
QUEUED = ("PENDING",)  # states of a job waiting in its queue: no worker holds it
_HERE = Path(__file__).with_name("flower_ui")
PAGE_STYLE = (_HERE / "fleet.css").read_text(encoding="utf-8")
PAGE_SCRIPT = (_HERE / "fleet.js").read_text(encoding="utf-8")


def owner_of(kwargs_repr: Any) -> str:
    """The owner a task's keyword arguments name (``{'owner': 'dave'}``, state.events), or ''."""
    try:
        kwargs = ast.literal_eval(kwargs_repr) if isinstance(kwargs_repr, str) else kwargs_repr
    except (ValueError, SyntaxError):
        return ""
    owner = kwargs.get("owner") if isinstance(kwargs, dict) else None
    return owner if isinstance(owner, str) else ""


def gpus_text(gpus: Any) -> str:
    """The GPUs a run holds, as its progress events list their indices: ``[0, 1]`` -> ``0,1``."""
    if not isinstance(gpus, (list, tuple)):
        return ""
    return ",".join(str(i) for i in gpus)


class FleetTask(Task):
    """Flower's task state (``EventsState.Task``) with fleet's fields: what a run's events
    say beyond Celery's own is kept, copied (Flower copies a task before formatting it, and a
    copy keeps only ``_fields``) and exported."""

    owner = gpus = None
    _fields = Task._fields + tuple(TASK_COLUMNS)


def format_task(task):
    """Flower's ``format_task``: ``task`` is Flower's copy of a task (a ``FleetTask``).

    Fills ``owner`` and ``gpus`` as the Tasks page shows them; a queued job shows no worker
    (a requeued job's task still names the worker of the run that was cancelled)."""
    queued = task.state in QUEUED
    task.owner = owner_of(task.kwargs)
    task.gpus = "" if queued else gpus_text(getattr(task, "gpus", None))
    if queued:
        task.worker = None
    return task


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
