"""Checkpoint resume through real workers: an ``mlp`` job with
``checkpoint = "ckpt/"`` killed mid-training resumes on another host from its last synced
epoch, and ends with the same weights as an uninterrupted run with the same seed.

The run to interrupt is held at an epoch until the test has killed it (``held_trainer_env``:
the built-in trainer itself, as a worker runs it, stopped after that epoch's report), so the
kill lands mid-training however slowly the progress reaches the record."""

from __future__ import annotations

import signal
import tarfile
import uuid
from pathlib import Path

import pytest
import zstandard

from artifacts.stores import open_store_at
from core.constants import CHECKPOINTS_PREFIX
from state.jobrecord import JobState
from tests.harness.trainers import HYPER, MOONS, held_trainer_env, trainer, weights_digest
from tests.waiting import wait_until

torch = pytest.importorskip("torch")

EPOCHS = 24  # the held runs are killed at an epoch, not raced: no length needed
E2E_HYPER = {**HYPER, "epochs": EPOCHS}

# three trainer starts a test (torch's import is most of each) and its workers: minutes on a
# loaded 2-core box, where the module's uninterrupted run alone took over 300 s
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def mlp_manifest(chaos, name: str) -> Path:
    hyper = ", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in E2E_HYPER.items())
    path = chaos.root / f"m-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(
        f'[[jobs]]\nname = "{name}"\nmodel = "mlp"\ndata = "{MOONS}"\nseed = 11\n'
        f'checkpoint = "ckpt/"\nhyper = {{ {hyper} }}\n'
    )
    return path


def epoch_of(rec, resumed: bool) -> int:
    """The epoch the record's progress shows.

    Only if that progress is from a run that resumed (or, with ``resumed`` false, did not).
    """
    metrics = (rec.progress or {}).get("metrics") or {}
    # a new run's record still shows the last run's progress until its own first report
    return int(metrics.get("epoch") or 0) if ("resumed_from_epoch" in metrics) == resumed else 0


def start_held(chaos, name: str, epoch: int) -> None:
    """Start worker ``name``, whose built-in trainer runs stay at ``epoch`` until the test's
    end (the chaos root's gate file)."""
    chaos.start(name, **held_trainer_env(chaos.env, epoch, chaos.root / "gate"))


def interrupt_after(chaos, job_id: str, epoch: int, sig: int, resumed: bool = False) -> int:
    """Once a checkpoint is synced and the run reached ``epoch`` (where its worker holds it),
    signal its worker.

    Returns the epoch seen.
    """

    def past():
        rec = chaos.records().get(job_id)
        assert rec.state is not JobState.SUCCEEDED, "finished before it could be interrupted"
        at = rec.state is JobState.RUNNING and epoch_of(rec, resumed) >= epoch
        return at and chaos.records().checkpoint(job_id) and rec

    # a bound for a failure: a held run waits there, however long a loaded box takes to get
    # it there (torch's import and the worker's start, minutes at worst)
    rec = wait_until(f"epoch {epoch} with a checkpoint", past, 300, chaos.logs, every_s=0.2)
    victim = chaos.workers[rec.worker]
    victim.send_signal(sig)
    victim.wait(30)
    return epoch_of(rec, resumed)


def final_weights_and_metrics(chaos, rec) -> tuple[str, dict]:
    store = open_store_at(chaos.env["FLEET_STORE_URL"])
    bundle = store.get_bundle("mlp", rec.artifact["sha256"], chaos.root / "got.tar.zst")
    out = chaos.root / "got"
    with open(bundle, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as stream:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            tar.extractall(out, filter="data")
    return weights_digest(out / "model.pt"), store.get_meta("mlp", rec.artifact["sha256"])[
        "metrics"
    ]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("whole")
    trainer(tmp, "out", None, hyper=E2E_HYPER)
    return weights_digest(tmp / "out" / "model.pt")


@pytest.fixture
def ckpt_chaos(chaos, monkeypatch):
    chaos.env.update(FLEET_CHECKPOINT_EVERY_S="0.5")
    # publish stages the data there
    monkeypatch.setenv("FLEET_STORE_URL", chaos.env["FLEET_STORE_URL"])
    yield chaos
    (chaos.root / "gate").touch()  # a held run the test left goes on (and its worker stops it)


def test_a_checkpointed_job_killed_mid_training_resumes_on_another_host_and_ends_with_the_same_model(  # noqa: E501
    ckpt_chaos, uninterrupted
):
    chaos = ckpt_chaos
    start_held(chaos, "ck-a", EPOCHS // 3)
    ids = chaos.publish(mlp_manifest(chaos, "resume"))
    interrupt_after(chaos, ids["resume"], EPOCHS // 3, signal.SIGKILL)
    chaos.start("ck-b")
    recs = chaos.wait(ids, timeout_s=300)
    assert recs["resume"].worker == "ck-b" and recs["resume"].attempts == 2
    digest, metrics = final_weights_and_metrics(chaos, recs["resume"])
    print(
        f"\nresumed from epoch {metrics['resumed_from_epoch']} of {EPOCHS}; "
        f"weights equal: {digest == uninterrupted}"
    )
    assert 0 < metrics["resumed_from_epoch"] < EPOCHS
    assert digest == uninterrupted
    assert chaos.records().checkpoint(ids["resume"]) is None  # succeeded: checkpoint dropped
    left = (
        Path(chaos.env["FLEET_STORE_URL"].removeprefix("file://"))
        / CHECKPOINTS_PREFIX
        / ids["resume"]
    )
    assert not list(left.glob("*"))


def test_a_checkpointed_job_killed_twice_resumes_each_time_and_ends_with_the_same_model(
    ckpt_chaos, uninterrupted
):
    # first a SIGKILL, then a warm shutdown (handed back at once, with a last sync)
    chaos = ckpt_chaos
    chaos.env["FLEET_LEASE_TTL_S"] = "2"
    start_held(chaos, "twice-a", EPOCHS // 4)
    ids = chaos.publish(mlp_manifest(chaos, "twice"))
    interrupt_after(chaos, ids["twice"], EPOCHS // 4, signal.SIGKILL)
    start_held(chaos, "twice-b", EPOCHS // 4 + 4)
    seen = interrupt_after(chaos, ids["twice"], EPOCHS // 4 + 4, signal.SIGTERM, resumed=True)
    rec = chaos.wait(ids, states=("queued",), timeout_s=120)["twice"]
    assert "released" in rec.last_error
    synced_at_handback = chaos.records().checkpoint(ids["twice"])
    chaos.start("twice-c")
    recs = chaos.wait(ids, timeout_s=300)
    digest, metrics = final_weights_and_metrics(chaos, recs["twice"])
    print(
        f"\nkilled, handed back after epoch {seen}; last run resumed from epoch "
        f"{metrics['resumed_from_epoch']} of {EPOCHS}; weights equal: {digest == uninterrupted}"
    )
    assert synced_at_handback and seen - 1 <= metrics["resumed_from_epoch"] < EPOCHS
    assert recs["twice"].worker == "twice-c" and digest == uninterrupted
