"""Fetch a job's input data: local paths as they are, S3 objects into a shared cache.

The cache is keyed by the object's checksum (or ETag) from a HEAD request, so an
unchanged object is downloaded once per host and a changed one gets a fresh entry.
Downloads land in a temp file and are renamed, so concurrent workers never read
a partial file.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from fleet.errors import StoreError

from .store import Store, open_store

CACHE_KEY_CHARS = 32   # hex characters of the cache directory name


def cache_path(uri: str, tag: str, cache_dir: Path) -> Path:
    """Where the object at `uri` with version `tag` lives in the cache."""
    key = hashlib.sha256(f"{uri}\n{tag}".encode()).hexdigest()[:CACHE_KEY_CHARS]
    return Path(cache_dir) / key / PurePosixPath(urlparse(uri).path).name


def fetch(uri: str, cache_dir: Path,
          store_factory: Callable[[str], Store] = open_store) -> Path:
    """A local path for `uri`: a path or file:// URI as is, an s3:// URI via the cache."""
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        return _fetch_s3(uri, parsed, Path(cache_dir), store_factory)
    if parsed.scheme not in ("", "file"):
        raise StoreError(f"data {uri!r}: unsupported scheme {parsed.scheme!r}; "
                         "use a local path, file:///path or s3://bucket/key")
    path = Path(unquote(parsed.path) if parsed.scheme == "file" else uri).expanduser()
    if not path.exists():
        raise StoreError(f"data {str(path)!r} does not exist on this host; "
                         "copy it here or upload it and use an s3:// URI")
    return path


def _fetch_s3(uri: str, parsed, cache_dir: Path, store_factory) -> Path:
    key = parsed.path.lstrip("/")
    if not parsed.netloc or not key or key.endswith("/"):
        raise StoreError(f"data {uri!r}: expected s3://bucket/key naming one object")
    store = store_factory(f"s3://{parsed.netloc}")
    target = cache_path(uri, store.file_tag(key), cache_dir)
    if not target.is_file():
        store.get_file(key, target)
    return target
