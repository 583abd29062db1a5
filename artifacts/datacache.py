"""A worker's cache of job data, by content: bounded, least recently used first out.

Layout under the cache root (``FLEET_WORK_DIR/data-cache``)::

    entries/<key>/payload     the bytes (a file), or the unpacked tree (a directory: a data
                              tar, or a pipeline input's bundle, kind ``BUNDLE``)
    entries/<key>/size        its size in bytes; the entry's mtime is its last use
    locks/<key>.lock          flock: one fill per key on the host, shared by threads and processes
    pins/<owner>/<name>       hard links a running job reads: eviction never pulls bytes
                              from under a job; a pin goes once its job directory is gone.
                              <owner> is a digest of the job directory's full path: every
                              run's directory is named ``work``, so its name is no one's
    pins/<owner>/.owner       that job directory's path
    pins/<owner>/<under>/<name>  a pin in a folder of pins only (a run's inputs)
    tmp/<key>.<random>/       a fill in progress (removed by eviction once its lock is free)

An entry appears by rename only after its bytes were verified, so a reader never sees a
partial or unverified entry. A pin appears by rename too: jobs pinning the same data at once
(even into one job directory) each get a whole pin, never a half-made or removed one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import stat
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from core.errors import DigestMismatch
from core.ids import short_id
from manifest.dataref import DIR

from . import bundle, safetar
from .identity import CHUNK_BYTES, hash_file

log = logging.getLogger("fleet.datacache")
PAYLOAD, SIZE, OWNER = "payload", "size", ".owner"
# an entry's kind beside manifest.dataref's FILE and DIR: a bundle (zstd tar), kept unpacked,
# so every run that takes it as an input links its files instead of unpacking them again
BUNDLE = "bundle"


class DataCache:
    """Entries keyed by content digest (or another unique key), at most ``max_bytes`` in all."""

    def __init__(self, root: Path, max_bytes: int):
        self.root, self.max_bytes = Path(root), int(max_bytes)
        for sub in ("entries", "locks", "pins", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def get(
        self, key: str, kind: str, fill: Callable[[Path], None], sha256: str | None = None
    ) -> Path:
        """The payload for ``key``, filled once on this host by ``fill(dest_file)``.

        With ``sha256``, the filled bytes must hash to it (DigestMismatch otherwise, nothing
        kept). A directory arrives as its tar and is unpacked into the entry.
        """
        entry = self.root / "entries" / key
        with self._lock(key):
            if (entry / PAYLOAD).exists():
                os.utime(entry)  # last use, for LRU
                return entry / PAYLOAD
            size = self._fill(entry, kind, fill, sha256)
        log.info("data %s cached (%d bytes)", key[:16], size)
        self.evict(keep=key)
        return entry / PAYLOAD

    def pin(self, payload: Path, owner: Path, name: str, under: str = "") -> Path:
        """Hard-link ``payload`` as ``name`` for the job running in ``owner``; its path.
        ``under``: a folder of the owner's pins to put it in, holding pins only (a run's
        inputs, as a job lists them). Safe to call for one payload from many threads and
        processes at once."""
        self._drop_stale_pins()
        pin_dir = self.root / "pins" / owner_key(owner)
        (pin_dir / under).mkdir(parents=True, exist_ok=True)
        staged = pin_dir / f".{name}.{uuid.uuid4().hex}"
        try:
            where = str(Path(owner).absolute())
            _replace(staged, pin_dir / OWNER, lambda tmp: tmp.write_text(where))
            target = pin_dir / under / name
            _replace(staged, target, lambda tmp: _link_tree(payload, tmp))
        finally:
            shutil.rmtree(staged, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()
        return target

    def evict(self, keep: str = "") -> list[str]:
        """Drop least recently used entries until the cache fits; returns the keys dropped."""
        dropped = []
        with self._lock("evict"):
            entries = sorted(self._entries(), key=lambda e: e[1])  # oldest use first
            total = sum(size for _, _, size in entries)
            for key, _, size in entries:
                if total <= self.max_bytes:
                    break
                if key == keep:
                    continue
                with self._try_lock(key) as got:
                    if got:
                        shutil.rmtree(self.root / "entries" / key, ignore_errors=True)
                        total -= size
                        dropped.append(key)
            self._drop_abandoned_fills()
        return dropped

    def total_bytes(self) -> int:
        return sum(size for _, _, size in self._entries())

    # --- plumbing ---------------------------------------------------------------
    def _fill(
        self, entry: Path, kind: str, fill: Callable[[Path], None], sha256: str | None
    ) -> int:
        work = self.root / "tmp" / f"{entry.name}.{uuid.uuid4().hex}"
        work.mkdir(parents=True)
        try:
            raw = work / "raw"
            fill(raw)
            if sha256 is not None:
                actual, _ = hash_file(raw)
                if actual != sha256:
                    raise DigestMismatch(
                        f"data {short_id(sha256)}: expected sha256 {sha256}, got {actual}; "
                        "refused (corrupt in transit, or changed after publish)"
                    )
            staged = work / "entry"
            staged.mkdir()
            unpack = UNPACKED.get(kind)
            if unpack is not None:
                unpack(raw, staged / PAYLOAD)
                size = sum(p.stat().st_size for p in (staged / PAYLOAD).rglob("*") if p.is_file())
            else:
                raw.rename(staged / PAYLOAD)
                size = (staged / PAYLOAD).stat().st_size
            _read_only(staged / PAYLOAD)
            (staged / SIZE).write_text(str(size))
            shutil.rmtree(entry, ignore_errors=True)  # a half-made entry from a crash
            staged.rename(entry)
            return size
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _entries(self) -> list[tuple[str, float, int]]:
        """(key, last use, size) of every complete entry."""
        out = []
        for entry in (self.root / "entries").iterdir():
            try:
                out.append((entry.name, entry.stat().st_mtime, int((entry / SIZE).read_text())))
            except (OSError, ValueError):
                continue  # being written or removed right now
        return out

    def _drop_abandoned_fills(self) -> None:
        """Temp folders of fills whose process died: nobody holds their key's lock."""
        for work in (self.root / "tmp").iterdir():
            with self._try_lock(work.name.split(".")[0]) as got:
                if got:
                    shutil.rmtree(work, ignore_errors=True)

    def _drop_stale_pins(self) -> None:
        for pin_dir in (self.root / "pins").iterdir():
            try:
                owner = Path((pin_dir / OWNER).read_text())
            except OSError:
                continue
            if not owner.exists():
                shutil.rmtree(pin_dir, ignore_errors=True)

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        with open(self.root / "locks" / f"{key}.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _try_lock(self, key: str) -> Iterator[bool]:
        with open(self.root / "locks" / f"{key}.lock", "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


def _unpack(tar_path: Path, dest: Path) -> None:
    """Unpack a data tar into the new directory ``dest``: regular files only (``safetar``)."""
    dest.mkdir()
    with tarfile.open(tar_path, mode="r:", bufsize=CHUNK_BYTES) as tar:
        safetar.extract(tar, dest, what="data tar", directories=safetar.Directories.SKIP)


# the kinds kept as an unpacked tree, and how each is unpacked into its new entry
UNPACKED: dict[str, Callable[[Path, Path], object]] = {DIR: _unpack, BUNDLE: bundle.extract}


def _read_only(path: Path) -> None:
    """Cached bytes are shared by hard links: make them read-only so a job cannot edit them."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for f in files:
        mode = f.stat().st_mode
        f.chmod(stat.S_IMODE(mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def owner_key(owner: Path) -> str:
    """The pin folder of a job directory: a digest of its full path (run dirs share a name)."""
    return hashlib.sha256(str(Path(owner).absolute()).encode()).hexdigest()[:32]


def _replace(staged: Path, target: Path, make: Callable[[Path], object]) -> None:
    """Make ``staged`` then rename it over ``target``: a reader sees the old or the new whole.
    A directory cannot be renamed over a non-empty one: the old goes first, and a pin another
    caller renamed in between is the same bytes, so it stays."""
    make(staged)
    try:
        os.replace(staged, target)
    except OSError:  # a directory in the way (ENOTEMPTY, EEXIST, EISDIR)
        shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(staged, target)
        except OSError:
            if not target.exists():
                raise


def _link_tree(payload: Path, dest: Path) -> None:
    if payload.is_dir():
        shutil.copytree(payload, dest, copy_function=_link_or_copy)
    else:
        _link_or_copy(payload, dest)


def _link_or_copy(src, dst) -> str:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem, or links refused: a copy costs space, not safety
        shutil.copy2(src, dst)
    return str(dst)
