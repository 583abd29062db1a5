"""Data URIs pinned to content, and an S3 object's identity, by table. Pure: no store."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile

import pytest

from artifacts.identity import write_dir_tar
from artifacts.stores import object_identity
from manifest import dataref
from manifest.dataref import DataRef

HEX = "ab" * 32


@pytest.mark.parametrize(
    "uri, ref",
    [
        (f"store+sha256://{HEX}/moons.csv", DataRef("store", "moons.csv", "file", sha256=HEX)),
        (f"store+sha256://{HEX}/images/", DataRef("store", "images", "dir", sha256=HEX)),
        (
            f"store+sha256://{HEX}/two%20words.csv",
            DataRef("store", "two words.csv", "file", sha256=HEX),
        ),
        (
            f"s3://b/k/x.csv#sha256={HEX}",
            DataRef("s3", "x.csv", sha256=HEX, bucket="b", key="k/x.csv"),
        ),
        (
            "s3://b/x.csv#etag=e1&size=10&version=v2",
            DataRef("s3", "x.csv", bucket="b", key="x.csv", etag="e1", size=10, version="v2"),
        ),
        ("s3://b/x.csv", DataRef("s3", "x.csv", bucket="b", key="x.csv")),
        ("/abs/d.csv", DataRef("path", "d.csv", path="/abs/d.csv")),
    ],
)
def test_a_data_uri_parses_to_what_it_names(uri, ref):
    assert dataref.parse(uri) == ref


@pytest.mark.parametrize(
    "uri, says",
    [
        ("store+sha256://abc/x.csv", "64 hex digits"),
        (f"store+sha256://{HEX}/", "64 hex digits"),
        (f"store+sha256://{HEX}/a/b.csv", "64 hex digits"),
        ("s3://bucket/", "naming one object"),
        ("s3://b/x.csv#sha256=XYZ", "64 lowercase hex"),
        ("gs://b/x.csv", "unsupported scheme 'gs'"),
    ],
)
def test_a_malformed_data_uri_says_what_is_wrong(uri, says):
    with pytest.raises(ValueError, match=says):
        dataref.parse(uri)


def test_a_pinned_uri_round_trips_through_its_writer():
    for kind in ("file", "dir"):
        uri = dataref.store_uri(HEX, "d.csv", kind)
        assert dataref.parse(uri) == DataRef("store", "d.csv", kind, sha256=HEX)
    assert dataref.parse(
        dataref.s3_uri("s3://b/k.csv", {"etag": "e", "size": 3, "version": None})
    ).pinned


def b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


@pytest.mark.parametrize(
    "head, identity",
    [
        ({"Metadata": {"sha256": HEX}, "ETag": '"e"', "ContentLength": 1}, {"sha256": HEX}),
        ({"ChecksumSHA256": b64(HEX), "ETag": '"e"', "ContentLength": 1}, {"sha256": HEX}),
        # a multipart checksum of part checksums is not the object's sha256
        (
            {"ChecksumSHA256": b64(HEX) + "-3", "ETag": '"e-3"', "ContentLength": 9},
            {"etag": "e-3", "size": 9, "version": None},
        ),
        (
            {
                "ChecksumSHA256": b64(HEX),
                "ChecksumType": "COMPOSITE",
                "ETag": '"e"',
                "ContentLength": 9,
            },
            {"etag": "e", "size": 9, "version": None},
        ),
        (
            {
                "Metadata": {"sha256": "not-hex"},
                "ETag": '"e"',
                "ContentLength": 2,
                "VersionId": "v1",
            },
            {"etag": "e", "size": 2, "version": "v1"},
        ),
        (
            {"ETag": '"e"', "ContentLength": 2, "VersionId": "null"},
            {"etag": "e", "size": 2, "version": None},
        ),
    ],
)
def test_an_s3_objects_identity_is_its_sha256_when_known_else_etag_size_and_version(head, identity):
    assert object_identity(head) == identity


def test_a_directory_tar_holds_only_regular_files_with_normalised_metadata(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "b.txt").write_bytes(b"b")
    (tmp_path / "d" / "a.sh").write_bytes(b"#!/bin/sh\n")
    (tmp_path / "d" / "a.sh").chmod(0o750)
    (tmp_path / "d" / "link").symlink_to(tmp_path / "d" / "a.sh")
    out = io.BytesIO()
    sha, size = write_dir_tar(tmp_path / "d", out)
    assert sha == hashlib.sha256(out.getvalue()).hexdigest() and size == len(out.getvalue())
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        members = [(m.name, m.mode, m.mtime, m.uid) for m in tar]
    assert members == [("a.sh", 0o755, 0, 0), ("sub/b.txt", 0o644, 0, 0)]
