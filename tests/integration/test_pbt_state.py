"""A PBT search's fenced steps on a real Redis, without workers (lua/search_pbt.lua): every
member queued at publish; a boundary decided once, whoever replays it; only the run that owns a
member records for it; an exploit applied once, its requeue carrying the new values; a decision
Redis lost recorded again by the run that acted on it."""

import json

import pytest

from fleet.manifests import loads
from fleet.publish import publish
from manifest.search.pbt import Decision, Kind
from manifest.search.spec import trial_job_id
from state import queues
from state.jobrecord import JobState
from state.records import Records
from state.search import pbt
from state.search.pbt import Applied, PbtStore, member_job
from state.search.store import RunToken, SearchStore
from state.search.view import read_search

pytestmark = pytest.mark.integration
LIST = "cpu"  # the list a requeue goes to (kombu's plain list of the cpu queue)

MANIFEST = """[[jobs]]
name = "pop"
command = ["python", "train.py"]
checkpoint = "ckpt/"
[jobs.search]
metric = "loss"
population = 4
last_step = 30
seed = 1
scheduler = { name = "pbt", interval = 10 }
[jobs.search.space]
lr = { low = 0.001, high = 0.1, log = true }
"""


@pytest.fixture
def pop(app, redis_client):
    """The published population: (search id, its config, its template)."""
    m = loads(MANIFEST, "m.toml")
    publish(app, redis_client, m)
    sid = m.searches[0].search_id
    config, tpl = SearchStore(redis_client).template(sid)
    return sid, config, tpl


def run_of(records: Records, sid: str, n: int, token: str = "") -> RunToken:
    """Member ``n``'s job claimed as a worker claims it."""
    jid = trial_job_id(sid, n)
    token = token or f"tok-{n}"
    assert records.claim(jid, "w", token, {}, "cpu").run
    return RunToken(jid, token)


def exploit(member: int, step: int, donor: int, old: float, new: float) -> Decision:
    return Decision(
        member, step, Kind.EXPLOIT, judged=4, donor=donor, donor_value=0.1,
        donor_checkpoint_step=step, old={"lr": old}, new={"lr": new}, at=1.0,
    )  # fmt: skip


def test_publish_queues_every_member_at_once(pop, redis_client):
    sid, config, _ = pop
    view = read_search(redis_client, sid)
    assert (view.issued, config.trials, config.parallel) == (4, 4, 4)
    states = {t.state for t in view.trials}
    assert states == {"queued"}


def test_a_boundary_is_decided_once_and_a_replay_gets_that_decision_back(pop, redis_client):
    sid, *_ = pop
    store, records = PbtStore(redis_client, sid), Records(redis_client)
    run = run_of(records, sid, 3)
    assert store.start(run, 3, {"lr": 0.05}) is None
    first = exploit(3, 10, 0, 0.05, 0.012)
    assert store.boundary(run, 3, 4.0, first, {"lr": 0.05}) == first
    again = Decision(3, 10, Kind.CONTINUE, judged=4)  # the population moved meanwhile
    assert store.boundary(run, 3, 3.5, again, {"lr": 0.05}) == first
    (member,) = [m for m in pbt.fetch_members(redis_client, sid, 4) if m.number == 3]
    assert member.phase is pbt.Phase.EXPLOITING and member.pending["donor"] == 0
    assert member.bounds == {10: 3.5}  # the replay's metric, the last one heard, is kept
    assert member.schedule[0].values == {"lr": 0.05} and member.schedule[0].step == 0
    assert redis_client.hlen(pbt.key(sid, "decided", 3)) == 1


def test_only_the_run_that_owns_a_member_records_its_boundary(pop, redis_client):
    sid, *_ = pop
    store, records = PbtStore(redis_client, sid), Records(redis_client)
    owner = run_of(records, sid, 1, "owner")
    stale = RunToken(owner.job_id, "taken-over")
    assert store.boundary(stale, 1, 9.0, exploit(1, 10, 0, 0.05, 0.01), {"lr": 0.05}) is None
    assert store.start(stale, 1, {"lr": 0.05}) is False
    assert not redis_client.exists(pbt.key(sid, "decided", 1), pbt.key(sid, "bounds", 1))
    cont = Decision(1, 10, Kind.CONTINUE, judged=2)
    assert store.boundary(owner, 1, 2.0, cont, {"lr": 0.05}) == cont
    assert store.boundary(stale, 1, 9.0, exploit(1, 10, 0, 0.05, 0.01), {"lr": 0.05}) is None
    assert redis_client.hget(pbt.key(sid, "bounds", 1), "10") == "2.0"


def test_an_exploit_is_applied_once_and_its_requeue_carries_the_new_values(pop, redis_client):
    sid, config, tpl = pop
    store, records = PbtStore(redis_client, sid), Records(redis_client)
    run = run_of(records, sid, 2)
    d = exploit(2, 20, 0, 0.05, 0.012)
    store.boundary(run, 2, 4.0, d, {"lr": 0.05})
    job = member_job(sid, 2, config, tpl, d.new)
    ckpt = {"key": "checkpoints/x/abc.tar.zst", "sha256": "abc", "step": 23, "donor": 0}
    entry = {"member": 2, "step": 20, "donor": 0, "checkpoint": {"sha256": "abc", "step": 23}}
    assert store.apply(run, d, job, ckpt, entry, LIST) is Applied.OK
    assert store.apply(run, d, job, ckpt, entry, LIST) is Applied.APPLIED  # a retry changes nothing
    (ex,) = pbt.fetch_exploits(redis_client, sid)
    assert (ex.member, ex.step, ex.donor, ex.checkpoint_step) == (2, 20, 0, 23)
    member = pbt.fetch_members(redis_client, sid, 4)[2]
    assert member.phase is pbt.Phase.WAITING and member.resume_step == 23
    assert [s.step for s in member.schedule] == [0, 20] and member.schedule[1].donor == 0
    assert pbt.values_at(member.schedule, 25) == {"lr": 0.012}
    # the hand-back's requeue pushes the new message: the next run gets the new values
    assert records.finish(run.job_id, run.token, JobState.QUEUED, count_attempt=False)
    rec = records.get(run.job_id)
    assert rec.state is JobState.QUEUED and rec.checkpoint["step"] == 23
    assert rec.spec["hyper"]["lr"] == 0.012
    assert json.loads(redis_client.hget(pbt.key(sid, "trial", 2), "params")) == {"lr": 0.012}
    # and its next run starts training, with nothing left to apply
    assert store.start(run_of(records, sid, 2, "next"), 2, {"lr": 0.012}) is None
    assert pbt.fetch_members(redis_client, sid, 4)[2].phase is pbt.Phase.TRAINING


def test_a_run_that_starts_with_an_exploit_pending_gets_it_to_apply(pop, redis_client):
    sid, *_ = pop
    store, records = PbtStore(redis_client, sid), Records(redis_client)
    run = run_of(records, sid, 0)
    d = exploit(0, 10, 1, 0.05, 0.06)
    store.boundary(run, 0, 4.0, d, {"lr": 0.05})
    # its worker dies before applying it: the job is handed on as any job's
    assert records.finish(run.job_id, run.token, JobState.QUEUED, count_attempt=False)
    assert store.start(run_of(records, sid, 0, "resumed"), 0, {"lr": 0.05}) == d


def test_an_exploit_whose_decision_redis_lost_is_recorded_again_then_applied(pop, redis_client):
    sid, config, tpl = pop
    store, records = PbtStore(redis_client, sid), Records(redis_client)
    run = run_of(records, sid, 3)
    d = exploit(3, 10, 0, 0.05, 0.04)
    store.boundary(run, 3, 4.0, d, {"lr": 0.05})
    redis_client.delete(pbt.key(sid, "decided", 3))  # as a restart that lost the last second
    job = member_job(sid, 3, config, tpl, d.new)
    ckpt, entry = {"key": "k", "sha256": "s", "step": 10}, {"member": 3, "step": 10, "donor": 0}
    assert store.apply(run, d, job, ckpt, entry, LIST) is Applied.UNDECIDED
    assert store.boundary(run, 3, 4.0, d, {"lr": 0.05}) == d
    assert store.apply(run, d, job, ckpt, entry, LIST) is Applied.OK
    assert len(pbt.fetch_exploits(redis_client, sid)) == 1


def test_a_paused_member_goes_back_to_a_list_served_after_the_members_behind_it(pop, redis_client):
    sid, config, tpl = pop
    store, records = PbtStore(redis_client, sid), Records(redis_client)
    run = run_of(records, sid, 0)
    assert sorted(store.queued_steps(config)) == [0, 0, 0]  # the three others never started
    later = pbt.member_list(tpl.list_key, 10, config.pbt.interval)
    assert later != tpl.list_key
    assert store.pause(run, 0, 10, later)
    assert records.finish(run.job_id, run.token, JobState.QUEUED, count_attempt=False)
    # the members behind wait where they were published (this claim took no message, as a
    # worker's pop would: four), served before the paused member's list
    assert redis_client.llen(later) == 1 and redis_client.llen(tpl.list_key) == 4
    assert queues.parse(later).wire_pri > queues.parse(tpl.list_key).wire_pri
    member = pbt.fetch_members(redis_client, sid, 4)[0]
    assert (member.phase, member.resume_step) == (pbt.Phase.WAITING, 10)


def test_a_members_metric_is_seen_by_the_others_before_it_decides(pop, redis_client):
    sid, config, _ = pop
    store, records = PbtStore(redis_client, sid), Records(redis_client)
    a, b = run_of(records, sid, 0), run_of(records, sid, 1)
    # both reach step 10 at once: each records its metric, then reads the population
    assert store.metric(a, 0, 10, 2.0, {"lr": 0.01}) and store.metric(b, 1, 10, 1.0, {"lr": 0.1})
    seen_by_a = {s.number: (s.step, s.value) for s in store.standings(config)}
    assert seen_by_a == {0: (10, 2.0), 1: (10, 1.0)}
    assert not store.metric(RunToken(a.job_id, "stale"), 0, 20, 0.5, {"lr": 0.01})


def test_an_exploit_whose_donor_ended_is_void_and_never_applied_later(pop, redis_client):
    sid, config, tpl = pop
    store, records = PbtStore(redis_client, sid), Records(redis_client)
    run = run_of(records, sid, 1)
    d = exploit(1, 20, 0, 0.05, 0.04)
    store.boundary(run, 1, 4.0, d, {"lr": 0.05})
    assert store.void(run, 1, 20, "member 0 has no checkpoint at or after step 20")
    assert records.finish(run.job_id, run.token, JobState.QUEUED, count_attempt=False)
    again = run_of(records, sid, 1, "again")
    assert store.start(again, 1, {"lr": 0.05}) is None  # nothing pending: it trains on
    job = member_job(sid, 1, config, tpl, d.new)
    assert store.apply(again, d, job, {"step": 20}, {}, LIST) is Applied.VOID
    assert pbt.fetch_exploits(redis_client, sid) == []
