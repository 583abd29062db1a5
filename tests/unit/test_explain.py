"""Why a job waits, by table: each host gets "could run it" or the exact reason it cannot."""

import pytest

from fleet.ordering import demanding_first
from manifest.schema import HostPolicy, JobSpec, Needs
from routing.capability import Capability, CudaDevice
from routing.explain import HostFacts, explain, nearest, queue_facts, verdict
from routing.tiers import DEFAULT_TIERS, route


def cap(name, vram=(), ram=32.0, cores=8):
    return Capability(
        name, cores, ram, ram, tuple(CudaDevice(i, "gpu", v, v) for i, v in enumerate(vram))
    )


def job(**kw):
    needs = Needs(**{k: kw.pop(k) for k in list(kw) if k in Needs.__dataclass_fields__})
    return JobSpec(
        name=kw.pop("name", "j"), job_id="x" * 64, model=kw.pop("model", "gbt"), needs=needs, **kw
    )


def facts_for(j, hosts=None):
    hosts = hosts or {}
    r = route(j, DEFAULT_TIERS, hosts)
    cq = {r.queue: (r.tier, r.constraint)} if r.constraint else {}
    return queue_facts(r.queue, DEFAULT_TIERS, cq)


@pytest.mark.parametrize(
    "j, host, reasons",
    [
        (
            job(require_cuda=True, min_vram_gib=24),
            cap("a", vram=[16]),
            ["VRAM 16 < 24 GiB (largest device)"],
        ),
        (job(require_cuda=True, min_vram_gib=24), cap("a", vram=[80], ram=8), ["RAM 8 < 14 GiB"]),
        (job(require_cuda=True), cap("a"), ["no CUDA device"]),
        (job(min_cores=4), cap("a", cores=2), ["cores 2 < 4"]),
        (job(require_cuda=True, min_vram_gib=10), cap("a", vram=[16]), []),
        (job(allowed_hosts=("b",)), cap("a"), ["not in allowed_hosts"]),
        (job(denied_hosts=("a",)), cap("a"), ["in the job's denied_hosts"]),
        (job(), cap("a", ram=1, cores=0), ["RAM 1 < 2 GiB", "cores 0 < 1"]),
    ],
)
def test_each_host_gets_could_run_it_or_the_exact_reason_it_cannot(j, host, reasons):
    v = verdict(HostFacts(host), facts_for(j), j.model, None)
    assert (v.ok, list(v.reasons)) == (not reasons, reasons)


@pytest.mark.parametrize(
    "policy, reason",
    [
        (HostPolicy("a", deny_models=("mlp",)), "denied model mlp ([hosts.a] deny_models)"),
        (HostPolicy("a", allow_models=("gbt",)), "model mlp not in [hosts.a] allow_models"),
    ],
)
def test_a_host_policy_that_refuses_the_model_is_named(policy, reason):
    j = job(model="mlp")
    v = verdict(HostFacts(cap("a")), facts_for(j, {"a": policy}), "mlp", policy)
    assert v.reasons == (reason,)


def test_a_host_policy_that_leaves_out_the_tier_is_named():
    policy = HostPolicy("a", tiers=("cpu",))
    v = verdict(HostFacts(cap("a", vram=[80])), facts_for(job(require_cuda=True)), "gbt", policy)
    assert v.reasons == ("[hosts.a] tiers = ['cpu'] leaves out cuda",)


@pytest.mark.parametrize(
    "queues, asked, ok, reason",
    [
        (("cuda", "cpu"), (), True, None),
        (("cpu",), ("cpu",), False, "started with -Q cpu"),
        (("cpu",), (), False, "has not picked this queue up yet (workers look every 10 s)"),
        (None, (), True, None),  # at publish: capability decides
    ],
)
def test_what_a_live_host_consumes_decides_and_a_qualified_host_that_does_not_is_told_why(
    queues, asked, ok, reason
):
    v = verdict(
        HostFacts(cap("a", vram=[16]), queues, asked),
        facts_for(job(require_cuda=True)),
        "gbt",
        None,
    )
    assert v.ok == ok and (reason is None or v.reasons == (reason,))


def test_hosts_that_could_run_it_come_first_and_the_nearest_has_the_fewest_shortfalls():
    j = job(require_cuda=True, min_vram_gib=24)
    hosts = [
        HostFacts(cap("cpu", ram=8)),
        HostFacts(cap("small", vram=[16])),
        HostFacts(cap("big", vram=[80])),
    ]
    vs = explain(facts_for(j), j.model, hosts, {})
    assert [v.hostname for v in vs] == ["big", "cpu", "small"] and vs[0].ok
    assert nearest(vs[1:]).hostname == "small"


@pytest.mark.parametrize(
    "hosts, name",
    [
        # a GPU short of VRAM beats no GPU
        (
            [cap("cpu", ram=64, cores=64), cap("gpu", vram=[16])],
            "gpu",
        ),
        ([cap("a", vram=[16]), cap("b", vram=[40])], "b"),
        ([cap("a", vram=[80], ram=4), cap("b", vram=[40])], "b"),  # 36 GiB RAM short is further
    ],
)
def test_the_nearest_host_is_the_one_with_the_smallest_shortfall(hosts, name):
    j = job(require_cuda=True, min_vram_gib=48, min_ram_gib=40)
    assert nearest(explain(facts_for(j), "gbt", [HostFacts(h) for h in hosts], {})).hostname == name


def test_a_need_queue_is_explained_by_its_needs_not_its_tiers_floor():
    q = facts_for(job(require_cuda=True, min_vram_gib=10))
    assert (q.name, q.tier, q.needs) == ("cuda.vram10", "cuda", Needs(True, 10, 7, 0))
    assert verdict(HostFacts(cap("a", vram=[8])), q, "gbt", None).reasons == (
        "VRAM 8 < 10 GiB (largest device)",
    )


class Row:
    def __init__(self, j):
        self.job, self.queue = j, route(j, DEFAULT_TIERS, {}).queue


def test_publish_sends_the_most_demanding_queues_first_and_keeps_order_within_a_queue():
    rows = [
        Row(job(name="c1")),
        Row(job(name="g", require_cuda=True)),
        Row(job(name="c2")),
        Row(job(name="big", require_cuda=True, min_vram_gib=40)),
        Row(job(name="large", require_cuda=True, min_vram_gib=24)),
        Row(job(name="mid", require_cuda=True, min_vram_gib=10)),
        Row(job(name="r", min_ram_gib=4)),
    ]
    got = [r.job.name for r in demanding_first(rows, DEFAULT_TIERS, {})]
    assert got == ["big", "large", "mid", "g", "r", "c1", "c2"]
