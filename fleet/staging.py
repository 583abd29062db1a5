"""Stage the local data of the jobs being published in the store, each distinct byte once.

Runs before any message is sent, so no queued job names data the store lacks. Bytes the
store already holds (one HEAD or stat per digest) are not sent again; a directory is sent as
the deterministic tar its digest was taken of (``artifacts.identity``).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from artifacts.identity import Progress, write_dir_tar, write_files_tar
from artifacts.stores import Store, open_store
from core.constants import DATA_PROGRESS_MIN_BYTES
from core.errors import DigestMismatch
from core.registry import FLEET_STORE_URL
from core.settings import StoreSettings
from manifest import dataref
from manifest.dataref import DIR, DataSource
from manifest.schema import JobSpec, Manifest
from state import fleetstore


@dataclass(frozen=True)
class StageReport:
    """What a staging pass did: digests sent and found already stored, bytes sent."""

    sent: tuple[str, ...] = ()
    present: tuple[str, ...] = ()
    sent_bytes: int = 0


def sources_for(manifest: Manifest, jobs: Iterable[JobSpec]) -> list[DataSource]:
    """The distinct local sources that ``jobs`` name, in a stable order."""
    wanted = set()
    for job in jobs:
        for uri in (job.data, job.workdir):
            if uri and uri.startswith(dataref.STORE_SCHEME + "://"):
                wanted.add(dataref.parse(uri).sha256)
    return [manifest.data_sources[sha] for sha in sorted(wanted) if sha in manifest.data_sources]


def fleet_store(client, broker_url: str, env: Mapping[str, str] | None = None) -> Store:
    """The store a publisher stages into: the fleet's (``state.fleetstore``), or its own
    (FLEET_STORE_URL, else ./.fleet-local/store) while none is recorded; refused at once when
    it names another than the fleet's."""
    url = fleetstore.settle(
        client, FLEET_STORE_URL.value(env), StoreSettings.from_env(env).url, "publisher", broker_url
    )
    return open_store(StoreSettings.from_env(env, url=url))


def stage(
    manifest: Manifest,
    jobs: Iterable[JobSpec],
    *,
    store: Store | None = None,
    progress: Progress | None = None,
) -> StageReport:
    """Put every local source ``jobs`` need in the store; the store is opened only if needed."""
    sources = sources_for(manifest, jobs)
    if not sources:
        return StageReport()
    store = store or open_store()
    sent, present, sent_bytes = [], [], 0
    for src in sources:
        if store.has_data(src.sha256):
            present.append(src.sha256)
            continue
        advance = progress(f"staging {src.path.name}", src.size) if progress else None
        with _payload(src) as path:
            store.put_data(path, src.sha256, advance)
        sent.append(src.sha256)
        sent_bytes += src.size
    return StageReport(tuple(sent), tuple(present), sent_bytes)


@contextlib.contextmanager
def _payload(src: DataSource) -> Iterator[Path]:
    """The file to send: the file itself, or the directory's tar written to a temp file."""
    if src.kind != DIR:
        yield src.path
        return
    with tempfile.NamedTemporaryFile(prefix="fleet-data-", suffix=".tar") as tmp:
        sha, _ = write_files_tar(src.files, tmp) if src.files else write_dir_tar(src.path, tmp)
        tmp.flush()
        if sha != src.sha256:
            raise DigestMismatch(
                f"directory {src.path} changed while publishing "
                f"(sha256 {src.sha256} at validation, {sha} now); publish again"
            )
        yield Path(tmp.name)


@contextlib.contextmanager
def console_progress(console, min_bytes: int = DATA_PROGRESS_MIN_BYTES) -> Iterator[Progress]:
    """A Progress showing a rich bar per file of ``min_bytes`` or more on ``console``."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import Progress as Bars

    bars = Bars(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )

    def start(label: str, total: int) -> Callable[[int], None] | None:
        if total < min_bytes:
            return None
        task = bars.add_task(label, total=total)
        return lambda n: bars.advance(task, n)

    with bars:
        yield start
