"""Files replaced whole: readers (and a crash) see the old file or the new one, never part."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PRIVATE = 0o600  # a file only its owner reads: downloads and bundles until they are checked


@contextmanager
def atomic_file(dest: Path | str, mode: int | None = None) -> Iterator[Path]:
    """A new empty file beside ``dest`` (its directory made if needed) for the block to write;
    it replaces ``dest`` when the block ends, and is removed if the block raises.

    ``mode``: its permission bits from the start (never readable by others, not even
    briefly, with ``PRIVATE``); None makes it as ``open`` would, under the umask."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # the umask does not narrow an explicit mode
    finally:
        os.close(fd)
    try:
        yield tmp
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(dest: Path | str, data: bytes | str, mode: int | None = None) -> None:
    """Write ``data`` (str as UTF-8) to ``dest`` through ``atomic_file``."""
    with atomic_file(dest, mode) as tmp, open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
