"""Where bundles live: one `Store` interface, a local-directory and an S3 backend.

Bundles are content addressed: `<prefix>/<kind>/<sha256>/bundle.tar.zst` with a
`meta.json` beside it. Every write is verified against the caller's digest
before it becomes visible, so a stored bundle always hashes to its key.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from core.constants import BUNDLE_NAME, DATA_DIR, META_NAME
from core.errors import DigestMismatch, StoreError

from .bundle import CHUNK_BYTES, sha256_file

STORE_URL_ENV = "FLEET_STORE_URL"
S3_ENDPOINT_ENV = "FLEET_S3_ENDPOINT_URL"
DEFAULT_STORE_DIR = ".fleet-local/store"      # relative to the working directory
DEFAULT_REGION = "us-east-1"
S3_CONNECT_TIMEOUT_S = 5
S3_READ_TIMEOUT_S = 60
S3_MAX_ATTEMPTS = 5
SINGLE_PUT_MAX_BYTES = 64 << 20  # above this, multipart with a checksum per part
PART_BYTES = 16 << 20
MAX_PARTS = 9000                 # S3 allows 10,000; keep headroom
UPLOAD_THREADS = 4
ACCEPTED_FORMS = "file:///abs/dir, file://./rel/dir or s3://bucket/prefix"


@dataclass(frozen=True)
class StoredArtifact:
    """A bundle in a store; `existed` is True when the put found it already there."""

    uri: str
    sha256: str
    size: int
    existed: bool


def _mismatch(where: str, expected: str, actual: str) -> DigestMismatch:
    return DigestMismatch(f"{where}: expected sha256 {expected}, found {actual}; "
                          "the source changed or the bytes were corrupted in transit")


def _stored_meta(kind: str, sha256: str, size: int, meta: dict) -> dict:
    return {**meta, "kind": kind, "sha256": sha256, "size": size}


class Store(ABC):
    """A content-addressed home for bundles plus arbitrary named files."""

    prefix: str = ""

    def bundle_key(self, kind: str, sha256: str) -> str:
        """Key of a bundle, relative to the store root."""
        return self._key(f"{kind}/{sha256}/{BUNDLE_NAME}")

    def meta_key(self, kind: str, sha256: str) -> str:
        """Key of a bundle's meta.json, relative to the store root."""
        return self._key(f"{kind}/{sha256}/{META_NAME}")

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def data_key(self, sha256: str) -> str:
        """Key of staged job data (a file, or a directory's tar), addressed by its sha256."""
        return self._key(f"{DATA_DIR}/{sha256}")

    @abstractmethod
    def has_data(self, sha256: str) -> bool:
        """True when data with this digest is already staged (one HEAD or stat, no download)."""

    @abstractmethod
    def put_data(self, path: Path, sha256: str, advance=None) -> bool:
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
        """Re-hash the stored bundle; False when it is missing or does not match."""

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


def _atomic_copy(src: Path, dest: Path, sha256: str | None = None) -> None:
    """Copy via a temp file beside `dest`; with `sha256`, re-hash the copy before renaming."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        if sha256 is not None and (actual := sha256_file(Path(tmp))) != sha256:
            raise _mismatch(str(src), sha256, actual)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(dest: Path, data: bytes) -> None:
    """Write `data` to `dest` via a temp file and a rename: readers never see a partial file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _meta_bytes(meta: dict) -> bytes:
    return json.dumps(meta, indent=2, sort_keys=True).encode() + b"\n"


def _listed(kind: str, sha256: str, uri: str, meta_uri: str, read) -> dict:
    """A listing entry: the meta.json with the bundle's "uri", or, when that meta.json
    cannot be read as a JSON object, what is known from its key plus an "error" naming it."""
    try:
        meta = json.loads(read())
        if not isinstance(meta, dict):
            raise ValueError(f"expected a JSON object, found {type(meta).__name__}")
        return {**meta, "uri": uri}
    except ValueError as e:   # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return {"kind": kind, "sha256": sha256, "uri": uri,
                "error": f"{meta_uri}: unreadable ({e}); the bundle is listed without its metadata"}


def _bundle_dest(dest: Path) -> Path:
    return dest / BUNDLE_NAME if dest.is_dir() else dest


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
            _atomic_copy(Path(bundle_path), target, sha256)
        meta_path = self._path(self.meta_key(kind, sha256))
        if not (existed and meta_path.is_file()):
            atomic_write(meta_path, _meta_bytes(_stored_meta(kind, sha256, size, meta)))
        return StoredArtifact(self.uri_for(kind, sha256), sha256, size, existed)

    def get_bundle(self, kind: str, sha256: str, dest: Path) -> Path:
        src = self._existing(self.bundle_key(kind, sha256))
        dest = _bundle_dest(Path(dest))
        _atomic_copy(src, dest, sha256)
        return dest

    def get_meta(self, kind: str, sha256: str) -> dict:
        return json.loads(self._existing(self.meta_key(kind, sha256)).read_bytes())

    def list_artifacts(self) -> list[dict]:
        base = self._path(self.prefix) if self.prefix else self.root
        found = []
        for meta_path in sorted(base.glob(f"*/*/{META_NAME}")):
            kind, sha256 = meta_path.parent.parent.name, meta_path.parent.name
            found.append(_listed(kind, sha256, self.uri_for(kind, sha256), meta_path.as_uri(),
                                 meta_path.read_bytes))
        return found

    def verify(self, kind: str, sha256: str) -> bool:
        path = self._path(self.bundle_key(kind, sha256))
        return path.is_file() and sha256_file(path) == sha256

    def put_file(self, key: str, path: Path) -> str:
        target = self._path(self._key(key))
        _atomic_copy(Path(path), target)
        return target.as_uri()

    def get_file(self, key: str, dest: Path) -> Path:
        _atomic_copy(self._existing(self._key(key)), Path(dest))
        return Path(dest)

    def has_data(self, sha256: str) -> bool:
        return self._path(self.data_key(sha256)).is_file()

    def put_data(self, path: Path, sha256: str, advance=None) -> bool:
        if self.has_data(sha256):  # written only by verified renames: present means complete
            return False
        _atomic_copy(Path(path), self._path(self.data_key(sha256)), sha256)
        if advance:
            advance(Path(path).stat().st_size)
        return True

    def get_data(self, sha256: str, dest: Path) -> Path:
        _atomic_copy(self._existing(self.data_key(sha256)), Path(dest), sha256)
        return Path(dest)

    def file_tag(self, key: str) -> str:
        st = self._existing(self._key(key)).stat()
        return f"{st.st_size}-{st.st_mtime_ns}-{st.st_ino}"

    def uri_for(self, kind: str, sha256: str) -> str:
        return self._path(self.bundle_key(kind, sha256)).as_uri()

    def ping(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"store {self.root.as_uri()}: cannot create it: {e}; "
                             f"set {STORE_URL_ENV} to a writable directory") from e
        if not os.access(self.root, os.W_OK):
            raise StoreError(f"store {self.root.as_uri()}: not writable; "
                             f"set {STORE_URL_ENV} to a writable directory")

    def delete_file(self, key: str) -> None:
        try:
            self._path(self._key(key)).unlink(missing_ok=True)
        except OSError as e:
            raise StoreError(f"{self._path(self._key(key)).as_uri()}: cannot delete: {e}") from e

    def _existing(self, key: str) -> Path:
        path = self._path(key)
        if not path.is_file():
            raise StoreError(f"{path.as_uri()}: no such object in the store")
        return path


def s3_client(endpoint_url: str | None = None, env: Mapping[str, str] | None = None):
    """A boto3 S3 client for AWS or MinIO: path-style, standard retries, timeouts.

    Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or boto3's
    usual chain); the endpoint from FLEET_S3_ENDPOINT_URL.
    """
    import boto3
    from botocore.config import Config

    env = os.environ if env is None else env
    config = Config(s3={"addressing_style": "path"},
                    retries={"mode": "standard", "max_attempts": S3_MAX_ATTEMPTS},
                    connect_timeout=S3_CONNECT_TIMEOUT_S, read_timeout=S3_READ_TIMEOUT_S,
                    max_pool_connections=UPLOAD_THREADS * 2)
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url or env.get(S3_ENDPOINT_ENV) or None,
        region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=env.get("AWS_SESSION_TOKEN"), config=config)


def _b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


def object_identity(head: dict) -> dict:
    """An S3 HEAD reply's content identity: the sha256 fleet stored as metadata, else a
    full-object ChecksumSHA256 (not a multipart checksum of checksums), else ETag + size +
    VersionId."""
    meta_sha = (head.get("Metadata") or {}).get("sha256", "")
    if len(meta_sha) == 64 and all(c in "0123456789abcdef" for c in meta_sha):
        return {"sha256": meta_sha}
    checksum = head.get("ChecksumSHA256")
    if checksum and "-" not in checksum and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT":
        with contextlib.suppress(ValueError):
            raw = base64.b64decode(checksum, validate=True)
            if len(raw) == 32:
                return {"sha256": raw.hex()}
    version = head.get("VersionId")
    return {"etag": head["ETag"].strip('"'), "size": int(head["ContentLength"]),
            "version": version if version and version != "null" else None}


def _is_missing(err) -> bool:
    return err.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}


class S3Store(Store):
    """A store in an S3 bucket (AWS, MinIO): `s3://bucket/prefix`."""

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None,
                 client=None, *, part_bytes: int = PART_BYTES,
                 single_put_max_bytes: int = SINGLE_PUT_MAX_BYTES):
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self._client = client or s3_client(endpoint_url)
        self.endpoint = endpoint_url or self._client.meta.endpoint_url
        self.part_bytes, self.single_put_max_bytes = part_bytes, single_put_max_bytes
        self._bucket_ready = False

    # --- interface -----------------------------------------------------------
    def put_bundle(self, kind: str, bundle_path: Path, sha256: str, meta: dict) -> StoredArtifact:
        key, size = self.bundle_key(kind, sha256), Path(bundle_path).stat().st_size
        head = self._head(key)
        existed = (head is not None and head["ContentLength"] == size
                   and head.get("Metadata", {}).get("sha256") == sha256)
        if not existed:
            self._upload(key, Path(bundle_path), sha256)
        meta_key = self.meta_key(kind, sha256)
        if not (existed and self._head(meta_key) is not None):
            body = _meta_bytes(_stored_meta(kind, sha256, size, meta))
            self._put_bytes(meta_key, body, hashlib.sha256(body).hexdigest())
        return StoredArtifact(self.uri_for(kind, sha256), sha256, size, existed)

    def get_bundle(self, kind: str, sha256: str, dest: Path) -> Path:
        dest = _bundle_dest(Path(dest))
        self._download(self.bundle_key(kind, sha256), dest, sha256)
        return dest

    def get_meta(self, kind: str, sha256: str) -> dict:
        return json.loads(self._get_bytes(self.meta_key(kind, sha256)))

    def list_artifacts(self) -> list[dict]:
        found = []
        for key in self._keys(self._key("")):
            parts = key[len(self._key("")):].split("/")
            if len(parts) == 3 and parts[2] == META_NAME:
                found.append(_listed(parts[0], parts[1], self.uri_for(parts[0], parts[1]), self._uri(key),
                                     lambda key=key: self._get_bytes(key)))
        return found

    def verify(self, kind: str, sha256: str) -> bool:
        key = self.bundle_key(kind, sha256)
        if self._head(key) is None:
            return False
        return self._hash_object(key) == sha256

    def put_file(self, key: str, path: Path) -> str:
        full = self._key(key)
        self._upload(full, Path(path), sha256_file(path))
        return self._uri(full)

    def get_file(self, key: str, dest: Path, version: str | None = None) -> Path:
        self._download(self._key(key), Path(dest), None, version)
        return Path(dest)

    def has_data(self, sha256: str) -> bool:
        head = self._head(self.data_key(sha256))
        return head is not None and head.get("Metadata", {}).get("sha256") == sha256

    def put_data(self, path: Path, sha256: str, advance=None) -> bool:
        if self.has_data(sha256):
            return False
        self._upload(self.data_key(sha256), Path(path), sha256, advance)
        return True

    def get_data(self, sha256: str, dest: Path) -> Path:
        self._download(self.data_key(sha256), Path(dest), sha256)
        return Path(dest)

    def identity(self, key: str) -> dict:
        """What says which bytes the object at `key` (below the prefix) holds now:
        {"sha256"} when the store knows the whole object's digest, else
        {"etag", "size", "version"} (version None on an unversioned bucket)."""
        head = self._head(self._key(key), checksums=True)
        if head is None:
            raise StoreError(f"{self._uri(self._key(key))}: no such object in the store")
        return object_identity(head)

    def file_tag(self, key: str) -> str:
        head = self._head(self._key(key), checksums=True)
        if head is None:
            raise StoreError(f"{self._uri(self._key(key))}: no such object in the store")
        return head.get("ChecksumSHA256") or head["ETag"].strip('"')

    def uri_for(self, kind: str, sha256: str) -> str:
        return self._uri(self.bundle_key(kind, sha256))

    def ping(self) -> None:
        self._bucket_ready = False
        self._ensure_bucket()

    def delete_file(self, key: str) -> None:
        self._ensure_bucket()
        self._delete(self._key(key))   # S3 deletes of a missing key succeed

    # --- plumbing --------------------------------------------------------------
    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    @contextlib.contextmanager
    def _errors(self, action: str, key: str = "") -> Iterator[None]:
        """Turn botocore failures into StoreError naming the URL (never credentials)."""
        from botocore.exceptions import BotoCoreError, ClientError

        where = self._uri(key) if key else f"s3://{self.bucket}"
        try:
            yield
        except ClientError as e:
            err = e.response.get("Error", {})
            code, message = err.get("Code", "?"), err.get("Message", "")
            if code in {"BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch"}:
                raise DigestMismatch(f"{action} {where}: server rejected the checksum "
                                     f"({code}: {message})") from e
            raise StoreError(f"{action} {where} at {self.endpoint}: {code}: {message}") from e
        except BotoCoreError as e:
            raise StoreError(f"{action} {where} at {self.endpoint}: {e}; is the endpoint "
                             f"right ({S3_ENDPOINT_ENV}) and the server up?") from e

    def _ensure_bucket(self) -> None:
        if self._bucket_ready:
            return
        from botocore.exceptions import ClientError

        with self._errors("create bucket"):
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except ClientError as e:
                if not _is_missing(e):
                    raise
                self._create_bucket()
        self._bucket_ready = True

    def _create_bucket(self) -> None:
        from botocore.exceptions import ClientError

        region = self._client.meta.region_name
        extra = ({} if region == DEFAULT_REGION
                 else {"CreateBucketConfiguration": {"LocationConstraint": region}})
        try:
            self._client.create_bucket(Bucket=self.bucket, **extra)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                raise

    def _head(self, key: str, checksums: bool = False) -> dict | None:
        from botocore.exceptions import ClientError

        self._ensure_bucket()
        extra = {"ChecksumMode": "ENABLED"} if checksums else {}
        with self._errors("head", key):
            try:
                return self._client.head_object(Bucket=self.bucket, Key=key, **extra)
            except ClientError as e:
                if _is_missing(e):
                    return None
                raise

    def _keys(self, prefix: str) -> Iterator[str]:
        self._ensure_bucket()
        with self._errors("list", prefix):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix)
            for page in pages:
                for obj in page.get("Contents", []):
                    yield obj["Key"]

    def _get_bytes(self, key: str) -> bytes:
        self._ensure_bucket()
        with self._errors("get", key):
            return self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def _hash_object(self, key: str) -> str:
        digest = hashlib.sha256()
        with self._errors("get", key):
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            for chunk in body.iter_chunks(CHUNK_BYTES):
                digest.update(chunk)
        return digest.hexdigest()

    def _delete(self, key: str) -> None:
        with self._errors("delete", key):
            self._client.delete_object(Bucket=self.bucket, Key=key)

    def _put_bytes(self, key: str, body, sha256: str) -> dict:
        with self._errors("put", key):
            return self._client.put_object(
                Bucket=self.bucket, Key=key, Body=body, ChecksumAlgorithm="SHA256",
                ChecksumSHA256=_b64(sha256), Metadata={"sha256": sha256})

    def _upload(self, key: str, path: Path, sha256: str, advance=None) -> None:
        """Upload so that the stored object provably hashes to `sha256`."""
        self._ensure_bucket()
        if path.stat().st_size > self.single_put_max_bytes:
            self._upload_multipart(key, path, sha256, advance)
            return
        # Hash locally first: a wrong digest then stores nothing. The server
        # re-checks ChecksumSHA256 against the bytes it received.
        if (actual := sha256_file(path)) != sha256:
            raise _mismatch(str(path), sha256, actual)
        with open(path, "rb") as f:
            reply = self._put_bytes(key, f, sha256)
        if reply.get("ChecksumSHA256") is None:
            self._read_back(key, sha256)
        elif reply["ChecksumSHA256"] != _b64(sha256):
            self._delete(key)
            raise _mismatch(self._uri(key), sha256, reply["ChecksumSHA256"])
        if advance:
            advance(path.stat().st_size)

    def _read_back(self, key: str, sha256: str) -> None:
        """For servers that do not report checksums: GET, hash, delete on mismatch."""
        if (actual := self._hash_object(key)) != sha256:
            self._delete(key)
            raise _mismatch(self._uri(key), sha256, actual)

    def _upload_multipart(self, key: str, path: Path, sha256: str, advance=None) -> None:
        size = path.stat().st_size
        part_bytes = max(self.part_bytes, -(-size // MAX_PARTS))
        with self._errors("start multipart upload", key):
            upload_id = self._client.create_multipart_upload(
                Bucket=self.bucket, Key=key, ChecksumAlgorithm="SHA256",
                Metadata={"sha256": sha256})["UploadId"]
        try:
            parts, actual = self._upload_parts(key, upload_id, path, part_bytes, advance)
            if actual != sha256:
                raise _mismatch(str(path), sha256, actual)
            with self._errors("complete multipart upload", key):
                self._client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id,
                    MultipartUpload={"Parts": [p for p, _ in parts]})
        except BaseException:
            with contextlib.suppress(Exception):
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key,
                                                    UploadId=upload_id)
            raise
        # Each part was checked by the server when it echoed our part checksum;
        # a server that echoes nothing gets a full read-back instead.
        if not all(echoed for _, echoed in parts):
            self._read_back(key, sha256)

    def _upload_parts(self, key: str, upload_id: str, path: Path, part_bytes: int,
                      advance=None) -> tuple[list[tuple[dict, bool]], str]:
        whole = hashlib.sha256()

        def send(number: int, data: bytes, part_b64: str) -> tuple[dict, bool]:
            with self._errors(f"upload part {number}", key):
                reply = self._client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number,
                    Body=data, ChecksumAlgorithm="SHA256", ChecksumSHA256=part_b64)
            echoed = reply.get("ChecksumSHA256")
            if echoed is not None and echoed != part_b64:
                raise _mismatch(f"{self._uri(key)} part {number}", part_b64, echoed)
            if advance:
                advance(len(data))
            return {"PartNumber": number, "ETag": reply["ETag"],
                    "ChecksumSHA256": part_b64}, echoed is not None

        futures = []
        with ThreadPoolExecutor(UPLOAD_THREADS) as pool, open(path, "rb") as f:
            number = 0
            while data := f.read(part_bytes):
                number += 1
                whole.update(data)
                part_b64 = base64.b64encode(hashlib.sha256(data).digest()).decode()
                futures.append(pool.submit(send, number, data, part_b64))
                # Bound memory: at most UPLOAD_THREADS parts wait in the pool.
                if len(futures) > UPLOAD_THREADS:
                    futures[-UPLOAD_THREADS - 1].result()
            parts = [fut.result() for fut in futures]
        return parts, whole.hexdigest()

    def _download(self, key: str, dest: Path, sha256: str | None, version: str | None = None) -> None:
        from boto3.s3.transfer import TransferConfig

        self._ensure_bucket()
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        os.close(fd)
        config = TransferConfig(multipart_chunksize=PART_BYTES, max_concurrency=UPLOAD_THREADS)
        try:
            with self._errors("download", key):
                extra = {"VersionId": version} if version else None
                self._client.download_file(self.bucket, key, tmp, ExtraArgs=extra, Config=config)
            if sha256 is not None and (actual := sha256_file(Path(tmp))) != sha256:
                raise _mismatch(self._uri(key), sha256, actual)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _file_root(parsed) -> Path:
    # file:///abs/dir has an empty host; file://./rel/dir puts "." in the host.
    if parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    if parsed.netloc in (".", ".."):
        return Path(parsed.netloc + unquote(parsed.path)).resolve()
    raise StoreError(f"{STORE_URL_ENV}: {parsed.geturl()!r} names a remote host; "
                     f"use {ACCEPTED_FORMS}")


def open_store(url: str | None = None, env: Mapping[str, str] | None = None) -> Store:
    """The store named by `url`, else FLEET_STORE_URL, else ./.fleet-local/store."""
    env = os.environ if env is None else env
    url = url or env.get(STORE_URL_ENV) or Path(DEFAULT_STORE_DIR).resolve().as_uri()
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return FileStore(_file_root(parsed))
    if parsed.scheme == "s3" and parsed.netloc:
        endpoint = env.get(S3_ENDPOINT_ENV) or None
        return S3Store(parsed.netloc, parsed.path.strip("/"), endpoint_url=endpoint,
                       client=s3_client(endpoint, env))
    raise StoreError(f"{STORE_URL_ENV}: cannot use {url!r}; accepted forms: {ACCEPTED_FORMS}")
