"""Routing decisions, by table: job -> queue, and capability + policy -> queues."""

import pytest

from core.errors import CapabilityError
from manifest.schema import HostPolicy, JobSpec, Needs, TierSpec
from routing.capability import Capability, CudaDevice, apply_override, parse_override, restrict
from routing.tiers import DEFAULT_TIERS, Constraint, host_queues, route, tier_for


def cap(vram=(), ram=32.0, cores=8, name="h"):
    return Capability(
        name, cores, ram, ram, tuple(CudaDevice(i, "gpu", v, v) for i, v in enumerate(vram))
    )


def job(**kw):
    needs = Needs(**{k: kw.pop(k) for k in list(kw) if k in Needs.__dataclass_fields__})
    return JobSpec(name=kw.pop("name", "j"), job_id="x" * 64, model="gbt", needs=needs, **kw)


@pytest.mark.parametrize(
    "needs, tier",
    [
        (Needs(), "cpu"),
        (Needs(min_ram_gib=2), "cpu"),
        (Needs(min_ram_gib=4), "cuda"),  # only the cuda floors guarantee 4 GiB RAM
        (Needs(require_cuda=True), "cuda"),
        (Needs(require_cuda=True, min_vram_gib=8), "cuda"),
        (Needs(require_cuda=True, min_vram_gib=12), "cuda-large"),
        (Needs(require_cuda=True, min_vram_gib=24), "cuda-large"),
        (Needs(require_cuda=True, min_vram_gib=25), None),
        (Needs(min_cores=4), None),
        (Needs(min_ram_gib=14), "cuda-large"),
    ],
)
def test_a_job_goes_to_the_least_demanding_tier_that_guarantees_its_needs(needs, tier):
    got = tier_for(needs, DEFAULT_TIERS)
    assert (got.name if got else None) == tier


@pytest.mark.parametrize(
    "capability, queues",
    [
        (cap(), ["cpu"]),
        (cap(vram=[8]), ["cuda", "cpu"]),
        (cap(vram=[6]), ["cpu"]),
        (cap(vram=[8, 80]), ["cuda-large", "cuda", "cpu"]),
        (cap(vram=[80], ram=12), ["cuda", "cpu"]),  # RAM floor of cuda-large is 14 GiB
        (cap(vram=[24], ram=15.5), ["cuda-large", "cuda", "cpu"]),  # a "16 GB" home machine
        (cap(ram=1), []),
    ],
)
def test_a_host_serves_every_tier_it_qualifies_for_most_demanding_first(capability, queues):
    assert host_queues(capability, DEFAULT_TIERS, None) == queues


def test_a_host_policy_limits_the_tiers_it_serves():
    policy = HostPolicy("h", tiers=("cpu",))
    assert host_queues(cap(vram=[80]), DEFAULT_TIERS, policy) == ["cpu"]


def test_allowed_hosts_route_to_a_constraint_queue_only_those_hosts_consume():
    r = route(job(allowed_hosts=("a",)), DEFAULT_TIERS, {})
    assert r.queue.startswith("cpu.") and r.constraint.admits("a") and not r.constraint.admits("b")
    cq = {r.queue: ("cpu", r.constraint)}
    assert host_queues(cap(name="a"), DEFAULT_TIERS, None, cq) == [r.queue, "cpu"]
    assert host_queues(cap(name="b"), DEFAULT_TIERS, None, cq) == ["cpu"]


def test_a_host_that_denies_a_model_never_consumes_that_models_queue():
    hosts = {"b": HostPolicy("b", deny_models=("gbt",))}
    r = route(job(), DEFAULT_TIERS, hosts)
    assert r.queue != "cpu" and not r.constraint.admits("b") and r.constraint.admits("c")


def test_a_job_without_constraints_keeps_the_plain_tier_queue():
    assert route(job(), DEFAULT_TIERS, {"b": HostPolicy("b", allow_models=("gbt",))}).queue == "cpu"


def test_prefer_cuda_waits_on_a_cuda_tier_and_falls_back_to_cpu():
    r = route(job(prefer_cuda=True), DEFAULT_TIERS, {})
    assert (r.queue, r.fallback_queue) == ("cuda", "cpu")


def test_a_prefer_cuda_vram_need_picks_its_gpu_need_queue_and_still_falls_back_to_cpu():
    r = route(job(prefer_cuda=True, min_vram_gib=12), DEFAULT_TIERS, {})
    assert (r.queue, r.fallback_queue) == ("cuda.vram12", "cpu")


def test_custom_tiers_follow_the_same_rules():
    tiers = (TierSpec("big-ram", Needs(min_ram_gib=128)), TierSpec("small", Needs(min_ram_gib=1)))
    assert route(job(min_ram_gib=128), tiers, {}).queue == "big-ram"
    assert route(job(min_ram_gib=64), tiers, {}).queue == "small.ram64"
    assert host_queues(cap(ram=256), tiers, None) == ["big-ram", "small"]


def test_constraint_round_trips_through_json():
    c = Constraint(frozenset({"a"}), frozenset({"b"}))
    assert Constraint.from_dict(c.to_dict()) == c


def test_fleet_capability_replaces_only_the_keys_it_gives():
    c = apply_override(
        cap(vram=[8]), parse_override('{"cuda_devices": [{"name": "x", "vram_total_gib": 40}]}')
    )
    assert c.max_vram_gib == 40 and c.ram_total_gib == 32 and c.overridden == ("cuda_devices",)


def test_fleet_capability_with_an_unknown_key_names_the_known_ones():
    with pytest.raises(CapabilityError, match="unknown key.*vram.*known keys"):
        parse_override('{"vram": 3}')


def test_declared_capability_is_more_restrictive_when_it_is_lower():
    c = restrict(
        cap(vram=[80], ram=64), {"ram_total_gib": 16, "cuda_devices": [{"vram_total_gib": 24}]}
    )
    assert c.ram_total_gib == 16 and c.max_vram_gib == 24
    assert restrict(cap(ram=8), {"ram_total_gib": 64}).ram_total_gib == 8


def test_q_keeps_only_those_tiers_and_their_constraint_queues_that_admit_the_host():
    from state.cluster import ClusterConfig

    admits_h = Constraint(frozenset({"h"}), frozenset())
    config = ClusterConfig(
        constraint_queues={"cpu.abc": ("cpu", admits_h), "cuda.def": ("cuda", admits_h)}
    )
    host = cap(vram=[80])
    assert config.queues(host) == ["cuda-large", "cuda.def", "cuda", "cpu.abc", "cpu"]
    assert config.queues(host, only=("cpu",)) == ["cpu.abc", "cpu"]


@pytest.mark.parametrize(
    "override, names",
    [
        ('{"cpu_cores": "many"}', "cpu_cores"),
        ('{"ram_total_gib": -1}', "ram_total_gib"),
        ('{"cuda_devices": 3}', "cuda_devices"),
    ],
)
def test_a_bad_capability_override_value_names_the_variable_and_the_key(override, names):
    with pytest.raises(CapabilityError, match=f"FLEET_CAPABILITY: {names}"):
        apply_override(cap(), parse_override(override))


def test_overriding_total_ram_alone_caps_available_ram():
    c = apply_override(cap(ram=64), parse_override('{"ram_total_gib": 8}'))
    assert (c.ram_total_gib, c.ram_available_gib) == (8, 8)


# --- need queues --------------------------------------------------------------

CUDA = dict(require_cuda=True)


@pytest.mark.parametrize(
    "needs, queue",
    [
        (dict(), "cpu"),
        (dict(min_ram_gib=2), "cpu"),  # the floor states it: plain tier queue
        (dict(min_ram_gib=4), "cpu.ram4"),  # not the cuda tier any more
        (dict(min_cores=4), "cpu.cores4"),
        (dict(min_ram_gib=20, min_cores=8), "cpu.ram20.cores8"),
        (dict(**CUDA), "cuda"),
        (dict(**CUDA, min_vram_gib=4), "cuda"),  # below the floor: the floor guarantees it
        (dict(**CUDA, min_vram_gib=8), "cuda"),
        (dict(**CUDA, min_vram_gib=10), "cuda.vram10"),  # the 16 GiB host can take it
        (dict(**CUDA, min_vram_gib=15.5), "cuda.vram15.5"),
        (dict(**CUDA, min_vram_gib=24), "cuda-large"),  # cuda-large's floor is what it states
        (dict(**CUDA, min_vram_gib=24, min_ram_gib=14), "cuda-large"),
        # a 24 GiB, 12 GiB RAM host fits
        (
            dict(**CUDA, min_vram_gib=24, min_ram_gib=8),
            "cuda.vram24.ram8",
        ),
        (dict(**CUDA, min_vram_gib=24, min_ram_gib=32), "cuda-large.ram32"),
        (dict(**CUDA, min_vram_gib=40), "cuda.vram40"),
        (dict(min_vram_gib=10), "cuda.vram10"),  # VRAM implies CUDA
        (dict(**CUDA, min_cores=4), "cuda.cores4"),
    ],
)
def test_a_job_whose_needs_exceed_its_tiers_floor_goes_to_a_need_queue_named_by_them(needs, queue):
    assert route(job(**needs), DEFAULT_TIERS, {}).queue == queue


def test_a_need_queue_carries_the_needs_raised_to_its_tiers_floor():
    r = route(job(**CUDA, min_vram_gib=10), DEFAULT_TIERS, {})
    assert r.tier == "cuda" and r.constraint.needs == Needs(True, 10, 7, 0)
    assert r.constraint.allowed is None and not r.constraint.denied


def test_needs_and_a_host_constraint_make_a_readable_name_with_a_digest():
    r = route(job(**CUDA, min_vram_gib=10, denied_hosts=("b",)), DEFAULT_TIERS, {})
    assert r.queue.startswith("cuda.vram10.") and len(r.queue.split(".")[-1]) == 10
    other = route(job(**CUDA, min_vram_gib=12, denied_hosts=("b",)), DEFAULT_TIERS, {})
    assert other.queue.split(".")[-1] != r.queue.split(".")[-1]  # the needs are in the digest


def test_a_constraint_with_needs_round_trips_through_json_and_host_only_digests_do_not_change():
    c = Constraint(None, frozenset(), Needs(True, 10, 7, 0))
    assert Constraint.from_dict(c.to_dict()) == c
    host_only = Constraint(frozenset({"a"}), frozenset())
    assert "needs" not in host_only.to_dict()


def test_a_cuda_job_with_no_cuda_tier_has_no_route():
    assert route(job(**CUDA), (TierSpec("cpu", Needs(min_ram_gib=1)),), {}) is None


def test_a_cpu_job_with_only_gpu_tiers_runs_on_them():
    tiers = (TierSpec("gpu", Needs(require_cuda=True, min_vram_gib=8)),)
    assert route(job(), tiers, {}).queue == "gpu"
    assert route(job(min_ram_gib=16), tiers, {}).queue == "gpu.ram16"


def test_a_prefer_cuda_job_with_more_ram_than_the_cpu_floor_falls_back_to_a_cpu_need_queue():
    r = route(job(prefer_cuda=True, min_ram_gib=4), DEFAULT_TIERS, {})
    assert (r.queue, r.fallback_queue) == ("cuda", "cpu.ram4")


def _need_queues(*needs: dict) -> dict:
    out = {}
    for n in needs:
        r = route(job(**n), DEFAULT_TIERS, {})
        out[r.queue] = (r.tier, r.constraint)
    return out


NEED_QUEUES = _need_queues(
    dict(**CUDA, min_vram_gib=10),
    dict(**CUDA, min_vram_gib=40),
    dict(**CUDA, min_vram_gib=24, min_ram_gib=32),
    dict(min_ram_gib=4),
    dict(min_ram_gib=20, min_cores=8),
)


@pytest.mark.parametrize(
    "capability, queues",
    [
        (
            cap(vram=[80], ram=64, cores=16),
            [
                "cuda.vram40",
                "cuda-large.ram32",
                "cuda-large",
                "cuda.vram10",
                "cuda",
                "cpu.ram20.cores8",
                "cpu.ram4",
                "cpu",
            ],
        ),
        (
            cap(vram=[24], ram=32, cores=8),
            [
                "cuda-large.ram32",
                "cuda-large",
                "cuda.vram10",
                "cuda",
                "cpu.ram20.cores8",
                "cpu.ram4",
                "cpu",
            ],
        ),
        (
            cap(vram=[16], ram=32, cores=8),
            ["cuda.vram10", "cuda", "cpu.ram20.cores8", "cpu.ram4", "cpu"],
        ),
        (cap(vram=[8], ram=16, cores=4), ["cuda", "cpu.ram4", "cpu"]),
        # one device must fit
        (
            cap(vram=[8, 16], ram=16),
            ["cuda.vram10", "cuda", "cpu.ram4", "cpu"],
        ),
        (cap(ram=8, cores=2), ["cpu.ram4", "cpu"]),
        (cap(ram=3, cores=2), ["cpu"]),
    ],
)
def test_a_host_consumes_the_need_queues_it_meets_most_demanding_first(capability, queues):
    assert host_queues(capability, DEFAULT_TIERS, None, NEED_QUEUES) == queues


def test_a_host_policy_that_leaves_out_a_tier_leaves_out_its_need_queues_too():
    policy = HostPolicy("h", tiers=("cpu",))
    assert host_queues(cap(vram=[80]), DEFAULT_TIERS, policy, NEED_QUEUES) == [
        "cpu.ram20.cores8",
        "cpu.ram4",
        "cpu",
    ]


def test_a_need_queue_with_a_host_constraint_admits_only_hosts_meeting_both():
    r = route(job(**CUDA, min_vram_gib=10, allowed_hosts=("a",)), DEFAULT_TIERS, {})
    cq = {r.queue: (r.tier, r.constraint)}
    assert r.queue in host_queues(cap(vram=[16], name="a"), DEFAULT_TIERS, None, cq)
    assert r.queue not in host_queues(cap(vram=[16], name="b"), DEFAULT_TIERS, None, cq)
    assert r.queue not in host_queues(cap(vram=[8], name="a"), DEFAULT_TIERS, None, cq)
