"""Fetch a job's input data on a worker: by content digest, verified, through a shared cache.

A job's data URI (``manifest.dataref``) says which bytes it means:

- ``store+sha256://<hex>/<name>[/]``: staged in the fleet's store at publish; fetched by
  digest, verified, cached by digest (``artifacts.datacache``).
- ``s3://bucket/key#sha256=<hex>``: fetched from its bucket, verified against the digest.
- ``s3://bucket/key#etag=..&size=..[&version=..]``: the pinned version if the bucket keeps
  versions, else the object only while its ETag and size still match the publish.
- an unpinned ``s3://`` URI or a local path (records published before pinning): as before,
  the object cached by its ETag, the path used as it is.

With ``into`` (the job's directory), the result is a hard link the job owns for its run, so
the cache may evict the entry meanwhile.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from core.errors import DigestMismatch, StoreError
from core.settings import data_cache_bytes
from manifest import dataref

from .datacache import DataCache
from .stores import Store, open_store_at

CACHE_KEY_CHARS = 32  # hex characters of the legacy cache directory name


def cache_path(uri: str, tag: str, cache_dir: Path) -> Path:
    """Where the unpinned object at `uri` with version `tag` lives in the legacy cache."""
    key = hashlib.sha256(f"{uri}\n{tag}".encode()).hexdigest()[:CACHE_KEY_CHARS]
    return Path(cache_dir) / key / PurePosixPath(urlparse(uri).path).name


def fetch(
    uri: str,
    cache_dir: Path,
    store_factory: Callable[[str | None], Store] = open_store_at,
    into: Path | None = None,
    cache_bytes: int | None = None,
) -> Path:
    """A local path holding the data `uri` names (see the module docstring). ``cache_bytes``
    bounds the cache (a worker passes its settings'; else FLEET_DATA_CACHE_GIB)."""
    try:
        ref = dataref.parse(uri)
    except ValueError as e:
        raise StoreError(f"{e}; use a local path, file:///path or s3://bucket/key") from e
    if ref.scheme == "path":
        return _local(ref)
    if ref.scheme == "s3" and not ref.pinned:
        return _fetch_s3_unpinned(uri, ref, Path(cache_dir), store_factory)
    cache = DataCache(Path(cache_dir), data_cache_bytes() if cache_bytes is None else cache_bytes)
    payload = (
        _fetch_store(ref, cache, store_factory)
        if ref.scheme == "store"
        else _fetch_s3(uri, ref, cache, store_factory)
    )
    return cache.pin(payload, Path(into), ref.name) if into is not None else payload


def _fetch_store(ref: dataref.DataRef, cache: DataCache, store_factory) -> Path:
    store = store_factory(None)
    try:
        return cache.get(
            ref.sha256, ref.kind, lambda dest: store.get_data(ref.sha256, dest), ref.sha256
        )
    except DigestMismatch:
        raise
    except StoreError as e:
        raise StoreError(
            f"data {ref.name} (sha256 {ref.sha256}) is not in the store: {e}; "
            "publish the manifest again to stage it"
        ) from e


def _fetch_s3(uri: str, ref: dataref.DataRef, cache: DataCache, store_factory) -> Path:
    store = store_factory(f"s3://{ref.bucket}")
    if ref.sha256:

        def fill(dest: Path) -> None:
            store.get_file(ref.key, dest)

        try:
            return cache.get(ref.sha256, ref.kind, fill, ref.sha256)
        except DigestMismatch as e:
            raise DigestMismatch(
                f"{dataref.unpinned(uri)} changed after publish ({e}); "
                "publish again to train on the new bytes"
            ) from e
    key = hashlib.sha256(uri.encode()).hexdigest()

    def fill_version(dest: Path) -> None:
        if not ref.version:
            now = store.identity(ref.key)
            if (now.get("etag"), now.get("size")) != (ref.etag, ref.size):
                raise DigestMismatch(
                    f"{dataref.unpinned(uri)} changed after publish (ETag/size "
                    f"{ref.etag}/{ref.size}, now {now}); publish again to train on it"
                )
        store.get_file(ref.key, dest, version=ref.version)

    return cache.get(key, ref.kind, fill_version)


def _local(ref: dataref.DataRef) -> Path:
    path = Path(ref.path).expanduser()
    if not path.exists():
        raise StoreError(
            f"data {str(path)!r} does not exist on this host; "
            "publish the manifest again (data is now staged through the store)"
        )
    return path


def _fetch_s3_unpinned(uri: str, ref: dataref.DataRef, cache_dir: Path, store_factory) -> Path:
    store = store_factory(f"s3://{ref.bucket}")
    target = cache_path(uri, store.file_tag(ref.key), cache_dir)
    if not target.is_file():
        store.get_file(ref.key, target)
    return target
