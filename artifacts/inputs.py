"""A pipeline follower's inputs on a worker: each upstream's bundle fetched from the store by
its digest, verified, unpacked once per host in the data cache (``artifacts.datacache``, kind
``BUNDLE``, bounded and evicted with the data), and pinned for the run under one folder, the
job's ``$FLEET_INPUTS``: ``<folder>/`` per input, holding the bundle's files as the upstream
stored them (a command job's ``out/...``, the bundle's ``meta.json``, its ``fleet-log.txt``).

The pins are read-only hard links in the cache's ``pins/``, owned by the run's folder, so
eviction never pulls an input from under a running job and a dead run's pins go with it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import DigestMismatch, InputUnavailable, StoreError
from core.ids import short_id

from .datacache import BUNDLE, DataCache
from .stores import Store

log = logging.getLogger("fleet.inputs")
PINS_FOLDER = "inputs"  # the owner's pins holding its inputs, and nothing else: $FLEET_INPUTS
CACHE_KEY_PREFIX = "bundle-"  # a bundle's cache key: apart from data of the same digest
ESCAPED = {"%": "%25", "/": "%2F", "\0": "%00"}  # '%' first: the mapping stays one-to-one


@dataclass(frozen=True)
class Wanted:
    """One upstream bundle a run takes as an input."""

    dir: str  # as the manifest names it (``prep``, ``prep[lr=0.1]``); ``folder`` makes it safe
    upstream: str  # the upstream job's name, for messages (a search's: its best trial's)
    job_id: str
    kind: str  # the bundle's folder in the store (its model, or "command")
    sha256: str

    @property
    def folder(self) -> str:
        return folder(self.dir)


def folder(name: str) -> str:
    """The folder under ``$FLEET_INPUTS`` for an input named ``name``: the name itself, with
    what a file name cannot hold escaped (a sweep point of a string value may have a '/').
    A leading '.' is escaped too: '.' and '..' name no folder of their own, and the cache
    makes each pin under a hidden name before renaming it. Pure."""
    out = "".join(ESCAPED.get(c, c) for c in name)
    return "%2E" + out[1:] if out.startswith(".") else out


def fetch(
    wanted: Sequence[Wanted], cache_dir: Path, store: Store, owner: Path, cache_bytes: int
) -> Path | None:
    """Each wanted bundle in the cache and pinned as its folder for the run in ``owner`` (a
    directory that lives as long as the run); the folder holding them (``$FLEET_INPUTS``),
    or None with nothing wanted. InputUnavailable names the upstream whose bundle failed."""
    if not wanted:
        return None
    cache = DataCache(Path(cache_dir), cache_bytes)
    where = None
    for w in wanted:
        payload = _cached(cache, store, w)
        where = cache.pin(payload, owner, w.folder, under=PINS_FOLDER).parent
        log.info("input %s: %s's bundle %s", w.folder, w.upstream, short_id(w.sha256))
    return where


def _cached(cache: DataCache, store: Store, w: Wanted) -> Path:
    def fill(dest: Path) -> None:
        store.get_bundle(w.kind, w.sha256, dest)

    which = (
        f"input {w.dir}: the bundle of {w.upstream} (job {short_id(w.job_id)}, sha256 {w.sha256})"
    )
    again = (
        f"run {w.upstream} again (`fleet requeue {w.upstream}`), then this job once it succeeded"
    )
    try:
        return cache.get(CACHE_KEY_PREFIX + w.sha256, BUNDLE, fill, w.sha256)
    except DigestMismatch as e:
        raise InputUnavailable(f"{which} is corrupt in the store ({e}); {again}") from e
    except StoreError as e:
        raise InputUnavailable(
            f"{which} could not be fetched ({e}); if the store answers, the bundle is gone "
            f"from it: {again}"
        ) from e
