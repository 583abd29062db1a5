"""One contract for every artifact store, run against a directory and a real S3 server."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import pytest

from artifacts.bundle import BundleResult, bundle, collect, sha256_file
from artifacts.data import fetch
from artifacts.stores import FileStore, S3Store, Store, open_store
from core.constants import BUNDLE_NAME, META_NAME
from core.errors import DigestMismatch, StoreError
from core.settings import StoreSettings

pytestmark = pytest.mark.integration

KIND = "model"


@pytest.fixture
def made_bundle(tmp_path: Path) -> BundleResult:
    run = tmp_path / "run"
    run.mkdir()
    (run / "weights.bin").write_bytes(os.urandom(1 << 20))
    (run / "config.json").write_text('{"lr": 0.01}')
    return bundle(collect(run, []), {"job": "j1"}, tmp_path / BUNDLE_NAME)


class StoreContract:
    """Behaviour every Store must have; a subclass supplies `store` and `stamp`."""

    @pytest.fixture
    def store(self) -> Store:
        raise NotImplementedError

    def stamp(self, store: Store, key: str) -> object:
        """Something that changes whenever the object at `key` is written."""
        raise NotImplementedError

    def test_a_put_bundle_then_verifies(self, store, made_bundle):
        stored = store.put_bundle(KIND, made_bundle.path, made_bundle.sha256, {"job": "j1"})
        assert (stored.sha256, stored.size, stored.existed) == (
            made_bundle.sha256,
            made_bundle.size,
            False,
        )
        assert stored.uri == store.uri_for(KIND, made_bundle.sha256)
        assert store.verify(KIND, made_bundle.sha256)

    def test_putting_the_same_bytes_again_is_a_no_op(self, store, made_bundle):
        store.put_bundle(KIND, made_bundle.path, made_bundle.sha256, {"job": "j1"})
        key = store.bundle_key(KIND, made_bundle.sha256)
        before = self.stamp(store, key)
        again = store.put_bundle(KIND, made_bundle.path, made_bundle.sha256, {"job": "j1"})
        assert again.existed
        assert self.stamp(store, key) == before

    def test_get_bundle_returns_identical_bytes(self, store, made_bundle, tmp_path):
        store.put_bundle(KIND, made_bundle.path, made_bundle.sha256, {})
        got = store.get_bundle(KIND, made_bundle.sha256, tmp_path / "got.tar.zst")
        assert got.read_bytes() == made_bundle.path.read_bytes()

    def test_get_bundle_into_a_directory_uses_the_bundle_name(self, store, made_bundle, tmp_path):
        store.put_bundle(KIND, made_bundle.path, made_bundle.sha256, {})
        (tmp_path / "into").mkdir()
        got = store.get_bundle(KIND, made_bundle.sha256, tmp_path / "into")
        assert got == tmp_path / "into" / BUNDLE_NAME and sha256_file(got) == made_bundle.sha256

    def test_meta_json_is_stored_beside_the_bundle(self, store, made_bundle):
        store.put_bundle(KIND, made_bundle.path, made_bundle.sha256, {"job": "j1"})
        meta = store.get_meta(KIND, made_bundle.sha256)
        assert meta["job"] == "j1" and meta["kind"] == KIND
        assert (meta["sha256"], meta["size"]) == (made_bundle.sha256, made_bundle.size)
        bundle_key = store.bundle_key(KIND, made_bundle.sha256)
        assert store.meta_key(KIND, made_bundle.sha256) == bundle_key.replace(
            BUNDLE_NAME, META_NAME
        )

    def test_list_artifacts_sees_a_stored_bundle(self, store, made_bundle):
        assert store.list_artifacts() == []
        store.put_bundle(KIND, made_bundle.path, made_bundle.sha256, {"job": "j1"})
        [listed] = store.list_artifacts()
        assert listed["sha256"] == made_bundle.sha256 and listed["job"] == "j1"
        assert listed["uri"] == store.uri_for(KIND, made_bundle.sha256)

    def test_a_wrong_sha256_raises_digest_mismatch_and_stores_nothing(self, store, made_bundle):
        wrong = hashlib.sha256(b"something else").hexdigest()
        with pytest.raises(DigestMismatch, match=wrong):
            store.put_bundle(KIND, made_bundle.path, wrong, {})
        assert not store.verify(KIND, wrong)
        assert store.list_artifacts() == []
        with pytest.raises(StoreError):
            store.get_meta(KIND, wrong)

    def test_verify_is_false_for_a_bundle_never_stored(self, store):
        assert not store.verify(KIND, "f" * 64)

    def test_get_meta_of_a_missing_bundle_names_it(self, store):
        with pytest.raises(StoreError, match="f" * 64):
            store.get_meta(KIND, "f" * 64)

    def test_put_file_then_get_file_round_trips(self, store, tmp_path):
        src = tmp_path / "train.parquet"
        src.write_bytes(os.urandom(300_000))
        uri = store.put_file("datasets/train.parquet", src)
        assert uri.endswith("datasets/train.parquet")
        got = store.get_file("datasets/train.parquet", tmp_path / "copy" / "train.parquet")
        assert got.read_bytes() == src.read_bytes()

    def test_file_tag_changes_when_the_file_changes(self, store, tmp_path):
        src = tmp_path / "d.csv"
        src.write_text("a,b\n1,2\n")
        store.put_file("d.csv", src)
        first = store.file_tag("d.csv")
        src.write_text("a,b\n3,4\n")
        store.put_file("d.csv", src)
        assert store.file_tag("d.csv") != first

    def test_data_is_staged_once_by_its_digest_and_comes_back_verified(self, store, tmp_path):
        data = os.urandom(300_000)
        (tmp_path / "d.csv").write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        assert not store.has_data(digest)
        assert store.put_data(tmp_path / "d.csv", digest) is True
        before = self.stamp(store, store.data_key(digest))
        assert store.has_data(digest) and store.put_data(tmp_path / "d.csv", digest) is False
        assert self.stamp(store, store.data_key(digest)) == before
        assert store.get_data(digest, tmp_path / "got").read_bytes() == data

    def test_data_whose_bytes_do_not_match_its_digest_is_not_staged(self, store, tmp_path):
        (tmp_path / "d.csv").write_bytes(b"these bytes")
        wrong = hashlib.sha256(b"other bytes").hexdigest()
        with pytest.raises(DigestMismatch):
            store.put_data(tmp_path / "d.csv", wrong)
        assert not store.has_data(wrong)

    def test_staged_data_is_not_listed_as_an_artifact(self, store, tmp_path):
        (tmp_path / "d.csv").write_bytes(b"x")
        store.put_data(tmp_path / "d.csv", hashlib.sha256(b"x").hexdigest())
        assert store.list_artifacts() == []

    def test_ping_succeeds_on_a_reachable_store(self, store):
        store.ping()

    def test_delete_file_removes_it_and_a_missing_file_is_no_error(self, store, tmp_path):
        src = tmp_path / "ckpt.tar.zst"
        src.write_bytes(b"state")
        store.put_file("checkpoints/j/a.tar.zst", src)
        store.delete_file("checkpoints/j/a.tar.zst")
        with pytest.raises(StoreError):
            store.get_file("checkpoints/j/a.tar.zst", tmp_path / "back")
        store.delete_file("checkpoints/j/a.tar.zst")

    # --- staging: a run's bundle is listed only once its record names it -------------
    def test_a_staged_bundle_is_not_listed_and_names_the_uri_it_will_have(self, store, made_bundle):
        staged = store.stage_bundle(
            "tok1", KIND, made_bundle.path, made_bundle.sha256, {"job_id": "j1"}
        )
        assert staged.uri == store.uri_for(KIND, made_bundle.sha256)
        assert staged.size == made_bundle.size
        assert store.list_artifacts() == [] and store.staged()

    def test_a_bundle_its_record_names_can_be_fetched_before_its_promotion(
        self, store, made_bundle, tmp_path
    ):
        # between finish.lua naming the bundle and the worker promoting it, `fleet get` works
        store.stage_bundle("tok1", KIND, made_bundle.path, made_bundle.sha256, {"job_id": "j1"})
        got = store.get_bundle(KIND, made_bundle.sha256, tmp_path / "early")
        assert got.read_bytes() == made_bundle.path.read_bytes()
        assert store.verify(KIND, made_bundle.sha256)
        store.promote("tok1", KIND, made_bundle.sha256)
        got = store.get_bundle(KIND, made_bundle.sha256, tmp_path / "late")
        assert got.read_bytes() == made_bundle.path.read_bytes()
        with pytest.raises(StoreError):
            store.get_bundle(KIND, "0" * 64, tmp_path / "none")

    def test_staged_lists_each_staged_bundle_with_its_run_job_and_time(self, store, made_bundle):
        store.stage_bundle("tok1", KIND, made_bundle.path, made_bundle.sha256, {"job_id": "j1"})
        [staged] = store.staged()
        assert (staged.token, staged.kind, staged.sha256, staged.job_id) == (
            "tok1",
            KIND,
            made_bundle.sha256,
            "j1",
        )
        assert staged.staged_at is not None

    def test_promote_makes_the_staged_bundle_the_listed_artifact_once(self, store, made_bundle):
        store.stage_bundle("tok1", KIND, made_bundle.path, made_bundle.sha256, {"job_id": "j1"})
        store.promote("tok1", KIND, made_bundle.sha256)
        store.promote("tok1", KIND, made_bundle.sha256)  # a retry: nothing more to do
        [listed] = store.list_artifacts()
        assert listed["sha256"] == made_bundle.sha256 and listed["job_id"] == "j1"
        assert store.verify(KIND, made_bundle.sha256) and store.staged() == []

    def test_a_discarded_staged_bundle_leaves_nothing_and_a_second_discard_is_no_error(
        self, store, made_bundle
    ):
        store.stage_bundle("tok1", KIND, made_bundle.path, made_bundle.sha256, {"job_id": "j1"})
        store.discard("tok1", KIND, made_bundle.sha256)
        store.discard("tok1", KIND, made_bundle.sha256)
        assert store.staged() == [] and store.list_artifacts() == []

    def test_promoting_what_was_neither_staged_nor_stored_names_the_run(self, store):
        with pytest.raises(StoreError, match="staged by run tok9"):
            store.promote("tok9", KIND, "ab" * 32)

    def test_a_bundle_with_a_wrong_sha256_leaves_nothing_staged(self, store, made_bundle):
        with pytest.raises(DigestMismatch):
            store.stage_bundle("tok1", KIND, made_bundle.path, "0" * 64, {"job_id": "j1"})
        assert store.staged() == []


class TestFileStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path) -> FileStore:
        return FileStore(tmp_path / "store", prefix="runs")

    def stamp(self, store, key):
        st = (store.root / key).stat()
        return st.st_ino, st.st_mtime_ns

    def test_a_failed_put_leaves_no_temp_files(self, store, made_bundle):
        with pytest.raises(DigestMismatch):
            store.put_bundle(KIND, made_bundle.path, "0" * 64, {})
        assert [p for p in store.root.rglob("*") if p.is_file()] == []


class TestS3Store(StoreContract):
    @pytest.fixture
    def store(self, s3_store) -> S3Store:
        # Versioning makes every write visible as a new VersionId (see `stamp`).
        s3_store._client.put_bucket_versioning(
            Bucket=s3_store.bucket, VersioningConfiguration={"Status": "Enabled"}
        )
        return s3_store

    def stamp(self, store, key):
        return store._client.head_object(Bucket=store.bucket, Key=key)["VersionId"]

    def test_a_large_bundle_goes_up_in_verified_parts(self, s3_server, s3_store, tmp_path):
        store = S3Store(
            s3_store.bucket,
            "big",
            client=s3_store._client,
            part_bytes=5 << 20,
            single_put_max_bytes=5 << 20,
        )
        path = tmp_path / "big.tar.zst"
        path.write_bytes(os.urandom(11 << 20))
        sha = sha256_file(path)
        assert not store.put_bundle(KIND, path, sha, {}).existed
        assert store.verify(KIND, sha)
        assert store.put_bundle(KIND, path, sha, {}).existed

    def test_a_wrong_sha256_on_a_multipart_upload_stores_nothing(self, s3_store, tmp_path):
        store = S3Store(
            s3_store.bucket,
            "big",
            client=s3_store._client,
            part_bytes=5 << 20,
            single_put_max_bytes=5 << 20,
        )
        path = tmp_path / "big.tar.zst"
        path.write_bytes(os.urandom(11 << 20))
        with pytest.raises(DigestMismatch):
            store.put_bundle(KIND, path, "0" * 64, {})
        assert store.list_artifacts() == [] and not store.verify(KIND, "0" * 64)
        uploads = store._client.list_multipart_uploads(Bucket=store.bucket)
        assert uploads.get("Uploads", []) == []

    def test_a_file_that_changes_while_it_goes_up_in_parts_is_not_kept(self, s3_store, tmp_path):
        store = S3Store(
            s3_store.bucket,
            "big",
            s3_store._client,
            part_bytes=5 << 20,
            single_put_max_bytes=5 << 20,
        )
        path = tmp_path / "big.tar.zst"
        path.write_bytes(os.urandom(11 << 20))
        sha = sha256_file(path)

        def overwrite_the_start(**_):  # after the store hashed the file, before a part is read
            with open(path, "r+b") as f:
                f.write(os.urandom(1 << 20))

        store._client.meta.events.register("before-call.s3.UploadPart", overwrite_the_start)
        with pytest.raises(DigestMismatch, match="checksum of part checksums"):
            store.put_bundle(KIND, path, sha, {})
        assert store.list_artifacts() == [] and not store.verify(KIND, sha)

    def test_an_unreachable_endpoint_raises_store_error_without_secrets(self, s3_server):
        env = {**s3_server.env, "FLEET_S3_ENDPOINT_URL": "http://127.0.0.1:9"}
        store = open_store(StoreSettings.from_env(env, url="s3://nowhere/runs"))
        with pytest.raises(StoreError) as caught:
            store.ping()
        message = str(caught.value)
        assert "127.0.0.1:9" in message and "s3://nowhere" in message
        assert env["AWS_SECRET_ACCESS_KEY"] not in message
        assert env["AWS_ACCESS_KEY_ID"] not in message


# --- open_store -------------------------------------------------------------------


def test_open_store_reads_a_file_url(tmp_path):
    store = open_store(StoreSettings(url=tmp_path.as_uri()))
    assert isinstance(store, FileStore) and store.root == tmp_path.resolve()


def test_open_store_defaults_to_a_local_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = open_store(StoreSettings.from_env({}))
    assert isinstance(store, FileStore)
    assert store.root == (tmp_path / ".fleet-local" / "store").resolve()


def test_open_store_reads_a_relative_file_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = open_store(StoreSettings.from_env({"FLEET_STORE_URL": "file://./stores/a"}))
    assert store.root == (tmp_path / "stores" / "a").resolve()


def test_open_store_reads_an_s3_url_with_its_endpoint(s3_server):
    store = open_store(StoreSettings.from_env(s3_server.env, url="s3://fleet-open/runs/x"))
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.endpoint) == (
        "fleet-open",
        "runs/x",
        s3_server.endpoint_url,
    )
    store.ping()


def test_stores_opened_again_share_one_s3_client_per_process_and_settings(s3_server):
    """A worker opens its store for each checkpoint sync, upload and fetch; building an S3
    client each time cost 0.2-0.5 s of CPU. One client per endpoint and credentials (any
    bucket), in this process only."""
    settings = StoreSettings.from_env(s3_server.env, url="s3://fleet-open/runs/x")
    first, again = open_store(settings), open_store(replace(settings, url="s3://fleet-data/y"))
    assert again._client is first._client and again.bucket == "fleet-data"
    other_key = replace(settings, secret_access_key="another-secret")
    assert open_store(other_key)._client is not first._client  # a client of its own
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a forked child never shares its parent's client (nor its sockets)
        os.write(write, b"own" if open_store(settings)._client is not first._client else b"x")
        os._exit(0)
    os.waitpid(child, 0)
    assert os.read(read, 8) == b"own"
    first.ping()


def test_open_store_rejects_an_unknown_scheme_naming_the_variable():
    with pytest.raises(StoreError, match="FLEET_STORE_URL.*s3://bucket/prefix"):
        open_store(StoreSettings.from_env({"FLEET_STORE_URL": "gs://bucket/x"}))


@pytest.mark.parametrize(
    "url",
    [
        "gs://tok:hunter2-xyz@bucket/x",
        "file://u:hunter2-xyz@remote/dir",
        "s3://AKIA:hunter2-xyz@bucket/prefix",
        "https://hunter2-xyz@host/store",
    ],
)
def test_open_store_errors_show_the_url_masked(url):
    with pytest.raises(StoreError) as e:
        open_store(StoreSettings.from_env({"FLEET_STORE_URL": url}))
    assert "hunter2-xyz" not in str(e.value) and "***@" in str(e.value)


# --- data.fetch ---------------------------------------------------------------------


def test_fetch_returns_a_local_path_as_it_is(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("x\n1\n")
    assert fetch(str(data), tmp_path / "cache") == data


def test_fetch_of_a_missing_local_path_names_the_path(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(StoreError, match=str(missing)):
        fetch(str(missing), tmp_path / "cache")


class CountingFactory:
    """Opens real stores and counts the downloads they make."""

    def __init__(self, env: dict[str, str]):
        self.env, self.downloads = env, 0

    def __call__(self, url: str) -> Store:
        store = open_store(StoreSettings.from_env(self.env, url=url))
        real = store.get_file

        def counted(key, dest):
            self.downloads += 1
            return real(key, dest)

        store.get_file = counted
        return store


@pytest.fixture
def uploaded(s3_store, tmp_path) -> tuple[str, bytes]:
    data = os.urandom(200_000)
    (tmp_path / "train.bin").write_bytes(data)
    return s3_store.put_file("datasets/train.bin", tmp_path / "train.bin"), data


def test_fetch_downloads_an_s3_object_once(s3_server, uploaded, tmp_path):
    uri, data = uploaded
    factory = CountingFactory(s3_server.env)
    first = fetch(uri, tmp_path / "cache", store_factory=factory)
    st = first.stat()
    second = fetch(uri, tmp_path / "cache", store_factory=factory)
    assert first == second and first.name == "train.bin"
    assert first.read_bytes() == data
    assert factory.downloads == 1
    assert (second.stat().st_ino, second.stat().st_mtime_ns) == (st.st_ino, st.st_mtime_ns)


def test_fetch_downloads_again_when_the_object_changes(s3_server, s3_store, uploaded, tmp_path):
    uri, _ = uploaded
    factory = CountingFactory(s3_server.env)
    first = fetch(uri, tmp_path / "cache", store_factory=factory)
    (tmp_path / "new.bin").write_bytes(b"new contents")
    s3_store.put_file("datasets/train.bin", tmp_path / "new.bin")
    second = fetch(uri, tmp_path / "cache", store_factory=factory)
    assert second != first and second.read_bytes() == b"new contents"
    assert factory.downloads == 2


def test_fetch_uses_the_endpoint_from_the_environment(s3_env, uploaded, tmp_path):
    uri, data = uploaded
    assert fetch(uri, tmp_path / "cache").read_bytes() == data


def test_fetch_of_a_missing_s3_object_names_it(s3_server, s3_store, tmp_path):
    uri = f"s3://{s3_store.bucket}/datasets/absent.bin"
    with pytest.raises(StoreError, match="absent.bin"):
        fetch(uri, tmp_path / "cache", store_factory=CountingFactory(s3_server.env))


def test_fetch_leaves_no_partial_files_in_the_cache(s3_server, uploaded, tmp_path):
    uri, _ = uploaded
    path = fetch(uri, tmp_path / "cache", store_factory=CountingFactory(s3_server.env))
    assert [p.name for p in path.parent.iterdir()] == ["train.bin"]
