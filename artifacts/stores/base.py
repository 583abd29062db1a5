"""The `Store` interface every backend implements, and the helpers the backends share.

Bundles are content addressed: `<prefix>/<kind>/<sha256>/bundle.tar.zst` with a
`meta.json` beside it. Every write is verified against the caller's digest
before it becomes visible, so a stored bundle always hashes to its key.

A worker's run stages its bundle under a key of its own run token
(`<prefix>/.staging/<token>/<kind>/<sha256>/`), which nothing lists; only once the job's
record names that bundle is it promoted to its content-addressed key. A run that lost its
job discards its staged bundle, and `tasks.strays` deletes what a dead run left.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from core import files
from core.constants import BUNDLE_NAME, DATA_DIR, META_NAME, STAGING_DIR
from core.errors import DigestMismatch, StoreError
from core.files import PRIVATE, atomic_file

from ..bundle import sha256_file

# advance(n_bytes): told as bytes go out, for a progress bar
Advance = Callable[[int], None]


@dataclass(frozen=True)
class StoredArtifact:
    """A bundle in a store; `existed` is True when the put found it already there."""

    uri: str
    sha256: str
    size: int
    existed: bool


@dataclass(frozen=True)
class StagedBundle:
    """A bundle a run staged and nobody promoted or discarded yet (see `Store.staged`)."""

    token: str  # the run's claim token: whose upload it is
    kind: str
    sha256: str
    job_id: str | None  # from its meta.json (None: unreadable)
    staged_at: float | None  # when its meta.json was written (None: unreadable)


class Store(ABC):
    """A content-addressed home for bundles plus arbitrary named files."""

    prefix: str = ""

    def bundle_key(self, kind: str, sha256: str) -> str:
        """Key of a bundle, relative to the store root."""
        return self.full_key(f"{kind}/{sha256}/{BUNDLE_NAME}")

    def meta_key(self, kind: str, sha256: str) -> str:
        """Key of a bundle's meta.json, relative to the store root."""
        return self.full_key(f"{kind}/{sha256}/{META_NAME}")

    def full_key(self, key: str) -> str:
        """`key` below this store's prefix."""
        return f"{self.prefix}/{key}" if self.prefix else key

    def data_key(self, sha256: str) -> str:
        """Key of staged job data (a file, or a directory's tar), addressed by its sha256."""
        return self.full_key(f"{DATA_DIR}/{sha256}")

    @abstractmethod
    def has_data(self, sha256: str) -> bool:
        """True when data with this digest is already staged (one HEAD or stat, no download)."""

    @abstractmethod
    def put_data(self, path: Path, sha256: str, advance: Advance | None = None) -> bool:
        """Stage the file at `path` as data `sha256`, verified; False when it was already there.

        `advance(n_bytes)` is called as bytes are sent (for a progress bar).
        """

    @abstractmethod
    def get_data(self, sha256: str, dest: Path) -> Path:
        """Download staged data to `dest` atomically, verified against `sha256`."""

    @abstractmethod
    def put_bundle(self, kind: str, bundle_path: Path, sha256: str, meta: dict) -> StoredArtifact:
        """Store a bundle and its meta.json; a no-op when the same bytes are there.

        Raises DigestMismatch, leaving nothing stored, when the bytes do not hash
        to `sha256`.
        """

    @abstractmethod
    def get_bundle(self, kind: str, sha256: str, dest: Path) -> Path:
        """Download a bundle to `dest` (a file, or a directory to put bundle.tar.zst in),
        verified against `sha256`; returns the file's path."""

    @abstractmethod
    def get_meta(self, kind: str, sha256: str) -> dict:
        """The meta.json stored beside a bundle."""

    @abstractmethod
    def list_artifacts(self) -> list[dict]:
        """Every bundle's meta.json, each with its bundle's "uri" added; a meta.json that
        cannot be read gives an entry with "kind", "sha256", "uri" and "error" instead."""

    @abstractmethod
    def verify(self, kind: str, sha256: str) -> bool:
        """Re-hash the stored bundle (or, before its promotion, the staged copy its record
        names: :meth:`readable_key`); False when it is missing or does not match."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> str:
        """Store any file under `key` (below the prefix), verified; returns its URI."""

    @abstractmethod
    def get_file(self, key: str, dest: Path) -> Path:
        """Fetch the file at `key` to `dest` atomically (temp file, then rename)."""

    @abstractmethod
    def file_tag(self, key: str) -> str:
        """A string that changes whenever the file at `key` changes (for caches)."""

    @abstractmethod
    def uri_for(self, kind: str, sha256: str) -> str:
        """The URI of a bundle, as operators and job records show it."""

    @abstractmethod
    def ping(self) -> None:
        """Raise StoreError unless the store can be reached and written."""

    @abstractmethod
    def delete_file(self, key: str) -> None:
        """Remove the file at `key` (below the prefix); no error when it is not there."""

    # --- staging: a run's bundle becomes an artifact only once its job's record names it ---
    def staged_key(self, token: str, kind: str, sha256: str, name: str = BUNDLE_NAME) -> str:
        """Key of a file of the bundle run ``token`` staged."""
        return self.full_key(f"{STAGING_DIR}/{token}/{kind}/{sha256}/{name}")

    def stage_bundle(
        self, token: str, kind: str, bundle_path: Path, sha256: str, meta: dict
    ) -> StoredArtifact:
        """Store run ``token``'s bundle where nothing lists it, verified; the returned URI is
        the one it will have once promoted (what the job's record names)."""
        size = Path(bundle_path).stat().st_size
        # meta.json first: a staged bundle always says whose job it is and how old it is
        meta = stored_meta(kind, sha256, size, {**meta, "staged_at": time.time()})
        self._put_bytes_at(self.staged_key(token, kind, sha256, META_NAME), meta_bytes(meta))
        try:
            self._put_path_at(self.staged_key(token, kind, sha256), Path(bundle_path), sha256)
        except BaseException:  # nothing half staged: a wrong digest or a failed upload
            with contextlib.suppress(StoreError):  # down: the sweep deletes it once old
                self.discard(token, kind, sha256)
            raise
        return StoredArtifact(self.uri_for(kind, sha256), sha256, size, False)

    def promote(self, token: str, kind: str, sha256: str) -> None:
        """Make run ``token``'s staged bundle the artifact its job's record names, then drop
        the staged copy. Idempotent: a bundle promoted already is left as it is."""
        bundle, meta = self.bundle_key(kind, sha256), self.meta_key(kind, sha256)
        staged = self.staged_key(token, kind, sha256)
        staged_meta = self.staged_key(token, kind, sha256, META_NAME)
        if not self._has_key(staged) and not self._has_key(bundle):
            raise StoreError(
                f"{self.uri_for(kind, sha256)}: neither stored nor staged by run "
                f"{token}; its kept bundle (if any) is stored at the worker's next start"
            )
        if not self._has_key(bundle):
            self._move_key(staged, bundle, sha256)
        if not self._has_key(meta) and self._has_key(staged_meta):
            self._move_key(staged_meta, meta, None)
        self.discard(token, kind, sha256)

    def discard(self, token: str, kind: str, sha256: str) -> None:
        """Delete run ``token``'s staged bundle (no error when it is not there)."""
        self._delete_key(self.staged_key(token, kind, sha256))
        self._delete_key(self.staged_key(token, kind, sha256, META_NAME))

    def readable_key(self, kind: str, sha256: str, name: str = BUNDLE_NAME) -> str:
        """Where a bundle's file can be read now: its listed key, or, in the moment between
        the record naming a bundle and its promotion, a staged copy of the same content (the
        digest is the key, so any run's copy is the same bytes, and reads verify it)."""
        listed = self.full_key(f"{kind}/{sha256}/{name}")
        if self._has_key(listed):
            return listed
        root = self.full_key(STAGING_DIR) + "/"
        for key in self._keys_under(root):
            if key.endswith(f"/{kind}/{sha256}/{name}") and self._has_key(key):
                return key
        return listed

    def _read_through_promotion(self, kind: str, sha256: str, read: Callable[[str], object]):
        """``read(key)`` from :meth:`readable_key`, once more if a promotion moved it away."""
        try:
            return read(self.readable_key(kind, sha256))
        except StoreError:
            return read(self.readable_key(kind, sha256))

    def staged(self) -> list[StagedBundle]:
        """Every staged bundle, oldest meta first where readable."""
        root = self.full_key(STAGING_DIR) + "/"
        found: dict[tuple[str, str, str], StagedBundle] = {}
        for key in self._keys_under(root):
            parts = key[len(root) :].split("/")
            if len(parts) != 4 or parts[3] not in (BUNDLE_NAME, META_NAME):
                continue
            token, kind, sha256, _ = parts
            if (token, kind, sha256) not in found:
                found[(token, kind, sha256)] = self._staged_entry(token, kind, sha256)
        return sorted(found.values(), key=lambda b: b.staged_at or 0.0)

    def _staged_entry(self, token: str, kind: str, sha256: str) -> StagedBundle:
        try:
            meta = json.loads(self._read_key(self.staged_key(token, kind, sha256, META_NAME)))
            return StagedBundle(token, kind, sha256, str(meta["job_id"]), float(meta["staged_at"]))
        except (StoreError, ValueError, KeyError, TypeError):
            return StagedBundle(token, kind, sha256, None, None)

    # the primitives staging is made of; keys are full keys (prefix included)
    @abstractmethod
    def _put_path_at(self, key: str, path: Path, sha256: str) -> None:
        """Store the file at `path` under `key`, verified against `sha256`."""

    @abstractmethod
    def _put_bytes_at(self, key: str, data: bytes) -> None:
        """Store `data` under `key`."""

    @abstractmethod
    def _move_key(self, src: str, dest: str, sha256: str | None) -> None:
        """Move the object at `src` to `dest` inside the store, at once where the store can
        (verified when `sha256` is given and the bytes travel)."""

    @abstractmethod
    def _has_key(self, key: str) -> bool:
        """True when an object is stored under `key`."""

    @abstractmethod
    def _read_key(self, key: str) -> bytes:
        """The bytes stored under `key`; StoreError when there are none."""

    @abstractmethod
    def _keys_under(self, prefix: str) -> Iterator[str]:
        """Every key that starts with `prefix`."""

    @abstractmethod
    def _delete_key(self, key: str) -> None:
        """Delete the object under `key`; no error when it is not there."""


def digest_mismatch(where: str, expected: str, actual: str) -> DigestMismatch:
    return DigestMismatch(
        f"{where}: expected sha256 {expected}, found {actual}; "
        "the source changed or the bytes were corrupted in transit"
    )


def stored_meta(kind: str, sha256: str, size: int, meta: dict) -> dict:
    """A bundle's meta.json as stored: the caller's fields plus kind, digest and size."""
    return {**meta, "kind": kind, "sha256": sha256, "size": size}


def meta_bytes(meta: dict) -> bytes:
    return json.dumps(meta, indent=2, sort_keys=True).encode() + b"\n"


def listing_entry(
    kind: str, sha256: str, uri: str, meta_uri: str, read: Callable[[], bytes]
) -> dict:
    """A listing entry: the meta.json with the bundle's "uri", or, when that meta.json
    cannot be read as a JSON object, what is known from its key plus an "error" naming it."""
    try:
        meta = json.loads(read())
        if not isinstance(meta, dict):
            raise ValueError(f"expected a JSON object, found {type(meta).__name__}")
        return {**meta, "uri": uri}
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return {
            "kind": kind,
            "sha256": sha256,
            "uri": uri,
            "error": f"{meta_uri}: unreadable ({e}); the bundle is listed without its metadata",
        }


def bundle_dest(dest: Path) -> Path:
    """Where get_bundle writes: `dest` itself, or bundle.tar.zst inside a directory."""
    return dest / BUNDLE_NAME if dest.is_dir() else dest


def atomic_copy(src: Path, dest: Path, sha256: str | None = None) -> None:
    """Copy via a private temp file beside `dest`.

    With `sha256`, re-hash the copy before renaming.
    """
    with atomic_file(dest, PRIVATE) as tmp:
        shutil.copyfile(src, tmp)
        if sha256 is not None and (actual := sha256_file(tmp)) != sha256:
            raise digest_mismatch(str(src), sha256, actual)


def atomic_write(dest: Path, data: bytes) -> None:
    """Write `data` to `dest` privately via a temp file and a rename (core.files)."""
    files.atomic_write(dest, data, PRIVATE)
