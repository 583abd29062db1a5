"""Pack files into one reproducible `bundle.tar.zst`, hashing in the same pass.

Everything streams: each member is hashed while tarfile reads it, and the
compressed bytes are hashed as they go to disk, so a bundle is read once and
written once. Tar metadata is normalised (artifacts.reprotar), so equal files give equal bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import zstandard

from core import constants as C
from core.constants import META_NAME, ZSTD_LEVEL
from core.errors import DigestMismatch, StoreError
from core.files import PRIVATE, atomic_file

from . import reprotar, safetar

log = logging.getLogger("fleet.bundle")
CHUNK_BYTES = C.IO_CHUNK_BYTES  # read/write unit for files, tar and zstd
ZSTD_OUT_BYTES = C.IO_CHUNK_BYTES  # compressed chunk handed to the hashing writer


@dataclass(frozen=True)
class BundleResult:
    """A finished bundle: where it is, its digest and size, and each member's digest."""

    path: Path
    sha256: str
    size: int
    files: dict[str, str] = field(default_factory=dict)


class _HashingReader:
    """File wrapper whose reads update a sha256 (tarfile reads members through it)."""

    def __init__(self, raw):
        self.raw, self.hash, self.size = raw, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.hash.update(data)
        self.size += len(data)
        return data


class _HashingWriter:
    """Writer that hashes every byte on its way to the underlying file."""

    def __init__(self, raw):
        self.raw, self.hash, self.size = raw, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def collect(root: Path, globs: list[str]) -> list[tuple[str, Path]]:
    """Files under `root` matching any glob, as sorted unique (arcname, path) pairs.

    An empty glob list means every file under `root`. Nothing that resolves outside `root`
    is taken: a glob with '..' or an absolute one is refused (StoreError), and a match that
    is, or goes through, a symlink leading out of `root` is left out with a warning.
    """
    root = Path(root)
    real_root = root.resolve()
    found: dict[str, Path] = {}
    for pattern in globs or ["**/*"]:
        if PurePosixPath(pattern).is_absolute() or ".." in PurePosixPath(pattern).parts:
            raise StoreError(f"artifacts glob {pattern!r} leaves the job's directory; refused")
        for path in root.glob(pattern):
            if not path.is_file():
                continue
            if not path.resolve().is_relative_to(real_root):
                log.warning(
                    "artifact %s resolves outside the job's directory (%s); left out",
                    path.relative_to(root).as_posix(),
                    path.resolve(),
                )
                continue
            found[path.relative_to(root).as_posix()] = path
    return sorted(found.items())


def _write_tar(out, files: list[tuple[str, Path]], meta: dict) -> dict[str, dict]:
    """Write the tar stream to `out` (artifacts.reprotar); return {arcname: {"sha256", "size"}}."""
    entries: dict[str, dict] = {}
    with reprotar.writer(out) as tar:
        for arcname, path in files:
            # Buffered, so a short read from a network filesystem is retried
            # rather than taken by tarfile for a truncated file.
            with open(path, "rb") as raw:
                reader = _HashingReader(raw)
                tar.addfile(reprotar.file_member(arcname, os.fstat(raw.fileno())), reader)
            entries[arcname] = {"sha256": reader.hash.hexdigest(), "size": reader.size}
        meta_json = json.dumps({**meta, "files": entries}, indent=2, sort_keys=True) + "\n"
        reprotar.add_bytes(tar, META_NAME, meta_json.encode())
    return entries


def bundle(
    files: list[tuple[str, Path]],
    meta: dict,
    dest: Path,
    *,
    level: int = ZSTD_LEVEL,
    threads: int = -1,
) -> BundleResult:
    """Write `files` plus a `meta.json` as a zstd tar at `dest`, atomically.

    `threads=-1` compresses on every core. The returned sha256 is of the
    compressed bytes exactly as written.
    """
    dest = Path(dest)
    if META_NAME in {name for name, _ in files}:
        raise StoreError(f"{META_NAME!r} is reserved for the bundle's metadata; rename that file")
    cctx = zstandard.ZstdCompressor(
        level=level, threads=threads, write_checksum=True, write_content_size=False
    )
    with atomic_file(dest, PRIVATE) as tmp, open(tmp, "wb", buffering=0) as raw:
        out = _HashingWriter(raw)
        with cctx.stream_writer(out, write_size=ZSTD_OUT_BYTES, closefd=False) as zw:
            entries = _write_tar(zw, files, meta)
    return BundleResult(
        dest, out.hash.hexdigest(), out.size, {name: e["sha256"] for name, e in entries.items()}
    )


def _open_tar(bundle_path: Path):
    raw = open(bundle_path, "rb")
    stream = zstandard.ZstdDecompressor().stream_reader(raw, read_size=CHUNK_BYTES, closefd=True)
    return tarfile.open(fileobj=stream, mode="r|", bufsize=CHUNK_BYTES), stream


def extract(bundle_path: Path, dest_dir: Path) -> list[Path]:
    """Unpack a bundle's regular files under `dest_dir`, streaming; `artifacts.safetar` says
    what is refused (anything that could land outside `dest_dir` or over a file)."""
    tar, stream = _open_tar(bundle_path)
    with stream, tar:
        return safetar.extract(tar, dest_dir, what="bundle")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def verify_bundle(path: Path, sha256: str) -> None:
    """Raise DigestMismatch unless the file at `path` hashes to `sha256`."""
    actual = sha256_file(path)
    if actual != sha256:
        raise DigestMismatch(
            f"{path}: expected sha256 {sha256}, found {actual}; "
            "the file is corrupt or was changed after bundling"
        )
