"""`fleet show JOB`: one job's record to read (``--json``: the whole record as JSON).

``show_rows`` is pure: the record as ``fleet.query.jobs.record_view`` gives it in, and
(label, value) rows out, only those that say something for this job.
"""

from __future__ import annotations

import json

from rich.console import Group
from rich.table import Table
from rich.text import Text

from core.ids import short_id
from fleet.query.pipeline import cancel_note


def _first_line(text: str | None) -> str:
    return next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")


def _metrics(metrics: dict | None) -> str:
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in (metrics or {}).items()
    )


def _where(v: dict) -> str:
    gpus = ", ".join(f"GPU {g['index']} {g['name']}".strip() for g in v.get("gpus") or [])
    cores = f"{v['cores']} cores" if v.get("cores") else ""
    hosts = v.get("gang_hosts") or ""
    where = (  # a gang: every member's host, by rank
        ", ".join(f"rank {r} {h}" for r, h in enumerate(hosts.split(",")))
        if hosts
        else v.get("worker") or ""
    )
    return ", ".join(p for p in (where, gpus, cores) if p)


def _progress(v: dict) -> str:
    """What it got to: a succeeded job's final metrics (the record's last tick may predate
    the last epochs), else its latest metrics and output line."""
    if v.get("state") == "succeeded" and isinstance(v.get("result"), dict):
        return _metrics(v["result"].get("metrics")) or "done"
    p = v.get("progress") or {}
    tail = [ln for ln in p.get("tail") or [] if ln]
    return "; ".join(s for s in (_metrics(p.get("metrics")), tail[-1] if tail else "") if s)


def _spec(spec: dict) -> str:
    what = (
        f"model {spec['model']}"
        if spec.get("model")
        else f"command {' '.join(spec.get('command') or [])}"
    )
    parts = [
        what,
        f"data {spec['data']}" if spec.get("data") else "",
        f"hyper {json.dumps(spec['hyper'])}" if spec.get("hyper") else "",
        f"seed {spec.get('seed', 0)}",
    ]
    return ", ".join(p for p in parts if p)


def _after(v: dict) -> str:
    """A follower's upstreams by name: ``prep, tune (search)``."""
    ups = [u for u in v.get("after") or [] if isinstance(u, dict)]
    return ", ".join(
        f"{u.get('name') or short_id(u.get('id', ''))}"
        + (" (search)" if u.get("kind") == "search" else "")
        for u in ups
    )


def _released(v: dict) -> str:
    """When its last upstream's success queued it, and which upstream that was."""
    if not v.get("released_at"):
        return ""
    by = v.get("released_by") or ""
    names = {f"{u.get('kind')}:{u.get('id')}": u.get("name") for u in v.get("after") or []}
    return f"{v['released_at']}" + (f" by {names.get(by) or by}" if by else "")


def _params(v: dict) -> str:
    """The values it trains with beyond its own hyper: a trial's, or params_from's search's
    best trial's (stored at release); its own hyper wins over these (docs/pipelines.md)."""
    params = v.get("params")
    if not isinstance(params, dict) or not params:
        return ""
    source = next(
        (u.get("name") for u in v.get("after") or [] if u.get("id") == v.get("params_from")), ""
    )
    text = json.dumps(params, sort_keys=True)
    return f"{text} (best of {source})" if source else text


def _inputs(v: dict) -> str:
    """Its inputs resolved at release: each folder under $FLEET_INPUTS and the job whose
    bundle fills it; before release, the names it will take them from."""
    resolved = [i for i in v.get("input_jobs") or [] if isinstance(i, dict)]
    if resolved:
        return ", ".join(f"{i.get('dir')}/ <- {short_id(i.get('job_id', ''))}" for i in resolved)
    declared = [i for i in v.get("inputs") or [] if isinstance(i, dict)]
    return ", ".join(f"{i.get('dir')}/ (at release)" for i in declared)


def show_rows(v: dict) -> list[tuple[str, str]]:
    """The rows of `fleet show` for record view ``v``, empty ones left out."""
    artifact = v.get("artifact") or {}
    rows = [
        ("state", v.get("state", "")),
        ("owner", v.get("owner") or ""),
        ("queue", v.get("queue") or ""),
        ("worker", _where(v)),
        ("runs", f"{v.get('runs', 0)} (attempts {v.get('attempts', 0)})" if v.get("runs") else ""),
        ("ran again", v.get("rerun_reason") or ""),  # why its latest run is not its first
        ("after", _after(v)),  # a pipeline's follower: its upstreams
        ("released", _released(v)),
        ("cancelled by", cancel_note(v.get("cancelled_by"))),
        ("params", _params(v)),
        ("inputs", _inputs(v)),
        ("created", v.get("created_at") or ""),
        ("started", v.get("started_at") or ""),
        ("finished", v.get("finished_at") or ""),
        ("progress", _progress(v)),
        ("ended", v.get("end_reason") or _first_line(v.get("last_error"))),
        (
            "artifact",
            f"{artifact['uri']} (sha256 {short_id(artifact['sha256'])}, {artifact['size']:,} bytes)"
            if artifact.get("uri")
            else "",
        ),
        ("preemptions", str(v["preemptions"]) if v.get("preemptions") else ""),
        ("spec", _spec(v.get("spec") or {})),
        ("unreadable", ", ".join(v.get("problems") or [])),
    ]
    return [(label, str(value)) for label, value in rows if value]


def render_show(v: dict) -> Group:
    """Its name and ID, then label/value rows; a long value wraps in its own column."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for label, value in show_rows(v):
        table.add_row(label, Text(value))
    return Group(Text(f"{v.get('name', '')} ({v.get('job_id', '')})", style="bold"), table)
