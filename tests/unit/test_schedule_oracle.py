"""The scheduling bench's yardsticks, by example: greedy oracle, lower bound, capable-idle."""

import pytest

from bench.oracle import (
    Host,
    Job,
    Run,
    capable_hosts,
    capable_idle,
    greedy,
    length,
    lower_bound,
    makespan,
    merge,
    minus,
)
from manifest.schema import Needs

BIG = Host("big", vram_gib=80, ram_gib=64)
MID = Host("mid", vram_gib=24, ram_gib=32)
SMALL = Host("small", vram_gib=16, ram_gib=32)
CPU = Host("cpu", ram_gib=8)
HOSTS = [BIG, MID, SMALL, CPU]

ANY = Needs()
GPU = Needs(require_cuda=True)
V10 = Needs(require_cuda=True, min_vram_gib=10)
V40 = Needs(require_cuda=True, min_vram_gib=40)
RAM16 = Needs(min_ram_gib=16)


@pytest.mark.parametrize(
    "needs, hosts",
    [
        (ANY, {"big", "mid", "small", "cpu"}),
        (GPU, {"big", "mid", "small"}),
        (V10, {"big", "mid", "small"}),
        (V40, {"big"}),
        (RAM16, {"big", "mid", "small"}),
    ],
)
def test_a_host_can_run_a_job_when_its_hardware_meets_every_need(needs, hosts):
    assert capable_hosts(needs, HOSTS) == hosts


def test_the_oracle_places_the_longest_job_first_on_the_least_capable_host_that_fits():
    jobs = [Job("short", 1, ANY), Job("long", 5, ANY), Job("gpu", 3, GPU)]
    placed = {p.job: (p.host, p.start, p.end) for p in greedy(jobs, HOSTS)}
    assert placed == {"long": ("cpu", 0, 5), "gpu": ("small", 0, 3), "short": ("mid", 0, 1)}


def test_the_oracle_keeps_a_job_that_only_one_host_can_run_off_the_others():
    jobs = [Job("xl", 4, V40), Job("a", 4, ANY), Job("b", 4, ANY)]
    placed = {p.job: p.host for p in greedy(jobs, [BIG, CPU])}
    assert placed["xl"] == "big" and makespan(greedy(jobs, [BIG, CPU])) == 8


def test_the_oracle_queues_behind_the_only_capable_host():
    jobs = [Job(f"xl{i}", 2, V40) for i in range(3)] + [Job("c", 1, ANY)]
    placements = greedy(jobs, [BIG, CPU])
    assert makespan(placements) == 6
    assert {p.job: p.host for p in placements}["c"] == "cpu"


def test_the_oracle_refuses_a_job_no_host_can_run():
    with pytest.raises(ValueError, match="no host can run xl"):
        greedy([Job("xl", 1, V40)], [CPU])


@pytest.mark.parametrize(
    "jobs, hosts, bound",
    [
        ([Job("a", 3, ANY)], HOSTS, 3),  # the longest job
        ([Job(f"j{i}", 2, ANY) for i in range(8)], HOSTS, 4),  # all work over all hosts
        # only big runs x
        (
            [Job(f"x{i}", 2, V40) for i in range(3)] + [Job("c", 1, ANY)],
            HOSTS,
            6,
        ),
        (
            [Job(f"g{i}", 3, GPU) for i in range(3)] + [Job(f"c{i}", 1, ANY) for i in range(3)],
            HOSTS,
            3,
        ),
        ([], HOSTS, 0),
    ],
)
def test_the_lower_bound_is_the_tightest_of_longest_job_and_work_per_capable_set(
    jobs, hosts, bound
):
    assert lower_bound(jobs, hosts) == pytest.approx(bound)


def test_the_lower_bound_never_exceeds_the_oracle():
    jobs = [Job(f"j{i}", 1 + i % 5, [ANY, GPU, V10, V40, RAM16][i % 5]) for i in range(23)]
    assert lower_bound(jobs, HOSTS) <= makespan(greedy(jobs, HOSTS))


@pytest.mark.parametrize(
    "intervals, merged",
    [
        ([(0, 1), (1, 2)], [(0, 2)]),
        ([(3, 4), (0, 2), (1, 3)], [(0, 4)]),
        ([(0, 1), (2, 3), (5, 5)], [(0, 1), (2, 3)]),
    ],
)
def test_intervals_merge_into_a_disjoint_union(intervals, merged):
    assert merge(intervals) == merged


@pytest.mark.parametrize(
    "intervals, holes, left",
    [
        ([(0, 10)], [(2, 3), (5, 7)], [(0, 2), (3, 5), (7, 10)]),
        ([(0, 10)], [(-1, 11)], []),
        ([(0, 2), (4, 6)], [(1, 5)], [(0, 1), (5, 6)]),
        ([(0, 2)], [], [(0, 2)]),
    ],
)
def test_holes_are_cut_out_of_intervals(intervals, holes, left):
    assert minus(intervals, holes) == left


def test_an_idle_host_counts_capable_idle_only_while_a_job_it_could_run_waits():
    both, cpu_only = frozenset({"gpu", "cpu"}), frozenset({"cpu"})
    runs = [
        Run("a", "gpu", queued=0, started=0, finished=4, capable=both),
        # waited 4 s; cpu idle all along
        Run("b", "gpu", queued=0, started=4, finished=6, capable=both),
        Run("c", "cpu", queued=5, started=5, finished=6, capable=cpu_only),  # queued late: no wait
    ]
    idle = capable_idle(runs, ["gpu", "cpu"])
    assert idle == {"gpu": 0.0, "cpu": 4.0}


def test_a_busy_host_is_not_idle_however_long_the_queue():
    runs = [Run("a", "h", 0, 0, 10, frozenset({"h"})), Run("b", "h", 0, 10, 12, frozenset({"h"}))]
    assert capable_idle(runs, ["h"]) == {"h": 0.0}
    assert length([(0, 1), (0.5, 2)]) == 2


def test_a_workload_seed_replays_the_same_jobs_as_a_valid_manifest():
    from bench.schedule import HOSTS as FLEET
    from bench.schedule import manifest_text, workload
    from fleet.manifests import loads

    jobs = workload(7, 30)
    assert jobs == workload(7, 30) and jobs != workload(8, 30) and len(jobs) == 30
    manifest = loads(manifest_text(jobs, 7), "m.toml")
    assert [j.name for j in manifest.jobs] == [j.name for _, j in jobs]
    assert all(capable_hosts(j.needs, FLEET) for _, j in jobs)
