"""The pure parts of fair-share serving: owner list keys, the worker's order, standings,
the half-life setting and `fleet share list`'s table."""

import pytest

from core.errors import ConfigError
from core.registry import FLEET_FAIRSHARE_HALF_LIFE_S
from routing.fairshare import HALF_LIFE_S
from state import fairshare, queues
from tasks.fairorder import ranked

H = 3600.0


@pytest.mark.parametrize(
    "key, queue, owner, pri",
    [
        ("cpu", "cpu", None, 0),
        ("cpu\x06\x164", "cpu", None, 4),
        ("cuda.vram40\x06\x17alice@lab3\x06\x160", "cuda.vram40", "alice@lab3", 0),
        ("cpu.h-1a2b\x06\x17bob\x06\x169", "cpu.h-1a2b", "bob", 9),
    ],
)
def test_a_list_key_reads_back_as_its_queue_owner_and_priority(key, queue, owner, pri):
    assert queues.parse(key) == queues.ListKey(queue, owner, pri)
    assert queues.owner_key(queue, owner, pri) == key
    assert queues.queue_of(key) == queue


def test_a_queue_is_served_plain_lists_first_then_each_owner_by_priority():
    keys = queues.keys_of("cpu", ["bob", "alice"], steps=(0, 1))
    assert keys == [
        "cpu",
        "cpu\x06\x161",
        "cpu\x06\x17bob\x06\x160",
        "cpu\x06\x17bob\x06\x161",
        "cpu\x06\x17alice\x06\x160",
        "cpu\x06\x17alice\x06\x161",
    ]


def test_owner_list_members_group_by_queue():
    members = ["cpu\x06\x17alice", "cuda\x06\x17bob", "cpu\x06\x17bob", "junk"]
    assert queues.owners_by_queue(members) == {"cpu": ["alice", "bob"], "cuda": ["bob"]}


def test_the_worker_orders_each_queues_owners_least_used_per_share_first():
    usage = {"alice": fairshare.OwnerUsage(41 * H, 0, 0), "bob": fairshare.OwnerUsage(2 * H, 0, 0)}
    live = {"cpu": ["alice", "bob", "carol"], "cuda": ["alice"]}
    assert ranked(live, usage, {}, 0, HALF_LIFE_S) == {
        "cpu": ["carol", "bob", "alice"],
        "cuda": ["alice"],
    }
    assert ranked(live, usage, {"alice": 100}, 0, HALF_LIFE_S)["cpu"] == ["carol", "alice", "bob"]


def test_core_hours_weigh_a_sixteenth_of_a_gpu_hour_in_the_standing():
    usage = {"cpus": fairshare.OwnerUsage(0, 32 * H, 0), "gpu": fairshare.OwnerUsage(3 * H, 0, 0)}
    rows = fairshare.standings(usage, {}, 0, HALF_LIFE_S, {"new"})
    assert [r.owner for r in rows] == ["new", "cpus", "gpu"]
    assert rows[1].standing == pytest.approx(2.0) and rows[1].core_hours == pytest.approx(32)


def test_decayed_usage_halves_every_half_life():
    u = fairshare.OwnerUsage(4 * H, 16 * H, 100.0).decayed(100.0 + 2 * HALF_LIFE_S, HALF_LIFE_S)
    assert (u.gpu_s, u.core_s) == pytest.approx((H, 4 * H))


def test_stored_usage_parses_and_a_garbled_entry_counts_nothing():
    assert fairshare.parse_usage("7200 3600 1700000000.5") == fairshare.OwnerUsage(
        7200, 3600, 1700000000.5
    )
    assert fairshare.parse_usage("nonsense") == fairshare.OwnerUsage()


@pytest.mark.parametrize("raw, want", [("", HALF_LIFE_S), ("3600", 3600.0), (" 86400 ", 86400.0)])
def test_the_half_life_comes_from_the_environment(raw, want):
    assert fairshare.half_life_s({FLEET_FAIRSHARE_HALF_LIFE_S.name: raw}) == want


@pytest.mark.parametrize("raw", ["0", "-5", "week"])
def test_a_bad_half_life_names_the_variable_and_the_fix(raw):
    with pytest.raises(
        ConfigError, match="FLEET_FAIRSHARE_HALF_LIFE_S=.*: expected a number of seconds > 0"
    ):
        fairshare.half_life_s({FLEET_FAIRSHARE_HALF_LIFE_S.name: raw})


@pytest.mark.parametrize("weight", [0, -1, 1e7])
def test_a_share_must_be_a_positive_weight(weight):
    with pytest.raises(ConfigError, match="positive weight"):
        fairshare.validate_share(weight)


def test_share_list_fits_80_columns_with_long_owner_names():
    from fleet.cli.share import SHARES, cells
    from fleet.query.shares import ShareRow

    rows = [
        cells(
            ShareRow(
                fairshare.Standing(
                    f"student{i}@lab-machine-{i}.example.org", 1.0, 1234.5 * i, 99999.0, 1234.5 * i
                ),
                12345,
            )
        )
        for i in range(5)
    ]
    widths = SHARES.fit(SHARES.natural(rows), 80)
    assert {"owner", "share", "GPU-h", "standing"} <= set(widths)
    assert sum(widths.values()) + 3 * (len(widths) - 1) <= 80
