"""Routing a sweep once per distinct routing input gives what routing each job gives."""

from fleet.manifests import loads
from fleet.route_cache import KEY_FIELDS, RouteCache
from routing import tiers as routing

MANIFEST = """
[hosts.lab]
deny_models = ["mlp"]

[[jobs]]
name = "cmd"
command = ["true"]
allowed_hosts = ["lab", "other"]
[jobs.sweep]
seed = [0, 1, 2]

[[jobs]]
name = "pref"
command = ["true"]
prefer_cuda = true
min_vram_gib = 10
[jobs.sweep]
seed = [0, 1]

[[jobs]]
name = "big"
command = ["true"]
require_cuda = true
min_vram_gib = 20
"""


def test_each_job_gets_the_route_routing_gives_it():
    m = loads(MANIFEST, "m.toml")
    cache = RouteCache(m)
    assert [cache(j) for j in m.jobs] == [routing.route(j, m.tiers, m.hosts) for j in m.jobs]


def test_sweep_points_share_one_routing_computation():
    m = loads(MANIFEST, "m.toml")
    cache = RouteCache(m)
    for j in m.jobs:
        cache(j)
    assert len(cache._routes) == 3


def test_every_field_but_the_sweep_varying_ones_is_part_of_the_key():
    assert {"needs", "prefer_cuda", "model", "allowed_hosts", "denied_hosts"} <= set(KEY_FIELDS)
    assert not {"name", "job_id", "hyper", "seed"} & set(KEY_FIELDS)
