"""core.files: the one write-then-rename."""

import os
import stat

import pytest

from core.files import PRIVATE, atomic_file, atomic_write


def mode_of(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_replaces_the_file_and_leaves_no_temp(tmp_path):
    dest = tmp_path / "sub" / "state.json"
    atomic_write(dest, "one")
    atomic_write(dest, b"two")
    assert dest.read_text() == "two" and os.listdir(dest.parent) == ["state.json"]


def test_a_failed_block_keeps_the_old_file_and_removes_the_temp(tmp_path):
    dest = tmp_path / "model.pt"
    dest.write_text("old")
    with pytest.raises(RuntimeError), atomic_file(dest) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert dest.read_text() == "old" and os.listdir(tmp_path) == ["model.pt"]


def test_a_private_file_is_private_from_the_start(tmp_path):
    dest = tmp_path / "worker.env"
    with atomic_file(dest, PRIVATE) as tmp:
        assert mode_of(tmp) == 0o600
        tmp.write_text("FLEET_BROKER_URL=redis://u:p@h")
    assert mode_of(dest) == 0o600


def test_without_a_mode_the_file_is_made_as_open_makes_it(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a", "x")
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "a") == 0o644


def test_an_explicit_mode_is_not_narrowed_by_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path / "unit", "x", 0o644)
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "unit") == 0o644
