"""Read and validate a manifest: every problem at once, each with file, line, field and fix.

Nothing is published from a manifest that has any problem. The nouns are read in their own
modules (``tiers``, ``hosts``, ``jobs``, ``sweep``); pinning data and routing jobs are
passed in (``manifest.hooks``): ``fleet.manifests`` loads with the real ones.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.gcpause import gc_paused
from manifest.edges import Published
from manifest.fields import check_table
from manifest.hooks import DataPinner, RouteCheck, Routes, Unpinned
from manifest.hosts import read_hosts
from manifest.jobs import JobReading, read_jobs
from manifest.lines import LineMap
from manifest.parse import parse, read_text
from manifest.problems import Problems
from manifest.schema import HostPolicy, Manifest, TierSpec
from manifest.tiers import read_tiers

TOP_LEVEL = {"tiers": "table", "hosts": "table", "jobs": "tables"}
NO_FILE = "<manifest>"  # the path of text that was not read from a file


def loads(
    text: str,
    path: str = NO_FILE,
    *,
    pin_data: DataPinner | None = None,
    check_route: RouteCheck | None = None,
    published: Published | None = None,
) -> Manifest:
    """Validate manifest text; raise ManifestError listing every problem.

    ``pin_data`` pins each job's data to its content (without it, data stays as written);
    ``check_route`` reports jobs no tier or host can take (without it, none is checked);
    ``published`` resolves the names in after/inputs/params_from that the manifest does not
    define (without it, such a name is unknown).
    """
    pinner = pin_data if pin_data is not None else Unpinned()
    lines = LineMap(text)
    p = Problems(path, lines)
    doc = parse(text, path, lines)
    written_jobs = doc.get("jobs", [])
    doc = check_table(p, (), doc, TOP_LEVEL)
    if written_jobs == []:  # jobs of the wrong kind are reported as such, not also as missing
        p.add(("jobs",), "the manifest has no jobs", "add at least one [[jobs]] table")
    tiers, hosts, routes = _placement(p, doc)
    base_dir = Path(path).resolve().parent if path != NO_FILE else Path.cwd()
    jobs, searches = read_jobs(
        p, doc.get("jobs", []), JobReading(base_dir, pinner, routes, check_route, published)
    )
    p.raise_any()
    return Manifest(path, tiers, hosts, jobs, dict(pinner.sources), searches)


def _placement(
    p: Problems, doc: dict
) -> tuple[tuple[TierSpec, ...], dict[str, HostPolicy], Routes | None]:
    """The tiers and host policies; what routing checks need, or None when the tiers are
    broken (every job would look unroutable: the tier is reported once, not once per job)."""
    before = len(p.items)
    tiers = read_tiers(p, doc.get("tiers"))
    tiers_ok = len(p.items) == before
    hosts = read_hosts(p, doc.get("hosts"), {t.name for t in tiers})
    return tiers, hosts, Routes(tiers, hosts, defaults=not doc.get("tiers")) if tiers_ok else None


def load(
    path: str | os.PathLike,
    *,
    pin_data: DataPinner | None = None,
    check_route: RouteCheck | None = None,
    published: Published | None = None,
) -> Manifest:
    """Read and validate the manifest file at ``path`` (see ``loads``)."""
    path = str(path)
    text = read_text(path)
    with gc_paused():  # a large sweep's jobs are many small acyclic objects
        return loads(text, path, pin_data=pin_data, check_route=check_route, published=published)
