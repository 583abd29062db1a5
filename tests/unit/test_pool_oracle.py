"""The multi-resource oracle and capable-idle measure the benchmark reports.

The code under test: bench/pool_oracle.py.
"""

from __future__ import annotations

import pytest

from bench.pool_oracle import PoolHost, PoolJob, PoolRun, capable_idle, greedy, makespan
from routing.pool import Demand

GPU4 = PoolHost("gpu4", gpus=(24, 24, 24, 24), cores=32, ram_gib=128)
CPU8 = PoolHost("cpu8", cores=8, ram_gib=32)


def test_the_oracle_runs_gpu_and_cpu_jobs_side_by_side_on_one_host():
    jobs = [PoolJob("gpu", 20, Demand(gpus=1))] + [
        PoolJob(f"cpu{i}", 3, Demand(cores=2)) for i in range(6)
    ]
    plan = greedy(jobs, [GPU4])
    assert makespan(plan) == 20
    assert all(p.start == 0 for p in plan)


def test_the_oracle_waits_for_room_and_never_oversubscribes():
    jobs = [PoolJob(f"big{i}", 10, Demand(gpus=3)) for i in range(2)]
    plan = greedy(jobs, [GPU4])
    assert sorted(p.start for p in plan) == [0, 10]
    assert makespan(plan) == 20


def test_the_oracle_puts_a_job_on_the_least_capable_host_it_fits():
    plan = greedy([PoolJob("cpu", 5, Demand(cores=2))], [GPU4, CPU8])
    assert plan[0].host == "cpu8"


def test_a_job_no_host_can_ever_run_is_an_error():
    with pytest.raises(ValueError, match="no host can run wide"):
        greedy([PoolJob("wide", 1, Demand(gpus=8))], [GPU4])


def test_capable_idle_counts_idle_gpus_and_free_cores_while_a_fitting_job_waited():
    # waited 10 s beside 6 free cores
    runs = [
        PoolRun("a", "cpu8", 0, 0, 10, Demand(cores=2)),
        PoolRun("b", "cpu8", 0, 10, 12, Demand(cores=2)),
    ]
    idle = capable_idle(runs, [CPU8])
    assert idle["cpu8"] == (0.0, 60.0)


def test_no_capable_idle_when_the_waiting_job_did_not_fit():
    runs = [
        PoolRun("a", "cpu8", 0, 0, 10, Demand(cores=8)),
        PoolRun("b", "cpu8", 0, 10, 12, Demand(cores=2)),
    ]
    assert capable_idle(runs, [CPU8])["cpu8"] == (0.0, 0.0)
