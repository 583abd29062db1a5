"""The one deterministic tar writer: equal files give equal bytes on every host.

Bundles, checkpoints, staged data directories and workdirs are all written here. A member
keeps its name, size, content and whether its owner may execute it; everything that differs
between hosts for equal files is normalised: owners (0, no names), times (``MTIME``) and the
other permission bits (``FILE_MODE`` or ``EXEC_MODE``). The stream is PAX, written in order,
never seeked, so it can go straight into a compressor or a hash.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from typing import BinaryIO

from core import constants as C

CHUNK_BYTES = C.IO_CHUNK_BYTES  # tarfile's read and write unit
MTIME = 0  # every member's time, s since the epoch: a file's own mtime is host noise
FILE_MODE = 0o644
EXEC_MODE = 0o755  # a file its owner may execute


def member(arcname: str, size: int, executable: bool = False) -> tarfile.TarInfo:
    """The normalised header of a regular file."""
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime = size, MTIME
    info.mode = EXEC_MODE if executable else FILE_MODE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def file_member(arcname: str, st: os.stat_result) -> tarfile.TarInfo:
    """``member`` for a file as ``os.stat`` or ``os.fstat`` saw it."""
    return member(arcname, st.st_size, bool(st.st_mode & stat.S_IXUSR))


def writer(out: BinaryIO) -> tarfile.TarFile:
    """A streaming tar writer on ``out`` (use it as a context manager)."""
    tar = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, bufsize=CHUNK_BYTES)
    tar.copybufsize = CHUNK_BYTES
    return tar


def add_file(tar: tarfile.TarFile, arcname: str, f: BinaryIO) -> tarfile.TarInfo:
    """Add the open file ``f`` (read from its start to its size when added); its header."""
    info = file_member(arcname, os.fstat(f.fileno()))
    tar.addfile(info, f)
    return info


def add_bytes(tar: tarfile.TarFile, arcname: str, data: bytes) -> tarfile.TarInfo:
    """Add ``data`` as a regular file named ``arcname``; its header."""
    info = member(arcname, len(data))
    tar.addfile(info, io.BytesIO(data))
    return info
