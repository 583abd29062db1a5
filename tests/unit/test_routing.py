"""Routing decisions, by table: job -> queue, and capability + policy -> queues."""
import pytest

from manifest.schema import HostPolicy, JobSpec, Needs, TierSpec
from routing.capability import Capability, CudaDevice, apply_override, parse_override, restrict
from routing.tiers import DEFAULT_TIERS, Constraint, host_queues, route, tier_for
from fleet.errors import CapabilityError


def cap(vram=(), ram=32.0, cores=8, name="h"):
    return Capability(name, cores, ram, ram, tuple(CudaDevice(i, "gpu", v, v) for i, v in enumerate(vram)))


def job(**kw):
    needs = Needs(**{k: kw.pop(k) for k in list(kw) if k in Needs.__dataclass_fields__})
    return JobSpec(name=kw.pop("name", "j"), job_id="x" * 64, model="gbt", needs=needs, **kw)


@pytest.mark.parametrize("needs, tier", [
    (Needs(), "cpu"),
    (Needs(min_ram_gib=2), "cpu"),
    (Needs(min_ram_gib=4), "cuda"),           # only the cuda floors guarantee 4 GiB RAM
    (Needs(require_cuda=True), "cuda"),
    (Needs(require_cuda=True, min_vram_gib=8), "cuda"),
    (Needs(require_cuda=True, min_vram_gib=12), "cuda-large"),
    (Needs(require_cuda=True, min_vram_gib=24), "cuda-large"),
    (Needs(require_cuda=True, min_vram_gib=25), None),
    (Needs(min_cores=4), None),
    (Needs(min_ram_gib=14), "cuda-large"),
])
def test_a_job_goes_to_the_least_demanding_tier_that_guarantees_its_needs(needs, tier):
    got = tier_for(needs, DEFAULT_TIERS)
    assert (got.name if got else None) == tier


@pytest.mark.parametrize("capability, queues", [
    (cap(), ["cpu"]),
    (cap(vram=[8]), ["cuda", "cpu"]),
    (cap(vram=[6]), ["cpu"]),
    (cap(vram=[8, 80]), ["cuda-large", "cuda", "cpu"]),
    (cap(vram=[80], ram=12), ["cuda", "cpu"]),      # RAM floor of cuda-large is 14 GiB
    (cap(vram=[24], ram=15.5), ["cuda-large", "cuda", "cpu"]),   # a "16 GB" home machine
    (cap(ram=1), []),
])
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


def test_a_prefer_cuda_vram_need_picks_its_gpu_tier_and_still_falls_back_to_cpu():
    r = route(job(prefer_cuda=True, min_vram_gib=12), DEFAULT_TIERS, {})
    assert (r.queue, r.fallback_queue) == ("cuda-large", "cpu")


def test_custom_tiers_follow_the_same_rules():
    tiers = (TierSpec("big-ram", Needs(min_ram_gib=128)), TierSpec("small", Needs(min_ram_gib=1)))
    assert route(job(min_ram_gib=64), tiers, {}).queue == "big-ram"
    assert host_queues(cap(ram=256), tiers, None) == ["big-ram", "small"]


def test_constraint_round_trips_through_json():
    c = Constraint(frozenset({"a"}), frozenset({"b"}))
    assert Constraint.from_dict(c.to_dict()) == c


def test_fleet_capability_replaces_only_the_keys_it_gives():
    c = apply_override(cap(vram=[8]), parse_override('{"cuda_devices": [{"name": "x", "vram_total_gib": 40}]}'))
    assert c.max_vram_gib == 40 and c.ram_total_gib == 32 and c.overridden == ("cuda_devices",)


def test_fleet_capability_with_an_unknown_key_names_the_known_ones():
    with pytest.raises(CapabilityError, match="unknown key.*vram.*known keys"):
        parse_override('{"vram": 3}')


def test_declared_capability_is_more_restrictive_when_it_is_lower():
    c = restrict(cap(vram=[80], ram=64), {"ram_total_gib": 16, "cuda_devices": [{"vram_total_gib": 24}]})
    assert c.ram_total_gib == 16 and c.max_vram_gib == 24
    assert restrict(cap(ram=8), {"ram_total_gib": 64}).ram_total_gib == 8


def test_q_keeps_only_those_tiers_and_their_constraint_queues_that_admit_the_host():
    from fleet.cluster import ClusterConfig
    admits_h = Constraint(frozenset({"h"}), frozenset())
    config = ClusterConfig(constraint_queues={"cpu.abc": ("cpu", admits_h), "cuda.def": ("cuda", admits_h)})
    host = cap(vram=[80])
    assert config.queues(host) == ["cuda-large", "cuda.def", "cuda", "cpu.abc", "cpu"]
    assert config.queues(host, only=("cpu",)) == ["cpu.abc", "cpu"]


@pytest.mark.parametrize("override, names", [
    ('{"cpu_cores": "many"}', "cpu_cores"),
    ('{"ram_total_gib": -1}', "ram_total_gib"),
    ('{"cuda_devices": 3}', "cuda_devices"),
])
def test_a_bad_capability_override_value_names_the_variable_and_the_key(override, names):
    with pytest.raises(CapabilityError, match=f"FLEET_CAPABILITY: {names}"):
        apply_override(cap(), parse_override(override))


def test_overriding_total_ram_alone_caps_available_ram():
    c = apply_override(cap(ram=64), parse_override('{"ram_total_gib": 8}'))
    assert (c.ram_total_gib, c.ram_available_gib) == (8, 8)
