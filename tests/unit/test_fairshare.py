"""Fair-share order between owners (routing.fairshare): pure, by example."""

from __future__ import annotations

import pytest

from routing.fairshare import HALF_LIFE_S, Usage, charge, explain, order

DAY = 86400.0


def test_usage_halves_every_half_life():
    u = Usage(8.0, at=0.0)
    assert u.decayed(HALF_LIFE_S) == pytest.approx(4.0)
    assert u.decayed(3 * HALF_LIFE_S) == pytest.approx(1.0)


def test_adding_decays_what_was_there_first():
    u = Usage(8.0, at=0.0).add(1.0, now=HALF_LIFE_S)
    assert u == Usage(pytest.approx(5.0), HALF_LIFE_S)


def test_the_least_used_owner_goes_first():
    owners = {"alice": Usage(2.0, 0), "bob": Usage(41.0, 0)}
    assert order(owners, {}, now=0) == ["alice", "bob"]


def test_a_bigger_share_lets_an_owner_use_more_before_yielding():
    owners = {"alice": Usage(10.0, 0), "bob": Usage(30.0, 0)}
    assert order(owners, {"bob": 4.0}, now=0) == ["bob", "alice"]


def test_old_usage_stops_counting_against_an_owner():
    owners = {"alice": Usage(100.0, at=0), "bob": Usage(10.0, at=60 * DAY)}
    assert order(owners, {}, now=60 * DAY) == ["alice", "bob"]


def test_why_says_who_goes_first_and_by_how_much():
    owners = {"alice": Usage(2.0, 0), "bob": Usage(41.0, 0)}
    assert explain("bob", owners, {}, now=0) == (
        "bob has used 41.0 GPU-h (half-life 7 d); alice 2.0 GPU-h: alice's jobs go first"
    )
    assert explain("alice", owners, {}, now=0) is None


def test_a_run_is_charged_in_gpu_hours_with_cores_weighted():
    assert charge(gpu_s=3600, core_s=0) == 1.0
    assert charge(gpu_s=0, core_s=16 * 3600) == 1.0


def test_a_few_minutes_of_gpu_time_is_not_shown_as_nothing():
    owners = {"bob": Usage(0.05, 0), "alice": Usage(0.0, 0)}
    assert explain("bob", owners, {}, now=0).startswith(
        "bob has used 0.050 GPU-h (half-life 7 d); alice 0.0 GPU-h"
    )
