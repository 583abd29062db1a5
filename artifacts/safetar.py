"""Unpack a tar safely: the one extraction for bundles, data tars and checkpoints.

Built on tarfile's "data" filter (nothing absolute or outside the destination, no special
files, no setuid bits, owner read/write kept) plus fleet's own refusals: any '..' in a
name, links of every kind, directories where the caller refuses them, a name that is
already there (a link left in the destination, or a member named twice), a member below a
file, and writes through a link in the destination. Every refusal is an `UnsafeArchive`
naming the member; nothing is ever written outside the destination or over a file.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from enum import Enum
from pathlib import Path, PurePosixPath

from core import constants as C
from core.errors import StoreError, UnsafeArchive

COPY_BYTES = C.IO_CHUNK_BYTES
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Directories(str, Enum):
    """What a directory member means to the caller."""

    REFUSE = "refuse"  # bundles hold regular files only
    SKIP = "skip"  # a data tar may list them; its files make their parents anyway


def extract(
    tar: tarfile.TarFile,
    dest: Path,
    *,
    what: str = "archive",
    directories: Directories = Directories.REFUSE,
) -> list[Path]:
    """Write the regular files of `tar` (read in order, so a stream works) under `dest`;
    their paths. `what` ("bundle", "data tar") names the archive in refusals."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        for member in tar:
            if member.isdir() and directories is Directories.SKIP:
                continue
            target = dest.joinpath(*_checked_parts(member, what))
            filtered = _filtered(member, target, dest, what)
            _make_parents(target, dest, member.name, what)
            _write(tar, member, filtered, target, what)
            written.append(target)
    except tarfile.TarError as e:
        raise StoreError(f"{what}: not a readable tar ({e}); fetch it again") from e
    return written


def _refused(what: str, name: str, why: str) -> UnsafeArchive:
    return UnsafeArchive(f"{what} member {name!r}: {why}")


def _checked_parts(member: tarfile.TarInfo, what: str) -> tuple[str, ...]:
    """The member's path parts, once its name and type pass."""
    name = member.name
    parts = PurePosixPath(name).parts
    if name.startswith("/") or PurePosixPath(name).is_absolute() or ".." in parts or not parts:
        raise _refused(what, name, "absolute, empty or '..' paths are refused")
    if not member.isfile():
        raise _refused(
            what, name, "only regular files are allowed (no links, devices or directories)"
        )
    return parts


def _filtered(member: tarfile.TarInfo, target: Path, dest: Path, what: str) -> tarfile.TarInfo:
    """The member as tarfile's "data" filter passes it (mode cleaned), or a refusal."""
    if os.path.lexists(target):
        raise _refused(
            what, member.name, f"{target} already exists; extract into an empty directory"
        )
    try:
        return tarfile.data_filter(member, str(dest))
    except tarfile.OutsideDestinationError:
        # the name has no '..' (checked first), so only a link on the way leads out
        raise _refused(
            what, member.name, f"would be written outside {dest} through a link"
        ) from None
    except tarfile.FilterError as e:
        raise _refused(what, member.name, f"refused by tarfile's data filter ({e})") from None


def _make_parents(target: Path, dest: Path, name: str, what: str) -> None:
    """Make the directories above `target`; a file or a link leading out on the way is refused."""
    for parent in reversed(target.relative_to(dest).parents[:-1]):
        path = dest / parent
        if os.path.lexists(path) and not path.is_dir():
            raise _refused(
                what, name, f"{parent.as_posix()!r} is a file, so nothing can go below it"
            )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _refused(
            what, name, f"cannot make its directory {target.parent}: {e.strerror}"
        ) from e
    # again, now that the parents exist: a directory made by a racing writer may be a link
    if not target.parent.resolve().is_relative_to(dest.resolve()):
        raise _refused(what, name, f"would be written outside {dest} through a link")


def _write(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    filtered: tarfile.TarInfo,
    target: Path,
    what: str,
) -> None:
    try:  # never through a link, never over a file, even one that appeared since the checks
        fd = os.open(target, CREATE_FLAGS, 0o600)
    except FileExistsError:
        raise _refused(
            what, member.name, f"{target} already exists; extract into an empty directory"
        ) from None
    with open(fd, "wb") as out:
        shutil.copyfileobj(tar.extractfile(member), out, COPY_BYTES)
        out.flush()
        os.fchmod(fd, filtered.mode)
        os.utime(fd, (filtered.mtime, filtered.mtime))
