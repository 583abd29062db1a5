"""Extracting a crafted, malicious tar.zst: every trick is refused and nothing lands
outside the destination."""

import io
import os
import re
import tarfile

import pytest
import zstandard

from artifacts import safetar
from artifacts.bundle import extract
from core.errors import StoreError, UnsafeArchive


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    if kind == tarfile.REGTYPE:
        info.size = len(data)
    return info, data


def tar_zst(path, members) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    path.write_bytes(zstandard.ZstdCompressor().compress(raw.getvalue()))


EVIL = [
    (member("/tmp/fleet-evil-abs"), "absolute"),
    (member("../escaped.txt"), "'..'"),
    (member("out/../../escaped.txt"), "'..'"),
    (member("link", tarfile.SYMTYPE, link="/etc/passwd"), "only regular files"),
    (member("hard", tarfile.LNKTYPE, link="/etc/passwd"), "only regular files"),
    (member("dev", tarfile.CHRTYPE), "only regular files"),
    (member("fifo", tarfile.FIFOTYPE), "only regular files"),
    (member("dir", tarfile.DIRTYPE), "only regular files"),
]


@pytest.mark.parametrize("evil, why", EVIL)
def test_a_member_that_could_escape_or_is_not_a_regular_file_is_refused(tmp_path, evil, why):
    bundle, dest = tmp_path / "evil.tar.zst", tmp_path / "dest"
    tar_zst(bundle, [member("ok.txt"), evil])
    with pytest.raises(StoreError, match=why):
        extract(bundle, dest)
    assert not (tmp_path / "escaped.txt").exists() and not os.path.lexists(dest / "link")


def test_a_link_already_in_the_destination_cannot_carry_a_write_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "out").symlink_to(outside)
    bundle = tmp_path / "b.tar.zst"
    tar_zst(bundle, [member("out/model.bin", data=b"owned")])
    with pytest.raises(StoreError, match="outside .* through a link"):
        extract(bundle, dest)
    assert list(outside.iterdir()) == []


def test_a_file_link_in_the_destination_is_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("safe")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "a.txt").symlink_to(victim)
    bundle = tmp_path / "b.tar.zst"
    tar_zst(bundle, [member("a.txt", data=b"owned")])
    with pytest.raises(StoreError, match="already exists"):
        extract(bundle, dest)
    assert victim.read_text() == "safe"


def test_a_member_named_twice_does_not_overwrite_the_first(tmp_path):
    bundle, dest = tmp_path / "b.tar.zst", tmp_path / "dest"
    tar_zst(bundle, [member("a.txt", data=b"first"), member("a.txt", data=b"second")])
    with pytest.raises(StoreError, match="already exists"):
        extract(bundle, dest)
    assert (dest / "a.txt").read_bytes() == b"first"


def test_setuid_bits_are_dropped_and_regular_files_come_out_whole(tmp_path):
    info, data = member("bin/tool", data=b"#!/bin/sh\n")
    info.mode = 0o4755
    bundle, dest = tmp_path / "b.tar.zst", tmp_path / "dest"
    tar_zst(bundle, [(info, data), member("deep/er/file.txt", data=b"hello")])
    written = extract(bundle, dest)
    assert sorted(p.relative_to(dest).as_posix() for p in written) == [
        "bin/tool",
        "deep/er/file.txt",
    ]
    assert (dest / "bin" / "tool").stat().st_mode & 0o7777 == 0o755
    assert (dest / "deep" / "er" / "file.txt").read_bytes() == b"hello"


@pytest.mark.parametrize("evil", [evil for evil, _ in EVIL])
def test_every_refusal_is_fleets_own_error_naming_the_member(tmp_path, evil):
    bundle, dest = tmp_path / "evil.tar.zst", tmp_path / "dest"
    tar_zst(bundle, [evil])
    with pytest.raises(UnsafeArchive, match=re.escape(repr(evil[0].name))):
        extract(bundle, dest)


@pytest.mark.parametrize("below", ["x/y", "x/y/z"])
def test_a_member_below_a_file_named_earlier_is_refused_naming_both(tmp_path, below):
    bundle, dest = tmp_path / "b.tar.zst", tmp_path / "dest"
    tar_zst(bundle, [member("x", data=b"a file"), member(below, data=b"below it")])
    with pytest.raises(UnsafeArchive, match=f"{re.escape(repr(below))}: 'x' is a file"):
        extract(bundle, dest)
    assert (dest / "x").read_bytes() == b"a file"


def test_a_member_below_a_file_already_in_the_destination_is_refused(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "x").write_bytes(b"there before")
    bundle = tmp_path / "b.tar.zst"
    tar_zst(bundle, [member("x/y")])
    with pytest.raises(UnsafeArchive, match="'x' is a file"):
        extract(bundle, dest)
    assert (dest / "x").read_bytes() == b"there before"


def plain_tar(path, members) -> None:
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)


def test_a_data_tar_may_list_directories_but_not_links(tmp_path):
    good, bad = tmp_path / "good.tar", tmp_path / "bad.tar"
    plain_tar(good, [member("d", tarfile.DIRTYPE), member("d/a.bin", data=b"a")])
    plain_tar(bad, [member("d/a.bin"), member("d/link", tarfile.SYMTYPE, link="a.bin")])
    with tarfile.open(good) as tar:
        written = safetar.extract(
            tar, tmp_path / "good", what="data tar", directories=safetar.Directories.SKIP
        )
    assert written == [tmp_path / "good" / "d" / "a.bin"] and written[0].read_bytes() == b"a"
    with tarfile.open(bad) as tar, pytest.raises(UnsafeArchive, match="data tar member 'd/link'"):
        safetar.extract(
            tar, tmp_path / "bad", what="data tar", directories=safetar.Directories.SKIP
        )


def test_a_truncated_archive_is_a_store_error_not_a_tarfile_one(tmp_path):
    path = tmp_path / "cut.tar"
    plain_tar(path, [member("a.bin", data=os.urandom(100_000))])
    path.write_bytes(path.read_bytes()[:50_000])
    with tarfile.open(path) as tar, pytest.raises(StoreError, match="not a readable tar"):
        safetar.extract(tar, tmp_path / "out")
