"""A job's data, pinned to its content: the URIs a job spec carries, written and parsed.

A manifest names data by a local path or an ``s3://`` URI; publish pins each to its bytes:

- a local file       ``store+sha256://<hex>/<name>``    bytes at ``<store prefix>/data/<hex>``
- a local directory  ``store+sha256://<hex>/<name>/``   a deterministic tar at the same key
- an S3 object       ``s3://bucket/key#sha256=<hex>``, or when the store keeps no sha256 for
                     it ``s3://bucket/key#etag=<etag>&size=<bytes>[&version=<id>]``

The pinned URI is the job's ``data`` and goes into its ID as written: the same bytes under the
same name give the same ID from any directory, and changed bytes a new one. The publisher's
path never leaves the publisher. Pure: no I/O here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlparse

STORE_SCHEME = "store+sha256"
FILE, DIR = "file", "dir"
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class DataSource:
    """Local bytes a publish must put in the store: where they are on the publisher's disk."""

    sha256: str
    path: Path
    kind: str  # FILE or DIR
    size: int  # bytes of the file, or of the directory's tar
    # a workdir's selection (artifacts.workdir): (posix relative path, path) pairs; empty
    # for a data directory, which travels whole
    files: tuple[tuple[str, Path], ...] = ()


WORKDIR_NAME = "workdir"  # the name a workdir is staged under: the same from any clone


@dataclass(frozen=True)
class PinnedWorkdir:
    """A job's workdir pinned to its content, with what its environment is defined by."""

    uri: str  # store+sha256://<hex>/workdir/
    # the lines of a requirements file, if one was named
    requirements: tuple[str, ...] | None = None
    lock: str | None = None  # sha256 of pyproject.toml + uv.lock, when both travel


@dataclass(frozen=True)
class DataRef:
    """A parsed data URI. ``scheme`` is "store", "s3" or "path" (a legacy local path)."""

    scheme: str
    name: str
    kind: str = FILE
    sha256: str | None = None
    bucket: str = ""
    key: str = ""
    etag: str | None = None
    size: int | None = None
    version: str | None = None
    path: str = ""

    @property
    def pinned(self) -> bool:
        """True when the URI says which bytes it means (a digest, or an ETag and size)."""
        return self.sha256 is not None or self.etag is not None


def store_uri(sha256: str, name: str, kind: str = FILE) -> str:
    """The pinned URI of local bytes staged in the store."""
    return f"{STORE_SCHEME}://{sha256}/{quote(name)}{'/' if kind == DIR else ''}"


def s3_uri(uri: str, identity: dict) -> str:
    """``uri`` (s3://bucket/key) with its content identity as the fragment.

    ``identity`` is {"sha256": hex} or {"etag", "size", "version" (may be None)}.
    """
    base = uri.split("#", 1)[0]
    if identity.get("sha256"):
        return f"{base}#sha256={identity['sha256']}"
    fields = {"etag": identity["etag"], "size": str(identity["size"])}
    if identity.get("version"):
        fields["version"] = identity["version"]
    return f"{base}#{urlencode(fields)}"


def parse(uri: str) -> DataRef:
    """A DataRef for any data URI a job spec may carry; ValueError names what is wrong."""
    parsed = urlparse(uri)
    if parsed.scheme == STORE_SCHEME:
        return _parse_store(uri, parsed)
    if parsed.scheme == "s3":
        return _parse_s3(uri, parsed)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme == "file" else uri
        return DataRef("path", Path(path).name, path=path)
    raise ValueError(f"data {uri!r}: unsupported scheme {parsed.scheme!r}")


def _parse_store(uri: str, parsed) -> DataRef:
    name = unquote(parsed.path).strip("/")
    if not SHA256_HEX.match(parsed.netloc) or not name or "/" in name or name in (".", ".."):
        raise ValueError(f"data {uri!r}: expected {STORE_SCHEME}://<64 hex digits>/<name>")
    return DataRef("store", name, DIR if parsed.path.endswith("/") else FILE, sha256=parsed.netloc)


def _parse_s3(uri: str, parsed) -> DataRef:
    key = parsed.path.lstrip("/")
    if not parsed.netloc or not key or key.endswith("/"):
        raise ValueError(f"data {uri!r}: expected s3://bucket/key naming one object")
    pin = dict(parse_qsl(parsed.fragment))
    sha = pin.get("sha256")
    if sha is not None and not SHA256_HEX.match(sha):
        raise ValueError(f"data {uri!r}: sha256 must be 64 lowercase hex digits")
    size = pin.get("size")
    return DataRef(
        "s3",
        Path(key).name,
        sha256=sha,
        bucket=parsed.netloc,
        key=key,
        etag=pin.get("etag"),
        size=int(size) if size and size.isdigit() else None,
        version=pin.get("version"),
    )


def unpinned(uri: str) -> str:
    """The location alone, without the content pin (what an operator wrote)."""
    return uri.split("#", 1)[0] if uri.startswith("s3://") else uri
