"""What the artifact store holds, as rows, and where one job's bundle lives.

Listing reads each bundle's small meta.json, never the bundle itself: re-hashing is
``verify=True`` only (on S3 it downloads every bundle). A meta.json that cannot be read
becomes a warning naming it, and the listing goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlparse

from core.constants import BUNDLE_NAME
from core.errors import FleetError, StoreError
from core.ids import short_id


@dataclass(frozen=True)
class ArtifactRow:
    name: str
    kind: str
    sha256: str
    size: int | None
    uri: str
    job_id: str = ""
    worker: str = ""
    ended_at: str = ""
    verified: bool | None = None  # None: not checked
    current: bool | None = None  # the bundle its job's record names now; None: records not read

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ArtifactsView:
    rows: list[ArtifactRow]
    warnings: list[str] = field(default_factory=list)
    others: int = 0  # bundles of jobs the listing was not asked for (``listing(jobs=...)``)

    @property
    def ok(self) -> bool:
        return all(r.verified is not False for r in self.rows)

    def to_dict(self) -> dict:
        return {"artifacts": [r.to_dict() for r in self.rows], "warnings": self.warnings}


def row(entry: dict) -> ArtifactRow:
    """A listing entry (see Store.list_artifacts) as a row; pure."""
    job = entry.get("job") if isinstance(entry.get("job"), dict) else {}
    kind = entry.get("kind") or job.get("model") or "command"
    size = entry.get("size")
    return ArtifactRow(
        str(entry.get("name") or job.get("name") or ""),
        str(kind),
        str(entry.get("sha256", "")),
        size if isinstance(size, int) else None,
        str(entry.get("uri", "")),
        str(entry.get("job_id") or ""),
        str(entry.get("worker") or ""),
        str(entry.get("ended_at") or ""),
    )


def listing(store, verify: bool = False, jobs: set[str] | None = None) -> ArtifactsView:
    """The store's bundles; with ``jobs``, only those jobs' bundles (the rest are counted in
    ``others``, unread and unverified: a long-lived store keeps every earlier run's)."""
    rows, warnings, others = [], [], 0
    for entry in store.list_artifacts():
        if "error" in entry:
            warnings.append(entry["error"])
        r = row(entry)
        if jobs is not None and r.job_id not in jobs:
            others += 1
            continue
        if verify:
            r = ArtifactRow(**{**r.__dict__, "verified": store.verify(r.kind, r.sha256)})
        rows.append(r)
    return ArtifactsView(rows, warnings, others)


def mark_current(view: ArtifactsView, current: dict[str, str]) -> ArtifactsView:
    """Mark each row whose job's record names this bundle (``current``: job ID -> sha256) as
    current; a job run again keeps its older bundles, marked not current. Jobs ``current``
    does not name stay unmarked. Pure."""
    rows = [
        ArtifactRow(**{**r.__dict__, "current": current[r.job_id] == r.sha256})
        if r.job_id in current
        else r
        for r in view.rows
    ]
    return ArtifactsView(rows, view.warnings, view.others)


@dataclass(frozen=True)
class BundleLocation:
    store_url: str  # the store the bundle is in (open_store accepts it)
    kind: str
    sha256: str


def locate(uri: str) -> BundleLocation:
    """Split a bundle URI as job records hold it (``<store>/<kind>/<sha256>/bundle.tar.zst``)."""
    parsed = urlparse(uri)
    parts = parsed.path.rstrip("/").split("/")
    if parsed.scheme not in ("s3", "file") or len(parts) < 4 or parts[-1] != BUNDLE_NAME:
        raise StoreError(f"artifact URI {uri!r}: expected <store>/<kind>/<sha256>/{BUNDLE_NAME}")
    store_path = "/".join(parts[:-3])
    return BundleLocation(f"{parsed.scheme}://{parsed.netloc}{store_path}", parts[-3], parts[-2])


def of_job(record) -> BundleLocation:
    """Where a job record's bundle is; an error saying why when it has none."""
    art = record.artifact or {}
    if not art.get("uri"):
        raise FleetError(
            f"job {record.name} ({short_id(record.job_id)}) is {record.state.value} "
            "and has no artifact"
            + (
                "; wait for it to succeed (`fleet logs -f` follows it)"
                if not record.state.terminal
                else ""
            )
        )
    loc = locate(art["uri"])
    if art.get("sha256") and art["sha256"] != loc.sha256:
        raise StoreError(
            f"job {record.name}: its record's sha256 {art['sha256'][:16]} differs from its URI's "
            f"{short_id(loc.sha256)}; the record was changed by hand"
        )
    return loc
