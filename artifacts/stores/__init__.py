"""Where bundles, staged data and checkpoints live: one `Store` interface (`base`), a
local-directory backend (`file`) and an S3 backend (`s3`), opened from `StoreSettings`."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import ParseResult, unquote, urlparse

from core.errors import StoreError
from core.registry import FLEET_STORE_URL
from core.secrets import masked
from core.settings import StoreSettings

from .base import StagedBundle, Store, StoredArtifact, atomic_write
from .file import FileStore
from .s3 import S3Store, object_identity, s3_client, shared_s3_client

__all__ = [
    "FileStore",
    "S3Store",
    "StagedBundle",
    "Store",
    "StoredArtifact",
    "atomic_write",
    "object_identity",
    "open_store",
    "open_store_at",
    "s3_client",
]

ACCEPTED_FORMS = "file:///abs/dir, file://./rel/dir or s3://bucket/prefix"


def _file_root(parsed: ParseResult) -> Path:
    # file:///abs/dir has an empty host; file://./rel/dir puts "." in the host.
    if parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    if parsed.netloc in (".", ".."):
        return Path(parsed.netloc + unquote(parsed.path)).resolve()
    raise StoreError(
        f"{FLEET_STORE_URL.name}: {masked(parsed.geturl())!r} names a remote host; "
        f"use {ACCEPTED_FORMS}"
    )


def open_store(settings: StoreSettings | None = None) -> Store:
    """The store `settings.url` names (None: `StoreSettings.from_env()`)."""
    settings = settings or StoreSettings.from_env()
    parsed = urlparse(settings.url)
    if parsed.scheme == "file":
        return FileStore(_file_root(parsed))
    if parsed.scheme == "s3" and "@" in parsed.netloc:  # every later message would show it
        raise StoreError(
            f"{FLEET_STORE_URL.name}: {masked(settings.url)!r} carries credentials; give them as "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and the store as s3://bucket/prefix"
        )
    if parsed.scheme == "s3" and parsed.netloc:
        return S3Store(parsed.netloc, parsed.path.strip("/"), shared_s3_client(settings))
    raise StoreError(
        f"{FLEET_STORE_URL.name}: cannot use {masked(settings.url)!r}; "
        f"accepted forms: {ACCEPTED_FORMS}"
    )


def open_store_at(url: str | None = None) -> Store:
    """The store at `url` (None: FLEET_STORE_URL), with the S3 endpoint and credentials from
    the environment: for an operator's `--store URL` and for data that names its own bucket."""
    return open_store(StoreSettings.from_env(url=url))
