"""The content identity of a job's data: hash local files and directories, ask S3 for objects.

A directory is identified by a deterministic tar of its regular files (sorted paths,
artifacts.reprotar: no owners, times or permissions beyond the executable bit), so equal
trees give equal digests wherever they are. ``DataResolver`` pins each data entry of a
manifest once per load, so a sweep of 100,000 points over one file hashes that file once.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from core import constants as C
from core.errors import DataProblem, StoreError
from manifest import dataref
from manifest.dataref import DIR, FILE, WORKDIR_NAME, DataSource, PinnedWorkdir

from . import reprotar
from . import workdir as workdirs
from .pyenv import lock_digest

CHUNK_BYTES = C.IO_CHUNK_BYTES
# progress(label, total_bytes) -> advance(n_bytes), or None to show nothing for it
Progress = Callable[[str, int], Callable[[int], None] | None]


class _Sink:
    """A write-only file that hashes and counts what tarfile writes, and may pass it on."""

    def __init__(self, out=None, advance: Callable[[int], None] | None = None):
        self.out, self.advance, self.hash, self.size = out, advance, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.hash.update(data)
        self.size += len(data)
        if self.out is not None:
            self.out.write(data)
        return len(data)

    def flush(self) -> None:
        pass


def hash_file(path: Path, advance: Callable[[int], None] | None = None) -> tuple[str, int]:
    """(sha256 hex, size) of a file's bytes, read once in 1 MiB chunks."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
            if advance:
                advance(len(chunk))
    return digest.hexdigest(), size


def dir_files(root: Path) -> list[tuple[str, Path]]:
    """Regular files under ``root`` as sorted (posix relative path, path) pairs.

    Symlinks are not followed: a link could name bytes outside the directory.
    """
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath, name)
            if stat.S_ISREG(path.lstat().st_mode):
                found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)


def write_dir_tar(
    root: Path, out=None, advance: Callable[[int], None] | None = None
) -> tuple[str, int]:
    """Write the directory's deterministic tar to ``out`` (or nowhere); (sha256, size) of it."""
    return write_files_tar(dir_files(root), out, advance)


def write_files_tar(
    files: Iterable[tuple[str, Path]], out=None, advance: Callable[[int], None] | None = None
) -> tuple[str, int]:
    """The deterministic tar of sorted (arcname, path) pairs, written to ``out`` (or nowhere)."""
    sink = _Sink(out, advance)
    with reprotar.writer(sink) as tar:
        for arcname, path in files:
            with open(path, "rb") as f:
                reprotar.add_file(tar, arcname, f)
    return sink.hash.hexdigest(), sink.size


def _dir_bytes(root: Path) -> int:
    return sum(p.stat().st_size for _, p in dir_files(root))


def s3_identity(uri: str) -> dict:
    """The identity the store holds for an S3 object: {"sha256"} or {"etag", "size", "version"}."""
    from artifacts.stores import open_store_at

    ref = dataref.parse(uri)
    return open_store_at(f"s3://{ref.bucket}").identity(ref.key)


class DataResolver:
    """Pins the data entries of one manifest load, each distinct one once.

    ``s3`` looks up an S3 object's identity (injectable so pure tests need no server);
    ``progress`` shows hashing of large files.
    """

    def __init__(self, s3: Callable[[str], dict] = s3_identity, progress: Progress | None = None):
        self.s3, self.progress = s3, progress
        # the manifest being read: never part of a workdir it sits in (its job's content)
        self.manifest: Path | None = None
        self.sources: dict[str, DataSource] = {}  # sha256 -> local bytes to stage
        self._pinned: dict[str, str | DataProblem] = {}

    def pin(self, written: str, base_dir: Path) -> str:
        """The pinned URI for ``written`` (a path relative to ``base_dir`` or an s3:// URI)."""
        where = (
            written
            if written.startswith("s3://")
            else str((base_dir / os.path.expanduser(written)).resolve())
        )
        if where not in self._pinned:
            try:
                self._pinned[where] = (
                    self._s3(where) if written.startswith("s3://") else self._local(Path(where))
                )
            except DataProblem as e:
                self._pinned[where] = e
        found = self._pinned[where]
        if isinstance(found, DataProblem):
            raise found
        return found

    def _s3(self, uri: str) -> str:
        try:
            return dataref.s3_uri(uri, self.s3(uri))
        except StoreError as e:
            raise DataProblem(
                f"cannot read the identity of {uri}: {e}",
                "check the object exists and FLEET_S3_ENDPOINT_URL and the AWS_* "
                "credentials (the job ID depends on the object's content)",
            ) from e

    def _local(self, path: Path) -> str:
        if not path.exists():
            raise DataProblem(
                f"data {str(path)!r} does not exist",
                "paths are relative to the manifest's directory; check the path, "
                "or use s3://bucket/key",
            )
        kind = DIR if path.is_dir() else FILE
        try:
            if kind == DIR:
                total = _dir_bytes(path)
                sha, size = write_dir_tar(path, advance=self._advance(path, total))
            else:
                sha, size = hash_file(path, self._advance(path, path.stat().st_size))
        except OSError as e:
            raise DataProblem(
                f"cannot read data {str(path)!r}: {e.strerror or e}",
                "make it readable by the publishing user",
            ) from e
        self.sources.setdefault(sha, DataSource(sha, path, kind, size))
        return dataref.store_uri(sha, path.name, kind)

    def pin_workdir(
        self, written: str, base_dir: Path, requirements_file: str | None
    ) -> PinnedWorkdir:
        """The workdir's selected files pinned (artifacts.workdir), refused over the size limit."""
        root = (base_dir / os.path.expanduser(written)).resolve()
        if not root.is_dir():
            raise DataProblem(
                f"workdir {str(root)!r} is not a directory",
                "workdir is relative to the manifest's directory; name the project folder",
            )
        try:
            sel = workdirs.select(root, [self.manifest] if self.manifest else [])
            workdirs.check_size(sel, workdirs.max_bytes())
            sha, size = write_files_tar(sel.files, advance=self._advance(root, sel.total_bytes))
        except OSError as e:
            raise DataProblem(
                f"cannot read workdir {str(root)!r}: {e.strerror or e} ({e.filename})",
                "make it readable by the publishing user, or leave the file out "
                f"with a {workdirs.FLEETIGNORE}",
            ) from e
        self.sources.setdefault(sha, DataSource(sha, root, DIR, size, files=sel.files))
        traveling = {rel for rel, _ in sel.files}
        lock = lock_digest(root) if {"pyproject.toml", "uv.lock"} <= traveling else None
        reqs = _requirement_lines(root, requirements_file, traveling) if requirements_file else None
        return PinnedWorkdir(dataref.store_uri(sha, WORKDIR_NAME, DIR), reqs, lock)

    def _advance(self, path: Path, total: int) -> Callable[[int], None] | None:
        return self.progress(f"hashing {path.name}", total) if self.progress else None


def _requirement_lines(root: Path, name: str, traveling: set[str]) -> tuple[str, ...]:
    """The requirement lines of the file ``name`` in the workdir, comments and blanks left out."""
    rel = Path(name).as_posix()
    if rel not in traveling:
        raise DataProblem(
            f"requirements file {name!r} is not in workdir {str(root)!r}"
            + (" (it is ignored)" if (root / name).is_file() else ""),
            "name a file inside the workdir, relative to it, e.g. requirements.txt",
        )
    lines = (
        ln.split(" #", 1)[0].strip() for ln in (root / rel).read_text(encoding="utf-8").splitlines()
    )
    return tuple(ln for ln in lines if ln and not ln.startswith("#"))
