"""Which files of a workdir travel with a job (artifacts.workdir)."""

from __future__ import annotations

import pytest

from artifacts.workdir import check_size, select
from core.errors import DataProblem


def tree(root, files: dict[str, str | bytes]):
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def names(root) -> list[str]:
    return [rel for rel, _ in select(root).files]


def test_code_travels_and_git_caches_and_virtual_environments_stay_behind(tmp_path):
    tree(
        tmp_path,
        {
            "train.py": "x",
            "pkg/models.py": "y",
            ".git/HEAD": "ref",
            "pkg/__pycache__/m.pyc": "c",
            "env/pyvenv.cfg": "home",
            "env/lib/site.py": "s",
            ".venv/bin/python": "p",
            "a.pyc": "c",
        },
    )
    assert names(tmp_path) == ["pkg/models.py", "train.py"]


def test_gitignore_and_fleetignore_are_honoured(tmp_path):
    tree(
        tmp_path,
        {
            ".gitignore": "*.log\ndata/\n",
            ".fleetignore": "notes.md\n",
            "train.py": "x",
            "run.log": "l",
            "data/big.csv": "d",
            "notes.md": "n",
            "sub/.gitignore": "local.txt\n",
            "sub/local.txt": "t",
            "sub/keep.txt": "k",
            "local.txt": "top",
        },
    )
    assert names(tmp_path) == [
        ".fleetignore",
        ".gitignore",
        "local.txt",
        "sub/.gitignore",
        "sub/keep.txt",
        "train.py",
    ]


def test_a_negated_pattern_brings_a_file_back(tmp_path):
    tree(tmp_path, {".gitignore": "*.txt\n!keep.txt\n", "keep.txt": "k", "drop.txt": "d"})
    assert names(tmp_path) == [".gitignore", "keep.txt"]


def test_symlinks_are_not_followed(tmp_path):
    tree(tmp_path, {"train.py": "x"})
    (tmp_path / "link").symlink_to("/etc")
    (tmp_path / "pw").symlink_to("/etc/passwd")
    assert names(tmp_path) == ["train.py"]


def test_a_workdir_over_the_limit_is_refused_naming_its_largest_files(tmp_path):
    tree(
        tmp_path, {"train.py": "x", "weights.bin": b"\0" * 3_000_000, "data.csv": b"1" * 2_000_000}
    )
    with pytest.raises(DataProblem) as e:
        check_size(select(tmp_path), 1 << 20)
    text = f"{e.value} {e.value.fix}"
    assert "weights.bin (2.9 MiB)" in text and "data.csv (1.9 MiB)" in text
    assert text.index("weights.bin") < text.index("data.csv")
    assert ".fleetignore" in text and "FLEET_WORKDIR_MAX_MIB" in text


def test_the_selection_is_the_same_whatever_order_the_files_were_made_in(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    tree(a, {"z.py": "1", "m/a.py": "2", "b.py": "3"})
    tree(b, {"b.py": "3", "m/a.py": "2", "z.py": "1"})
    assert names(a) == names(b) == ["b.py", "m/a.py", "z.py"]
