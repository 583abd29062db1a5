"""Data through the store, on a real S3 endpoint (moto's server): staged once at publish by
content, pinned S3 identities, and the worker's digest cache (verified, LRU, one download)."""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from artifacts.data import fetch
from artifacts.datacache import DataCache, owner_key
from artifacts.identity import DataResolver
from artifacts.stores import S3Store, open_store, s3_client
from core.errors import DigestMismatch, ManifestError, StoreError
from core.settings import StoreSettings
from fleet import staging
from fleet.manifests import load

pytestmark = pytest.mark.integration

MANIFEST = """
[[jobs]]
name = "gbt"
model = "gbt"
data = "data/train.csv"
[jobs.sweep]
seed = [0, 1, 2]

[[jobs]]
name = "images"
command = ["python", "train.py"]
data = "data/images"

[[jobs]]
name = "big"
command = ["python", "train.py"]
data = "data/big.bin"
"""


def project(root: Path, big: bytes) -> Path:
    (root / "data" / "images" / "cats").mkdir(parents=True)
    (root / "data" / "train.csv").write_text("x,target\n1,0\n2,1\n")
    (root / "data" / "images" / "cats" / "a.bin").write_bytes(b"\x01" * 5000)
    (root / "data" / "images" / "b.bin").write_bytes(b"\x02" * 7000)
    (root / "data" / "big.bin").write_bytes(big)
    (root / "m.toml").write_text(MANIFEST)
    return root / "m.toml"


class Requests:
    """Counts the S3 operations a store's real client sends, by name (botocore's event hooks)."""

    def __init__(self, store: S3Store):
        self.seen: collections.Counter = collections.Counter()
        store._client.meta.events.register("before-call.s3", self._count)

    def _count(self, model, **_):
        self.seen[model.name] += 1

    def writes(self) -> int:
        return sum(
            n
            for op, n in self.seen.items()
            if op in ("PutObject", "UploadPart", "CreateMultipartUpload")
        )


@pytest.fixture
def small_parts(s3_server, s3_store) -> S3Store:
    """The test's bucket with multipart uploads from 5 MiB, so a 12 MiB file goes in parts."""
    client = s3_client(StoreSettings.from_env(s3_server.env))
    return S3Store(
        s3_store.bucket, "runs", client, part_bytes=5 << 20, single_put_max_bytes=5 << 20
    )


def test_publish_stages_each_distinct_local_data_once_and_a_copy_sends_nothing(
    small_parts, tmp_path
):
    big = os.urandom(12 << 20)
    first = load(project(tmp_path / "clone-1", big))
    requests = Requests(small_parts)
    bars: dict[str, list[int]] = {}

    def progress(label, total):
        bars[label] = [total, 0]
        return lambda n: bars[label].__setitem__(1, bars[label][1] + n)

    report = staging.stage(first, first.jobs, store=small_parts, progress=progress)
    assert len(report.sent) == 3 and report.present == ()  # csv, the tree's tar, big.bin
    assert requests.seen["PutObject"] == 2 and requests.seen["UploadPart"] == 3
    assert bars["staging big.bin"] == [12 << 20, 12 << 20]
    keys = {
        o["Key"] for o in small_parts._client.list_objects_v2(Bucket=small_parts.bucket)["Contents"]
    }
    assert keys == {f"runs/data/{sha}" for sha in first.data_sources}

    shutil.rmtree(tmp_path / "clone-1")
    copy = load(project(tmp_path / "clone-2", big))
    assert [j.job_id for j in copy.jobs] == [j.job_id for j in first.jobs]
    before = requests.writes()
    again = staging.stage(copy, copy.jobs, store=small_parts)
    assert again.sent == () and len(again.present) == 3
    assert requests.writes() == before


def test_an_edited_csv_gives_one_new_job_and_stages_only_its_bytes(small_parts, tmp_path):
    path = project(tmp_path, b"small")
    first = load(path)
    staging.stage(first, first.jobs, store=small_parts)
    (tmp_path / "data" / "images" / "b.bin").write_bytes(b"\x03" * 7000)
    edited = load(path)
    changed = [j.name for j, k in zip(first.jobs, edited.jobs, strict=True) if j.job_id != k.job_id]
    assert changed == ["images"]
    report = staging.stage(edited, edited.jobs, store=small_parts)
    assert len(report.sent) == 1 and len(report.present) == 2


def test_staging_only_what_the_published_jobs_need_opens_no_store_for_none(tmp_path):
    m = load(project(tmp_path, b"x"))
    assert staging.stage(m, [], store=None) == staging.StageReport()


def put_plain(store: S3Store, key: str, body: bytes) -> None:
    """Write an object the way another tool would: no sha256 metadata, no checksum asked."""
    store._client.put_object(Bucket=store.bucket, Key=key, Body=body)


def test_an_s3_objects_identity_changes_when_the_object_changes(s3_env, s3_store, tmp_path):
    put_plain(s3_store, "sets/train.csv", b"x,target\n1,0\n")
    (tmp_path / "m.toml").write_text(
        f'[[jobs]]\nname = "a"\nmodel = "gbt"\ndata = "s3://{s3_store.bucket}/sets/train.csv"\n'
    )
    before = load(tmp_path / "m.toml").jobs[0]
    assert before.data.startswith(f"s3://{s3_store.bucket}/sets/train.csv#")
    assert load(tmp_path / "m.toml").jobs[0].job_id == before.job_id
    put_plain(s3_store, "sets/train.csv", b"x,target\n1,1\n")
    after = load(tmp_path / "m.toml").jobs[0]
    assert after.job_id != before.job_id


def test_an_object_stored_with_its_sha256_is_pinned_to_that_digest(s3_env, s3_store, tmp_path):
    (tmp_path / "d.csv").write_bytes(b"x,target\n1,0\n")
    s3_store.put_file("sets/d.csv", tmp_path / "d.csv")
    digest = hashlib.sha256(b"x,target\n1,0\n").hexdigest()
    uri = f"s3://{s3_store.bucket}/runs/sets/d.csv"
    assert DataResolver().pin(uri, tmp_path) == f"{uri}#sha256={digest}"


def test_a_missing_s3_object_is_a_manifest_error_at_its_line(s3_env, s3_store, tmp_path):
    (tmp_path / "m.toml").write_text(
        f'[[jobs]]\nname = "a"\nmodel = "gbt"\ndata = "s3://{s3_store.bucket}/absent.csv"\n'
    )
    with pytest.raises(ManifestError) as e:
        load(tmp_path / "m.toml")
    [p] = e.value.problems
    assert (p.line, p.field) == (4, "jobs[0].data") and "absent.csv" in p.message


# --- the worker's side ---------------------------------------------------------------------------


class Downloads:
    """A store factory over real stores that counts data downloads (across threads)."""

    def __init__(self, store_url: str, env: dict):
        self.store_url, self.env, self.count, self.lock = store_url, env, 0, threading.Lock()

    def __call__(self, url):
        store = open_store(StoreSettings.from_env(self.env, url=url or self.store_url))
        for name in ("get_data", "get_file"):
            real = getattr(store, name)

            def counted(*a, real=real, **kw):
                with self.lock:
                    self.count += 1
                return real(*a, **kw)

            setattr(store, name, counted)
        return store


@pytest.fixture
def staged(s3_server, s3_store, tmp_path) -> tuple[object, Downloads]:
    path = project(tmp_path / "project", os.urandom(1 << 20))
    m = load(path)
    staging.stage(m, m.jobs, store=s3_store)
    shutil.rmtree(tmp_path / "project")  # the workers never see the publisher's disk
    return m, Downloads(f"s3://{s3_store.bucket}/runs", s3_server.env)


def test_a_worker_fetches_staged_data_by_digest_into_the_jobs_directory(staged, tmp_path):
    m, downloads = staged
    job = next(j for j in m.jobs if j.name == "images")
    (tmp_path / "job").mkdir()
    got = fetch(job.data, tmp_path / "cache", store_factory=downloads, into=tmp_path / "job")
    assert got.parent.parent == tmp_path / "cache" / "pins" and got.name == "images"
    assert sorted(p.relative_to(got).as_posix() for p in got.rglob("*") if p.is_file()) == [
        "b.bin",
        "cats/a.bin",
    ]
    assert (got / "b.bin").read_bytes() == b"\x02" * 7000


def test_concurrent_jobs_on_one_worker_share_one_download(staged, tmp_path):
    m, downloads = staged
    job = next(j for j in m.jobs if j.name == "big")
    with ThreadPoolExecutor(8) as pool:
        paths = list(
            pool.map(
                lambda i: fetch(job.data, tmp_path / "cache", store_factory=downloads), range(8)
            )
        )
    assert downloads.count == 1 and len(set(paths)) == 1


def _tree(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", ["big", "images"])
def test_jobs_on_one_host_fetching_the_same_data_at_once_each_get_a_whole_pin(
    staged, tmp_path, name
):
    # every run's job dir is runs/<run>/work: same name, different runs (tasks.workdirs)
    m, downloads = staged
    job = next(j for j in m.jobs if j.name == name)
    dirs = [tmp_path / "runs" / f"r{i}" / "work" for i in range(8)]
    for d in dirs:
        d.mkdir(parents=True)

    def one(work: Path) -> Path:
        return fetch(job.data, tmp_path / "cache", store_factory=downloads, into=work)

    for _ in range(3):  # rounds: a pin made again while others are being made
        with ThreadPoolExecutor(8) as pool:
            pins = list(pool.map(one, dirs))
        assert len(set(pins)) == len(dirs)  # one pin per job, none shared or replaced
        assert len({tuple(sorted(_tree(p).items())) for p in pins}) == 1
    assert downloads.count == 1
    shutil.rmtree(dirs[0].parent)  # one job ended: only its pin goes
    fetch(job.data, tmp_path / "cache", store_factory=downloads, into=dirs[1])
    assert not pins[0].exists() and all(p.exists() for p in pins[1:])


def test_one_job_pinning_the_same_data_from_many_threads_keeps_a_whole_pin(staged, tmp_path):
    m, downloads = staged
    job = next(j for j in m.jobs if j.name == "images")
    (tmp_path / "work").mkdir()
    with ThreadPoolExecutor(8) as pool:
        pins = list(
            pool.map(
                lambda _: fetch(
                    job.data, tmp_path / "cache", store_factory=downloads, into=tmp_path / "work"
                ),
                range(16),
            )
        )
    assert len(set(pins)) == 1
    assert _tree(pins[0]) == {"b.bin": b"\x02" * 7000, "cats/a.bin": b"\x01" * 5000}
    assert sorted(p.name for p in pins[0].parent.iterdir()) == [".owner", "images"]  # no temp left


def test_staged_data_whose_bytes_do_not_match_the_digest_is_refused_and_not_cached(
    s3_server, s3_store, tmp_path
):
    digest = hashlib.sha256(b"the real bytes").hexdigest()
    # a corrupted copy under the digest's key, claiming the digest
    s3_store._client.put_object(
        Bucket=s3_store.bucket,
        Key=s3_store.data_key(digest),
        Body=b"tampered",
        Metadata={"sha256": digest},
    )
    downloads = Downloads(f"s3://{s3_store.bucket}/runs", s3_server.env)
    with pytest.raises(DigestMismatch):
        fetch(f"store+sha256://{digest}/d.csv", tmp_path / "cache", store_factory=downloads)
    assert list((tmp_path / "cache" / "entries").iterdir()) == []


def test_data_missing_from_the_store_says_to_publish_again(s3_server, s3_store, tmp_path):
    downloads = Downloads(f"s3://{s3_store.bucket}/runs", s3_server.env)
    with pytest.raises(StoreError, match="not in the store.*publish the manifest again"):
        fetch(f"store+sha256://{'0' * 64}/d.csv", tmp_path / "cache", store_factory=downloads)


def test_an_s3_object_changed_after_publish_is_refused(s3_server, s3_env, s3_store, tmp_path):
    for pinned_by_sha in (True, False):
        key = f"sets/{pinned_by_sha}.csv"
        if pinned_by_sha:
            (tmp_path / "d.csv").write_bytes(b"v1")
            s3_store.put_file(key, tmp_path / "d.csv")
            key = f"runs/{key}"
        else:
            put_plain(s3_store, key, b"v1")
        uri = DataResolver().pin(f"s3://{s3_store.bucket}/{key}", tmp_path)
        put_plain(s3_store, key, b"v2 changed")
        with pytest.raises(DigestMismatch, match="changed after publish"):
            fetch(
                uri, tmp_path / f"cache-{pinned_by_sha}", store_factory=Downloads("", s3_server.env)
            )


def test_the_cache_evicts_the_least_recently_used_entry_beyond_its_bound(s3_store, tmp_path):
    digests = []
    for i in range(3):
        (tmp_path / f"{i}.bin").write_bytes(bytes([i]) * 1000)
        digests.append(hashlib.sha256(bytes([i]) * 1000).hexdigest())
        s3_store.put_data(tmp_path / f"{i}.bin", digests[-1])
    cache = DataCache(tmp_path / "cache", max_bytes=2500)

    def get(d):
        return cache.get(d, "file", lambda dest: s3_store.get_data(d, dest), d)

    get(digests[0])
    get(digests[1])
    os.utime(tmp_path / "cache" / "entries" / digests[0], (1, 1))  # 0 used longest ago...
    os.utime(tmp_path / "cache" / "entries" / digests[1], (2, 2))
    get(digests[0])  # ...until used again
    get(digests[2])
    left = {p.name for p in (tmp_path / "cache" / "entries").iterdir()}
    assert left == {digests[0], digests[2]} and cache.total_bytes() == 2000


def test_a_pinned_copy_outlives_the_eviction_of_its_entry(s3_store, tmp_path):
    (tmp_path / "a.bin").write_bytes(b"a" * 1000)
    digest = hashlib.sha256(b"a" * 1000).hexdigest()
    s3_store.put_data(tmp_path / "a.bin", digest)
    cache = DataCache(tmp_path / "cache", max_bytes=1)
    (tmp_path / "job").mkdir()
    payload = cache.get(digest, "file", lambda dest: s3_store.get_data(digest, dest), digest)
    pinned = cache.pin(payload, tmp_path / "job", "a.bin")
    assert cache.evict() == [digest]
    assert pinned.read_bytes() == b"a" * 1000
    shutil.rmtree(tmp_path / "job")  # the job ended: its pin goes at the next pin
    (tmp_path / "next-job").mkdir()
    cache.pin(tmp_path / "a.bin", tmp_path / "next-job", "a.bin")
    assert not (tmp_path / "cache" / "pins" / owner_key(tmp_path / "job")).exists()


FETCH_IN_A_PROCESS = """
import sys
from artifacts.data import fetch
from artifacts.stores import open_store_at

downloads = 0
def factory(url):
    store = open_store_at(url)
    real = store.get_data
    def counted(*a, **kw):
        global downloads
        downloads += 1
        return real(*a, **kw)
    store.get_data = counted
    return store
into = sys.argv[3] if len(sys.argv) > 3 else None
path = fetch(sys.argv[1], sys.argv[2], store_factory=factory, into=into)
print(downloads, path.stat().st_size, path)
"""


def test_worker_processes_on_one_host_share_one_download(staged, s3_server, tmp_path):
    import subprocess
    import sys

    m, downloads = staged
    job = next(j for j in m.jobs if j.name == "big")
    env = dict(os.environ, **s3_server.env, FLEET_STORE_URL=downloads.store_url)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FETCH_IN_A_PROCESS, job.data, str(tmp_path / "cache")],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert sorted(int(n) for n, _, _ in outs) == [0, 0, 0, 1]
    assert {int(size) for _, size, _ in outs} == {1 << 20}


def test_worker_processes_pinning_the_same_data_at_once_all_succeed(staged, s3_server, tmp_path):
    import subprocess
    import sys

    m, downloads = staged
    job = next(j for j in m.jobs if j.name == "big")
    env = dict(os.environ, **s3_server.env, FLEET_STORE_URL=downloads.store_url)
    dirs = [tmp_path / "runs" / f"r{i}" / "work" for i in range(6)]
    for d in dirs:
        d.mkdir(parents=True)
    cache = str(tmp_path / "cache")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FETCH_IN_A_PROCESS, job.data, cache, str(d)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for d in dirs
    ]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0] * len(dirs)
    pins = {Path(path) for _, _, path in outs}
    assert len(pins) == len(dirs) and len({p.read_bytes() for p in pins}) == 1


@pytest.fixture
def app(redis_url):
    from tasks import app

    app.conf.broker_url = redis_url
    app.pool.force_close_all()
    yield app


def test_publish_sends_no_job_whose_data_could_not_be_staged(
    app, redis_client, monkeypatch, tmp_path
):
    from fleet.publish import publish
    from state.records import Records

    m = load(project(tmp_path, b"x"))
    monkeypatch.setenv("FLEET_STORE_URL", "s3://unreachable/runs")
    monkeypatch.setenv("FLEET_S3_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    with pytest.raises(StoreError, match="127.0.0.1:9"):
        publish(app, redis_client, m)
    assert Records(redis_client).all() == [] and redis_client.keys("cpu*") == []


def test_publish_stages_data_before_it_sends_the_jobs(
    app, redis_client, s3_server, s3_store, monkeypatch, tmp_path
):
    from fleet.publish import publish

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FLEET_STORE_URL", f"s3://{s3_store.bucket}/runs")
    m = load(project(tmp_path, b"x"))
    rows = publish(app, redis_client, m)
    assert all(r.action == "publish" for r in rows)
    assert all(s3_store.has_data(sha) for sha in m.data_sources)


def test_a_fill_left_behind_by_a_dead_process_is_cleared_by_the_next_eviction(tmp_path):
    cache = DataCache(tmp_path / "cache", max_bytes=1 << 20)
    abandoned = tmp_path / "cache" / "tmp" / f"{'c' * 64}.deadbeef"
    abandoned.mkdir()
    (abandoned / "raw").write_bytes(b"half a download")
    cache.evict()
    assert not abandoned.exists()
