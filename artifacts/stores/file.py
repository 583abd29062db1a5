"""A store in a local (or network-mounted) directory: `file:///dir`.

Every write is a verified copy to a temp file and a rename, so a file present under its
digest's key is complete and correct.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from core.constants import META_NAME
from core.errors import StoreError
from core.registry import FLEET_STORE_URL

from ..bundle import sha256_file
from .base import (
    Advance,
    Store,
    StoredArtifact,
    atomic_copy,
    atomic_write,
    bundle_dest,
    listing_entry,
    meta_bytes,
    stored_meta,
)


class FileStore(Store):
    """A store in a local (or network-mounted) directory: `file:///dir`."""

    def __init__(self, root: Path, prefix: str = ""):
        self.root, self.prefix = Path(root).resolve(), prefix.strip("/")

    def _path(self, key: str) -> Path:
        return self.root / key

    def put_bundle(self, kind: str, bundle_path: Path, sha256: str, meta: dict) -> StoredArtifact:
        target = self._path(self.bundle_key(kind, sha256))
        size = Path(bundle_path).stat().st_size
        # The key is the digest and writes are verified renames, so an equal size
        # means these bytes are already stored.
        existed = target.is_file() and target.stat().st_size == size
        if not existed:
            atomic_copy(Path(bundle_path), target, sha256)
        meta_path = self._path(self.meta_key(kind, sha256))
        if not (existed and meta_path.is_file()):
            atomic_write(meta_path, meta_bytes(stored_meta(kind, sha256, size, meta)))
        return StoredArtifact(self.uri_for(kind, sha256), sha256, size, existed)

    def get_bundle(self, kind: str, sha256: str, dest: Path) -> Path:
        dest = bundle_dest(Path(dest))
        self._read_through_promotion(
            kind, sha256, lambda key: atomic_copy(self._existing(key), dest, sha256)
        )
        return dest

    def get_meta(self, kind: str, sha256: str) -> dict:
        return json.loads(self._existing(self.meta_key(kind, sha256)).read_bytes())

    def list_artifacts(self) -> list[dict]:
        base = self._path(self.prefix) if self.prefix else self.root
        found = []
        for meta_path in sorted(base.glob(f"*/*/{META_NAME}")):
            kind, sha256 = meta_path.parent.parent.name, meta_path.parent.name
            found.append(
                listing_entry(
                    kind,
                    sha256,
                    self.uri_for(kind, sha256),
                    meta_path.as_uri(),
                    meta_path.read_bytes,
                )
            )
        return found

    def verify(self, kind: str, sha256: str) -> bool:
        def matches(key: str) -> bool:
            path = self._path(key)
            return path.is_file() and sha256_file(path) == sha256

        # a second look: a promotion may have moved the staged copy away meanwhile
        return matches(self.readable_key(kind, sha256)) or matches(self.readable_key(kind, sha256))

    def put_file(self, key: str, path: Path) -> str:
        target = self._path(self.full_key(key))
        atomic_copy(Path(path), target)
        return target.as_uri()

    def get_file(self, key: str, dest: Path) -> Path:
        atomic_copy(self._existing(self.full_key(key)), Path(dest))
        return Path(dest)

    def has_data(self, sha256: str) -> bool:
        return self._path(self.data_key(sha256)).is_file()

    def put_data(self, path: Path, sha256: str, advance: Advance | None = None) -> bool:
        if self.has_data(sha256):  # written only by verified renames: present means complete
            return False
        atomic_copy(Path(path), self._path(self.data_key(sha256)), sha256)
        if advance:
            advance(Path(path).stat().st_size)
        return True

    def get_data(self, sha256: str, dest: Path) -> Path:
        atomic_copy(self._existing(self.data_key(sha256)), Path(dest), sha256)
        return Path(dest)

    def file_tag(self, key: str) -> str:
        st = self._existing(self.full_key(key)).stat()
        return f"{st.st_size}-{st.st_mtime_ns}-{st.st_ino}"

    def uri_for(self, kind: str, sha256: str) -> str:
        return self._path(self.bundle_key(kind, sha256)).as_uri()

    def ping(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(
                f"store {self.root.as_uri()}: cannot create it: {e}; "
                f"set {FLEET_STORE_URL.name} to a writable directory"
            ) from e
        if not os.access(self.root, os.W_OK):
            raise StoreError(
                f"store {self.root.as_uri()}: not writable; "
                f"set {FLEET_STORE_URL.name} to a writable directory"
            )

    def delete_file(self, key: str) -> None:
        path = self._path(self.full_key(key))
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            raise StoreError(f"{path.as_uri()}: cannot delete: {e}") from e

    # --- staging primitives (base.Store) ----------------------------------------------
    def _put_path_at(self, key: str, path: Path, sha256: str) -> None:
        atomic_copy(Path(path), self._path(key), sha256)

    def _put_bytes_at(self, key: str, data: bytes) -> None:
        atomic_write(self._path(key), data)

    def _move_key(self, src: str, dest: str, sha256: str | None) -> None:
        # a rename: the record names the bundle a moment before it is listed, not a copy's time
        target = self._path(dest)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(self._existing(src), target)
        except OSError as e:
            raise StoreError(f"{target.as_uri()}: cannot move the staged file there: {e}") from e

    def _has_key(self, key: str) -> bool:
        return self._path(key).is_file()

    def _read_key(self, key: str) -> bytes:
        return self._existing(key).read_bytes()

    def _keys_under(self, prefix: str) -> Iterator[str]:
        base = self._path(prefix)
        if base.is_dir():
            for path in sorted(base.rglob("*")):
                if path.is_file() and not path.name.endswith(".tmp"):
                    yield path.relative_to(self.root).as_posix()

    def _delete_key(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
            for parent in path.parents:  # a staged run's folders go with their last file
                if parent == self.root or not parent.is_relative_to(self.root):
                    break
                parent.rmdir()
        except OSError as e:
            if path.exists():
                raise StoreError(f"{path.as_uri()}: cannot delete: {e}") from e

    def _existing(self, key: str) -> Path:
        path = self._path(key)
        if not path.is_file():
            raise StoreError(f"{path.as_uri()}: no such object in the store")
        return path
