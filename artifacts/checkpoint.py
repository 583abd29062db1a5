"""A job's checkpoint directory as one verified ``tar.zst``: pack it, unpack it.

Built on ``artifacts.bundle`` (reproducible tar, zstd, sha256 in the same pass, extraction
that refuses paths escaping the target), with every file under ``ckpt/`` in the archive so
that the bundle's own ``meta.json`` never clashes with a checkpoint file of that name.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from artifacts import bundle as bundler

PREFIX = "ckpt"
ZSTD_LEVEL = 1  # checkpoints are mostly floats: a higher level costs time and saves little


def fingerprint(directory: Path) -> tuple:
    """What changes whenever a file under ``directory`` does (names, sizes, mtimes)."""
    out = []
    for arcname, path in bundler.collect(directory, []):
        try:
            st = path.stat()
        except FileNotFoundError:  # removed while we looked: the next look sees it
            continue
        out.append((arcname, st.st_size, st.st_mtime_ns))
    return tuple(out)


def pack(directory: Path, dest: Path, meta: dict) -> bundler.BundleResult:
    """Every file under ``directory`` into ``dest`` (written atomically), with its sha256."""
    files = [(f"{PREFIX}/{name}", path) for name, path in bundler.collect(directory, [])]
    return bundler.bundle(files, {**meta, "checkpoint": True}, dest, level=ZSTD_LEVEL)


def unpack(archive: Path, directory: Path) -> int:
    """Replace ``directory``'s contents with the archive's files; returns how many."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=directory.parent))
    try:
        written = bundler.extract(archive, staging)
        restored = staging / PREFIX
        restored.mkdir(exist_ok=True)
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(restored, directory)
        return sum(1 for p in written if PREFIX in p.relative_to(staging).parts[:1])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
