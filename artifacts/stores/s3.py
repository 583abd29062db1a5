"""A store in an S3 bucket (AWS, MinIO): `s3://bucket/prefix`.

Every object fleet writes carries its sha256 as metadata, and every write is checked
against the caller's digest (by the server's checksum, else by reading it back) before
it is left in place.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from core.constants import META_NAME
from core.errors import DigestMismatch, StoreError
from core.files import PRIVATE, atomic_file
from core.registry import FLEET_S3_ENDPOINT_URL
from core.settings import DEFAULT_REGION, StoreSettings

from ..bundle import CHUNK_BYTES, sha256_file
from .base import (
    Advance,
    Store,
    StoredArtifact,
    bundle_dest,
    digest_mismatch,
    listing_entry,
    meta_bytes,
    stored_meta,
)

S3_CONNECT_TIMEOUT_S = 5
S3_READ_TIMEOUT_S = 60
S3_MAX_ATTEMPTS = 5
SINGLE_PUT_MAX_BYTES = 64 << 20  # above this, boto3's multipart upload with a checksum per part
PART_BYTES = 16 << 20
MAX_PARTS = 9000  # S3 allows 10,000; keep headroom
UPLOAD_THREADS = 4
SHA256_METADATA = "sha256"  # the user-metadata key holding an object's whole sha256
MISSING_CODES = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
CHECKSUM_CODES = {"BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch"}


def s3_client(settings: StoreSettings):
    """A boto3 S3 client for AWS or MinIO: path-style, standard retries, timeouts.

    Endpoint, region and credentials come from `settings` (FLEET_S3_ENDPOINT_URL and AWS_*);
    credentials left unset fall back to boto3's usual chain.
    """
    import boto3
    from botocore.config import Config

    config = Config(
        s3={"addressing_style": "path"},
        retries={"mode": "standard", "max_attempts": S3_MAX_ATTEMPTS},
        connect_timeout=S3_CONNECT_TIMEOUT_S,
        read_timeout=S3_READ_TIMEOUT_S,
        # shared by a host's concurrent jobs (shared_s3_client), each uploading in threads
        max_pool_connections=UPLOAD_THREADS * 8,
    )
    return boto3.session.Session().client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.region,
        aws_access_key_id=settings.access_key_id,
        aws_secret_access_key=settings.secret_access_key,
        aws_session_token=settings.session_token,
        config=config,
    )


def shared_s3_client(settings: StoreSettings):
    """``s3_client(settings)``, made once per process, endpoint and credentials, then shared
    (the store's URL is not the client's: one client serves every bucket).

    Building a client loads S3's service model: 0.2-0.5 s of CPU each time, which a worker
    paid for every checkpoint sync (each FLEET_CHECKPOINT_EVERY_S of a checkpointing job),
    bundle upload and data fetch. boto3's clients are thread-safe; a forked child (its pid
    in the key) makes its own rather than share its parent's sockets."""
    return _client_of(os.getpid(), replace(settings, url=""))


@functools.lru_cache(maxsize=8)  # a host's worker talks to one or two stores
def _client_of(pid: int, settings: StoreSettings):
    return s3_client(settings)


def b64(hex_digest: str) -> str:
    """A hex digest as S3's checksum headers carry it (base64 of the raw bytes)."""
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


def object_identity(head: dict) -> dict:
    """An S3 HEAD reply's content identity: the sha256 fleet stored as metadata, else a
    full-object ChecksumSHA256 (not a multipart checksum of checksums), else ETag + size +
    VersionId."""
    meta_sha = (head.get("Metadata") or {}).get(SHA256_METADATA, "")
    if len(meta_sha) == 64 and all(c in "0123456789abcdef" for c in meta_sha):
        return {"sha256": meta_sha}
    checksum = head.get("ChecksumSHA256")
    if (
        checksum
        and "-" not in checksum
        and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT"
    ):
        with contextlib.suppress(ValueError):
            raw = base64.b64decode(checksum, validate=True)
            if len(raw) == 32:
                return {"sha256": raw.hex()}
    version = head.get("VersionId")
    return {
        "etag": head["ETag"].strip('"'),
        "size": int(head["ContentLength"]),
        "version": version if version and version != "null" else None,
    }


def file_digests(path: Path, part_bytes: int) -> tuple[str, str]:
    """(sha256 hex of the file, base64 sha256 of its `part_bytes` parts' sha256 digests: the
    checksum S3 reports for a multipart object uploaded in those parts), in one read."""
    whole, composite = hashlib.sha256(), hashlib.sha256()
    part, left = hashlib.sha256(), part_bytes
    with open(path, "rb") as f:
        while chunk := f.read(min(CHUNK_BYTES, left)):
            whole.update(chunk)
            part.update(chunk)
            left -= len(chunk)
            if not left:
                composite.update(part.digest())
                part, left = hashlib.sha256(), part_bytes
    if left < part_bytes:
        composite.update(part.digest())
    return whole.hexdigest(), base64.b64encode(composite.digest()).decode()


def _is_missing(err) -> bool:
    return err.response.get("Error", {}).get("Code") in MISSING_CODES


def _stored_sha256(head: dict | None) -> str | None:
    return None if head is None else head.get("Metadata", {}).get(SHA256_METADATA)


class S3Store(Store):
    """A store in an S3 bucket (AWS, MinIO): `s3://bucket/prefix`, through `client`
    (see `s3_client`)."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        client,
        *,
        part_bytes: int = PART_BYTES,
        single_put_max_bytes: int = SINGLE_PUT_MAX_BYTES,
    ):
        self.bucket, self.prefix, self._client = bucket, prefix.strip("/"), client
        self.endpoint = client.meta.endpoint_url
        self.part_bytes, self.single_put_max_bytes = part_bytes, single_put_max_bytes
        self._bucket_ready = False

    # --- interface -----------------------------------------------------------
    def put_bundle(self, kind: str, bundle_path: Path, sha256: str, meta: dict) -> StoredArtifact:
        key, size = self.bundle_key(kind, sha256), Path(bundle_path).stat().st_size
        head = self._head(key)
        existed = (
            head is not None and head["ContentLength"] == size and _stored_sha256(head) == sha256
        )
        if not existed:
            self._upload(key, Path(bundle_path), sha256)
        meta_key = self.meta_key(kind, sha256)
        if not (existed and self._head(meta_key) is not None):
            body = meta_bytes(stored_meta(kind, sha256, size, meta))
            self._put_bytes(meta_key, body, hashlib.sha256(body).hexdigest())
        return StoredArtifact(self.uri_for(kind, sha256), sha256, size, existed)

    def get_bundle(self, kind: str, sha256: str, dest: Path) -> Path:
        dest = bundle_dest(Path(dest))
        self._read_through_promotion(kind, sha256, lambda key: self._download(key, dest, sha256))
        return dest

    def get_meta(self, kind: str, sha256: str) -> dict:
        return json.loads(self._get_bytes(self.meta_key(kind, sha256)))

    def list_artifacts(self) -> list[dict]:
        found, root = [], self.full_key("")
        for key in self.keys(root):
            parts = key[len(root) :].split("/")
            if len(parts) == 3 and parts[2] == META_NAME:
                found.append(
                    listing_entry(
                        parts[0],
                        parts[1],
                        self.uri_for(parts[0], parts[1]),
                        self._uri(key),
                        lambda key=key: self._get_bytes(key),
                    )
                )
        return found

    def verify(self, kind: str, sha256: str) -> bool:
        def matches(key: str) -> bool:
            if self._head(key) is None:
                return False
            try:
                return self._hash_object(key) == sha256
            except StoreError:
                if self._head(key) is None:  # promoted (moved away) between the head and the read
                    return False
                raise

        # a second look: a promotion may have moved the staged copy away meanwhile
        return matches(self.readable_key(kind, sha256)) or matches(self.readable_key(kind, sha256))

    def put_file(self, key: str, path: Path) -> str:
        full = self.full_key(key)
        self._upload(full, Path(path), None)
        return self._uri(full)

    def get_file(self, key: str, dest: Path, version: str | None = None) -> Path:
        self._download(self.full_key(key), Path(dest), None, version)
        return Path(dest)

    def has_data(self, sha256: str) -> bool:
        return _stored_sha256(self._head(self.data_key(sha256))) == sha256

    def put_data(self, path: Path, sha256: str, advance: Advance | None = None) -> bool:
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
        return object_identity(self._existing_head(self.full_key(key)))

    def file_tag(self, key: str) -> str:
        head = self._existing_head(self.full_key(key))
        return head.get("ChecksumSHA256") or head["ETag"].strip('"')

    def uri_for(self, kind: str, sha256: str) -> str:
        return self._uri(self.bundle_key(kind, sha256))

    def ping(self) -> None:
        self._bucket_ready = False
        self._ensure_bucket()

    def delete_file(self, key: str) -> None:
        self._ensure_bucket()
        self._delete(self.full_key(key))  # S3 deletes of a missing key succeed

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key in the bucket that starts with `prefix` (a full key, prefix included)."""
        self._ensure_bucket()
        with self._errors("list", prefix):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    yield obj["Key"]

    # --- staging primitives (base.Store) ----------------------------------------------
    def _put_path_at(self, key: str, path: Path, sha256: str) -> None:
        self._upload(key, Path(path), sha256)

    def _put_bytes_at(self, key: str, data: bytes) -> None:
        self._ensure_bucket()
        self._put_bytes(key, data, hashlib.sha256(data).hexdigest())

    def _move_key(self, src: str, dest: str, sha256: str | None) -> None:
        """A server-side copy (multipart where large) that keeps the source's sha256 metadata,
        then the source deleted."""
        digest = sha256 or _stored_sha256(self._existing_head(src))
        with self._errors("copy", dest):
            extra = {
                "MetadataDirective": "REPLACE",
                "ChecksumAlgorithm": "SHA256",
                "Metadata": {SHA256_METADATA: digest} if digest else {},
            }
            self._client.copy(
                {"Bucket": self.bucket, "Key": src}, self.bucket, dest, ExtraArgs=extra
            )
        # the server's checksum of the copy where it reports one, else the bytes read back
        if sha256 is not None and self._existing_head(dest).get("ChecksumSHA256") != b64(sha256):
            self._read_back(dest, sha256)
        self._delete(src)

    def _has_key(self, key: str) -> bool:
        return self._head(key) is not None

    def _read_key(self, key: str) -> bytes:
        if self._head(key) is None:
            raise StoreError(f"{self._uri(key)}: no such object in the store")
        return self._get_bytes(key)

    def _keys_under(self, prefix: str) -> Iterator[str]:
        return self.keys(prefix)

    def _delete_key(self, key: str) -> None:
        self._ensure_bucket()
        self._delete(key)

    # --- plumbing --------------------------------------------------------------
    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    @contextlib.contextmanager
    def _errors(self, action: str, key: str = "") -> Iterator[None]:
        """Turn botocore failures into StoreError naming the URL (never credentials)."""
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        where = self._uri(key) if key else f"s3://{self.bucket}"
        try:
            yield
        except ClientError as e:
            raise self._client_error(action, where, e) from e
        except S3UploadFailedError as e:  # upload_file wraps the ClientError it caught
            if isinstance(e.__context__, ClientError):
                raise self._client_error(action, where, e.__context__) from e
            raise StoreError(f"{action} {where} at {self.endpoint}: {e}") from e
        except BotoCoreError as e:
            raise StoreError(
                f"{action} {where} at {self.endpoint}: {e}; is the endpoint "
                f"right ({FLEET_S3_ENDPOINT_URL.name}) and the server up?"
            ) from e

    def _client_error(self, action: str, where: str, e) -> StoreError:
        err = e.response.get("Error", {})
        code, message = err.get("Code", "?"), err.get("Message", "")
        if code in CHECKSUM_CODES:
            return DigestMismatch(
                f"{action} {where}: server rejected the checksum ({code}: {message})"
            )
        return StoreError(f"{action} {where} at {self.endpoint}: {code}: {message}")

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
        extra = (
            {}
            if region == DEFAULT_REGION
            else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        )
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

    def _existing_head(self, key: str) -> dict:
        head = self._head(key, checksums=True)
        if head is None:
            raise StoreError(f"{self._uri(key)}: no such object in the store")
        return head

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
                Bucket=self.bucket,
                Key=key,
                Body=body,
                ChecksumAlgorithm="SHA256",
                ChecksumSHA256=b64(sha256),
                Metadata={SHA256_METADATA: sha256},
            )

    def _upload(
        self, key: str, path: Path, sha256: str | None, advance: Advance | None = None
    ) -> None:
        """Upload so that the stored object provably hashes to `sha256` (None: to what the
        file hashes to as it is read here)."""
        self._ensure_bucket()
        if path.stat().st_size > self.single_put_max_bytes:
            self._upload_parts(key, path, sha256, advance)
            return
        # Hash locally first: a wrong digest then stores nothing. The server
        # re-checks ChecksumSHA256 against the bytes it received.
        actual = sha256_file(path)
        if sha256 is not None and actual != sha256:
            raise digest_mismatch(str(path), sha256, actual)
        with open(path, "rb") as f:
            reply = self._put_bytes(key, f, actual)
        if reply.get("ChecksumSHA256") is None:
            self._read_back(key, actual)
        elif reply["ChecksumSHA256"] != b64(actual):
            self._delete(key)
            raise digest_mismatch(self._uri(key), actual, reply["ChecksumSHA256"])
        if advance:
            advance(path.stat().st_size)

    def _upload_parts(
        self, key: str, path: Path, sha256: str | None, advance: Advance | None
    ) -> None:
        """boto3's managed multipart upload, each part with a SHA256 checksum the server checks.

        The file is hashed first (whole, and part by part), so a wrong digest stores nothing;
        afterwards the object's checksum of part checksums must equal the one hashed here, so
        bytes that changed in between are deleted rather than kept under the wrong digest.
        """
        from boto3.s3.transfer import TransferConfig
        from s3transfer.utils import ChunksizeAdjuster

        size = path.stat().st_size
        part_bytes = ChunksizeAdjuster().adjust_chunksize(
            max(self.part_bytes, -(-size // MAX_PARTS)), size
        )
        whole, composite = file_digests(path, part_bytes)
        if sha256 is not None and whole != sha256:
            raise digest_mismatch(str(path), sha256, whole)
        config = TransferConfig(
            multipart_threshold=self.single_put_max_bytes,
            multipart_chunksize=part_bytes,
            max_concurrency=UPLOAD_THREADS,
        )
        with self._errors("upload", key):
            self._client.upload_file(
                str(path),
                self.bucket,
                key,
                Config=config,
                Callback=advance,
                ExtraArgs={"ChecksumAlgorithm": "SHA256", "Metadata": {SHA256_METADATA: whole}},
            )
        reported = self._existing_head(key).get("ChecksumSHA256")
        if reported is None:  # a server that keeps no checksums: read the object back
            self._read_back(key, whole)
        elif reported.split("-")[0] != composite:  # AWS appends "-<parts>"
            self._delete(key)
            raise digest_mismatch(
                f"{self._uri(key)} (checksum of part checksums)", composite, reported
            )

    def _read_back(self, key: str, sha256: str) -> None:
        """For servers that do not report checksums: GET, hash, delete on mismatch."""
        if (actual := self._hash_object(key)) != sha256:
            self._delete(key)
            raise digest_mismatch(self._uri(key), sha256, actual)

    def _download(
        self, key: str, dest: Path, sha256: str | None, version: str | None = None
    ) -> None:
        from boto3.s3.transfer import TransferConfig

        self._ensure_bucket()
        config = TransferConfig(multipart_chunksize=PART_BYTES, max_concurrency=UPLOAD_THREADS)
        with atomic_file(dest, PRIVATE) as tmp:
            with self._errors("download", key):
                extra = {"VersionId": version} if version else None
                self._client.download_file(
                    self.bucket, key, str(tmp), ExtraArgs=extra, Config=config
                )
            if sha256 is not None and (actual := sha256_file(tmp)) != sha256:
                raise digest_mismatch(self._uri(key), sha256, actual)
