"""Bundles: round trips, digests computed in one pass, reproducible bytes, safe extraction."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
import zstandard

from artifacts import reprotar
from artifacts.bundle import (
    BundleResult,
    bundle,
    collect,
    extract,
    sha256_file,
    verify_bundle,
)
from core.constants import META_NAME
from core.errors import DigestMismatch, StoreError

FIXED_MTIME = 1_700_000_000


def write(root: Path, rel: str, data: bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (FIXED_MTIME, FIXED_MTIME))
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    write(root, "model.bin", os.urandom(3 << 20) + bytes(1 << 20))
    write(root, "config.json", b'{"lr": 0.001}\n')
    write(root, "logs/train.log", b"step 1 loss 2.0\n" * 1000)
    write(root, "empty.txt", b"")
    return root


def make_bundle(run_dir: Path, dest: Path, meta: dict | None = None) -> BundleResult:
    return bundle(collect(run_dir, []), meta or {"job": "j1"}, dest)


def test_a_bundle_round_trips_to_identical_files(run_dir, tmp_path):
    result = make_bundle(run_dir, tmp_path / "b.tar.zst")
    out = tmp_path / "out"
    extract(result.path, out)
    for arcname, path in collect(run_dir, []):
        assert (out / arcname).read_bytes() == path.read_bytes()
    assert json.loads((out / META_NAME).read_text())["job"] == "j1"


def test_each_member_digest_matches_its_file(run_dir, tmp_path):
    result = make_bundle(run_dir, tmp_path / "b.tar.zst")
    expected = {name: sha256_file(path) for name, path in collect(run_dir, [])}
    assert result.files == expected


def test_meta_json_lists_every_file_with_digest_and_size(run_dir, tmp_path):
    result = make_bundle(run_dir, tmp_path / "b.tar.zst", {"job": "j1", "kind": "model"})
    extract(result.path, tmp_path / "out")
    meta = json.loads((tmp_path / "out" / META_NAME).read_text())
    assert meta["job"] == "j1" and meta["kind"] == "model"
    for name, path in collect(run_dir, []):
        assert meta["files"][name] == {"sha256": sha256_file(path), "size": path.stat().st_size}


def test_meta_json_is_the_last_member(run_dir, tmp_path):
    result = make_bundle(run_dir, tmp_path / "b.tar.zst")
    raw = zstandard.ZstdDecompressor().stream_reader(open(result.path, "rb"))
    with tarfile.open(fileobj=raw, mode="r|") as tar:
        names = [m.name for m in tar]
    assert names[-1] == META_NAME
    assert names[:-1] == sorted(names[:-1])


def test_the_bundle_digest_is_the_digest_of_its_bytes_on_disk(run_dir, tmp_path):
    result = make_bundle(run_dir, tmp_path / "b.tar.zst")
    data = result.path.read_bytes()
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert result.size == len(data)


def test_equal_files_give_byte_identical_bundles(run_dir, tmp_path):
    copy = tmp_path / "copy"
    for name, path in collect(run_dir, []):
        write(copy, name, path.read_bytes())
    first = make_bundle(run_dir, tmp_path / "a.tar.zst")
    second = make_bundle(copy, tmp_path / "b.tar.zst")
    assert first.sha256 == second.sha256


def test_a_single_threaded_bundle_decompresses_to_the_same_tar(run_dir, tmp_path):
    multi = make_bundle(run_dir, tmp_path / "a.tar.zst")
    single = bundle(collect(run_dir, []), {"job": "j1"}, tmp_path / "b.tar.zst", threads=0)
    dctx = zstandard.ZstdDecompressor()
    unpack = lambda p: dctx.stream_reader(open(p, "rb")).read()  # noqa: E731
    assert unpack(multi.path) == unpack(single.path)


def test_tar_headers_carry_no_owner_names_or_ids(run_dir, tmp_path):
    result = make_bundle(run_dir, tmp_path / "b.tar.zst")
    raw = zstandard.ZstdDecompressor().stream_reader(open(result.path, "rb"))
    with tarfile.open(fileobj=raw, mode="r|") as tar:
        for member in tar:
            assert (member.uid, member.gid, member.uname, member.gname) == (0, 0, "", "")
            assert member.mtime == reprotar.MTIME and member.mode in (0o644, 0o755)


def test_a_failed_bundle_leaves_no_file_behind(run_dir, tmp_path):
    files = collect(run_dir, []) + [("gone.bin", run_dir / "does-not-exist")]
    with pytest.raises(FileNotFoundError):
        bundle(files, {}, tmp_path / "b.tar.zst")
    assert list(tmp_path.glob("*.tar.zst*")) == [] and list(tmp_path.glob(".b.tar.zst*")) == []


def test_a_file_named_meta_json_is_refused(tmp_path):
    path = write(tmp_path, "meta.json", b"{}")
    with pytest.raises(StoreError, match="reserved"):
        bundle([(META_NAME, path)], {}, tmp_path / "b.tar.zst")


@pytest.mark.parametrize(
    "globs, expected",
    [
        ([], ["config.json", "empty.txt", "logs/train.log", "model.bin"]),
        (["*.json"], ["config.json"]),
        (["**/*.log"], ["logs/train.log"]),
        (["*.bin", "*.bin", "model.*"], ["model.bin"]),
        (["logs/*", "*.json"], ["config.json", "logs/train.log"]),
        (["*.missing"], []),
    ],
)
def test_collect_matches_globs_sorted_and_deduplicated(run_dir, globs, expected):
    assert [name for name, _ in collect(run_dir, globs)] == expected


def test_collect_skips_directories(run_dir):
    assert "logs" not in [name for name, _ in collect(run_dir, ["*"])]


@pytest.mark.parametrize("glob", ["../*.marker", "out/../../x", "/etc/*"])
def test_collect_refuses_a_glob_that_leaves_the_job_directory(run_dir, glob):
    write(run_dir.parent, "outside.marker", b"not the job's")
    with pytest.raises(StoreError, match="leaves the job's directory"):
        collect(run_dir, [glob])


def test_collect_leaves_out_symlinks_that_resolve_outside_the_job_directory(run_dir, caplog):
    secret = write(run_dir.parent, "secrets/key.pem", b"private")
    (run_dir / "out").mkdir()
    (run_dir / "out" / "key.pem").symlink_to(secret)  # a file link out
    (run_dir / "out" / "all").symlink_to(secret.parent)  # a directory link out
    (run_dir / "out" / "cfg.json").symlink_to(run_dir / "config.json")  # a link that stays inside
    names = [name for name, _ in collect(run_dir, ["out/**/*", "**/*.pem"])]
    assert names == ["out/cfg.json"]
    assert "resolves outside the job's directory" in caplog.text


def evil_bundle(path: Path, name: str) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    path.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))
    return path


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/evil.txt", "a/../../escape.txt"])
def test_extract_refuses_paths_that_escape_the_destination(tmp_path, name):
    bad = evil_bundle(tmp_path / "evil.tar.zst", name)
    out = tmp_path / "deep" / "out"
    with pytest.raises(StoreError, match="refused"):
        extract(bad, out)
    assert not (tmp_path / "deep" / "escape.txt").exists()
    assert not (tmp_path / "escape.txt").exists()


def test_verify_bundle_names_both_digests_on_mismatch(run_dir, tmp_path):
    result = make_bundle(run_dir, tmp_path / "b.tar.zst")
    verify_bundle(result.path, result.sha256)
    wrong = "0" * 64
    with pytest.raises(DigestMismatch) as caught:
        verify_bundle(result.path, wrong)
    assert wrong in str(caught.value) and result.sha256 in str(caught.value)


def test_a_command_jobs_output_log_is_bundled_once_even_when_its_globs_match_it(tmp_path):
    from manifest.schema import JobSpec
    from tasks.upload import files

    write(tmp_path, "fleet-log.txt", b"log")
    write(tmp_path, "out/r.txt", b"r")
    job = JobSpec(name="j", job_id="x" * 64, command=("true",), artifacts=("*.txt", "out/*.txt"))
    names = [name for name, _ in files(job, tmp_path)]
    assert sorted(names) == ["fleet-log.txt", "out/r.txt"]
