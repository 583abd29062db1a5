"""Which running jobs an urgent job may displace (routing.preempt): pure, by example."""

from __future__ import annotations

from routing.pool import Demand, Pool, admit
from routing.preempt import (
    MAX_PREEMPTIONS,
    PREEMPT_GRACE_S,
    Running,
    Waiting,
    plan,
    reason,
    victims,
)


def host_running(*specs):
    """A 1-GPU 8-core host with jobs started in order: (job_id, priority, demand, handback)."""
    pool = Pool.of([80], cores=8, ram_gib=64)
    running = []
    for i, (job_id, prio, demand, handback, *more) in enumerate(specs):
        grant, pool = admit(pool, demand)
        running.append(Running(job_id, prio, grant, float(i), handback, *more))
    return pool, running


def test_an_urgent_gpu_job_displaces_a_low_priority_checkpointed_one():
    pool, running = host_running(("slow", 1, Demand(gpus=1), True))
    assert [r.job_id for r in victims(pool, 9, Demand(gpus=1), running)] == ["slow"]


def test_nothing_is_displaced_when_the_job_fits_already():
    pool, running = host_running(("cpu", 1, Demand(cores=2), True))
    assert victims(pool, 9, Demand(gpus=1), running) == []


def test_a_job_that_would_lose_work_is_never_displaced():
    pool, running = host_running(("no-ckpt", 1, Demand(gpus=1), False))
    assert victims(pool, 9, Demand(gpus=1), running) is None


def test_the_priority_gap_must_reach_the_margin():
    pool, running = host_running(("near", 7, Demand(gpus=1), True))
    assert victims(pool, 9, Demand(gpus=1), running) is None


def test_a_job_preempted_often_enough_runs_to_its_end():
    pool, running = host_running(("tired", 1, Demand(gpus=1), True, MAX_PREEMPTIONS))
    assert victims(pool, 9, Demand(gpus=1), running) is None


def test_only_the_jobs_needed_are_displaced_lowest_priority_first():
    pool, running = host_running(
        ("gpu", 2, Demand(gpus=1, cores=1), True),
        ("cpu-a", 1, Demand(cores=4), True),
        ("cpu-b", 3, Demand(cores=3), True),
    )
    # the urgent job needs the GPU: only the GPU job stands in its way
    assert [r.job_id for r in victims(pool, 9, Demand(gpus=1, cores=1), running)] == ["gpu"]


def test_a_gang_member_costs_its_gangs_hosts_so_a_one_host_job_of_equal_priority_goes_first():
    # equal priority, the gang started last (least progress): its 3 hosts' work still weighs more
    pool, running = host_running(
        ("single", 1, Demand(cores=3), True),
        ("gang", 1, Demand(cores=3), True, 0, 3),
    )
    assert [r.job_id for r in victims(pool, 9, Demand(cores=3), running)] == ["single"]


def test_a_gang_of_lower_priority_still_goes_before_a_higher_one_host_job():
    pool, running = host_running(
        ("single", 2, Demand(cores=3), True),
        ("gang", 1, Demand(cores=3), True, 0, 2),
    )
    assert [r.job_id for r in victims(pool, 9, Demand(cores=3), running)] == ["gang"]


def test_a_gang_chosen_on_the_way_is_spared_when_the_others_free_enough():
    # 7 cores for CPU jobs: the gang (lowest priority) frees 2, too few alone; the single
    # job's 5 are enough without it
    pool, running = host_running(
        ("gang", 1, Demand(cores=2), True, 0, 2),
        ("single", 2, Demand(cores=5), True),
    )
    assert [r.job_id for r in victims(pool, 9, Demand(cores=5), running)] == ["single"]


def test_a_gang_that_would_lose_work_is_never_displaced():
    pool, running = host_running(("gang", 1, Demand(cores=7), False, 0, 2))
    assert victims(pool, 9, Demand(cores=7), running) is None


def waiting(priority=9, demand=Demand(gpus=1), queued_at=0.0):
    return Waiting("urgent", "urgent-x", priority, demand, queued_at)


def test_an_urgent_job_displaces_nobody_before_its_grace_is_over():
    pool, running = host_running(("slow", 1, Demand(gpus=1), True))
    assert plan(pool, waiting(), running, now=PREEMPT_GRACE_S - 0.1) == []
    assert [r.job_id for r in plan(pool, waiting(), running, now=PREEMPT_GRACE_S)] == ["slow"]


def test_a_plan_is_empty_when_nobody_may_be_displaced_or_the_job_fits():
    pool, running = host_running(("no-ckpt", 1, Demand(gpus=1), False))
    assert plan(pool, waiting(), running, now=60) == []
    pool, running = host_running(("cpu", 1, Demand(cores=1), True))
    assert plan(pool, waiting(), running, now=60) == []


def test_the_displaced_job_is_told_who_took_its_place():
    assert reason(waiting()) == "preempted by urgent-x (priority 9)"
