"""A job's data pinned to its bytes at load: local files and directories hashed (once per
load), S3 objects pinned to the identity the store gives, and missing data named."""

import hashlib
from pathlib import Path

import pytest

from artifacts.identity import DataResolver
from core.errors import ManifestError
from fleet.manifests import load
from tests.unit.manifest_cases import COMMAND, GBT, job_of, only_problem, write


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_relative_data_path_resolves_against_the_manifests_directory_and_is_pinned_to_its_bytes(
    tmp_path, monkeypatch
):
    (tmp_path / "project" / "data").mkdir(parents=True)
    (tmp_path / "project" / "data" / "moons.csv").write_bytes(b"x,target\n1,0\n")
    (tmp_path / "up.csv").write_bytes(b"x,target\n2,1\n")
    monkeypatch.chdir(tmp_path)
    text = GBT.replace('"d.csv"', '"data/moons.csv"') + GBT.replace('"a"', '"b"').replace(
        '"d.csv"', '"../up.csv"'
    )
    m = load(write(tmp_path, text, "project/manifest.toml"))
    moons, up = sha(b"x,target\n1,0\n"), sha(b"x,target\n2,1\n")
    assert [j.data for j in m.jobs] == [
        f"store+sha256://{moons}/moons.csv",
        f"store+sha256://{up}/up.csv",
    ]
    # where the bytes are on this disk stays with the publisher: only publish reads it
    assert {h: (s.path, s.kind, s.size) for h, s in m.data_sources.items()} == {
        moons: ((tmp_path / "project" / "data" / "moons.csv").resolve(), "file", 13),
        up: ((tmp_path / "up.csv").resolve(), "file", 13),
    }


def test_an_absolute_data_path_pins_the_same_bytes_as_a_relative_one(tmp_path):
    absolute = (tmp_path / "d.csv").resolve()
    relative = job_of(tmp_path, GBT, "rel.toml")
    assert (
        job_of(tmp_path, GBT.replace('"d.csv"', f'"{absolute}"'), "abs.toml").data == relative.data
    )


@pytest.mark.parametrize(
    "identity, pinned",
    [
        ({"sha256": "ab" * 32}, "s3://bucket/sets/moons.csv#sha256=" + "ab" * 32),
        ({"etag": "e1", "size": 10, "version": None}, "s3://bucket/sets/moons.csv#etag=e1&size=10"),
        (
            {"etag": "e1", "size": 10, "version": "v7"},
            "s3://bucket/sets/moons.csv#etag=e1&size=10&version=v7",
        ),
    ],
)
def test_an_s3_uri_is_pinned_to_the_identity_the_store_gives(tmp_path, identity, pinned):
    m = load(
        write(tmp_path, GBT.replace('"d.csv"', '"s3://bucket/sets/moons.csv"')),
        DataResolver(s3=lambda uri: identity),
    )
    assert m.jobs[0].data == pinned and m.data_sources == {}


def test_a_changed_s3_object_gives_a_new_job_id(tmp_path):
    path = write(tmp_path, GBT.replace('"d.csv"', '"s3://bucket/moons.csv"'))
    ids = {
        load(path, DataResolver(s3=lambda uri, e=etag: {"etag": e, "size": 3, "version": None}))
        .jobs[0]
        .job_id
        for etag in ("e1", "e2")
    }
    assert len(ids) == 2


def test_a_missing_data_file_is_an_error_with_its_line_and_the_resolved_path(tmp_path):
    p = only_problem(tmp_path, GBT.replace('"d.csv"', '"data/absent.csv"'))
    absent = (tmp_path / "data" / "absent.csv").resolve()
    assert (p.line, p.field, p.message) == (
        4,
        "jobs[0].data",
        f"data {str(absent)!r} does not exist",
    )
    assert "relative to the manifest's directory" in p.fix


def test_an_s3_object_the_store_cannot_find_is_an_error_with_its_line(tmp_path):
    from core.errors import StoreError

    def absent(uri):
        raise StoreError(f"{uri}: no such object in the store")

    path = write(tmp_path, GBT.replace('"d.csv"', '"s3://bucket/absent.csv"'))
    with pytest.raises(ManifestError) as e:
        load(path, DataResolver(s3=absent))
    [p] = e.value.problems
    assert (p.line, p.field) == (4, "jobs[0].data") and "no such object" in p.message
    assert "FLEET_S3_ENDPOINT_URL" in p.fix


def test_a_sweep_of_many_points_hashes_its_data_once(tmp_path):
    hashed = []
    resolver = DataResolver(progress=lambda label, total: hashed.append(label))
    text = GBT + "[jobs.sweep]\nseed = " + str(list(range(500))) + "\n"
    text += GBT.replace('"a"', '"b"') + "seed = 700\n"  # a second table naming the same file
    m = load(write(tmp_path, text), resolver)
    assert len(m.jobs) == 501 and len({j.data for j in m.jobs}) == 1
    assert hashed == ["hashing d.csv"]


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_a_data_directory_is_pinned_by_its_files_not_by_where_or_when_they_were_written(tmp_path):
    import os

    files = {"images/a.bin": b"a" * 100, "images/sub/b.bin": b"b", "labels.csv": b"x\n"}
    text = COMMAND + 'data = "set"\n'
    first = job_of(
        make_tree(tmp_path / "one", {f"set/{k}": v for k, v in files.items()}).parent / "one", text
    )
    two = make_tree(tmp_path / "two", {f"set/{k}": v for k, v in reversed(files.items())})
    os.utime(two / "set" / "labels.csv", (1, 1))
    second = job_of(two, text)
    assert first.data == second.data and first.data.endswith("/set/")
    (two / "set" / "images" / "sub" / "b.bin").write_bytes(b"B")
    assert job_of(two, text).data != first.data


def test_an_empty_data_directory_is_pinned_like_any_other(tmp_path):
    (tmp_path / "empty").mkdir()
    assert job_of(tmp_path, COMMAND + 'data = "empty"\n').data.endswith("/empty/")
