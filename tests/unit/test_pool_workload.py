"""The multi-resource scheduling workload: its hosts, its manifest, its figures, by example."""

from __future__ import annotations

import json

import pytest

from bench.pool_oracle import PoolHost
from bench.pool_workload import (
    POOL_HOSTS,
    POOL_KINDS,
    PlannedJob,
    Times,
    capability,
    manifest_text,
    measure,
    report_lines,
    summary_lines,
    workload,
)
from fleet.manifests import loads
from manifest.schema import Needs
from routing.capability import Capability, from_environment
from routing.pool import Demand


def test_each_host_becomes_a_fleet_capability_with_its_gpus_cores_and_ram():
    for host in POOL_HOSTS:
        detected = Capability("this-box", 2, 4.0, 4.0)
        cap = from_environment(detected, {"FLEET_CAPABILITY": json.dumps(capability(host))})
        assert len(cap.cuda_devices) == len(host.gpus)
        assert [d.vram_total_gib for d in cap.cuda_devices] == list(host.gpus)
        assert cap.cpu_cores == host.cores and cap.ram_total_gib == host.ram_gib


def test_the_workload_is_the_same_for_a_seed_and_differs_between_seeds():
    assert workload(7, 40) == workload(7, 40)
    assert workload(7, 40) != workload(8, 40)
    assert len(workload(7, 40)) == 40


def test_the_workload_mixes_every_kind_in_one_block_each():
    jobs = workload(3, 60)
    kinds = [j.kind for j in jobs]
    assert set(kinds) == {k.name for k in POOL_KINDS}
    blocks = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert len(blocks) == len(set(blocks))


def test_every_job_of_the_mix_fits_some_host_and_the_big_ones_fit_few():
    fits = {
        k.name: {
            h.name for h in POOL_HOSTS if h.can_ever_run(PlannedJob(k.name, "x", 1, k.needs).demand)
        }
        for k in POOL_KINDS
    }
    assert fits["gpus4"] == {"gpu4"}
    assert fits["gpus2"] == {"gpu4", "gpu2"}
    assert fits["gpu1"] == fits["share"] == {"gpu4", "gpu2", "gpu1"}
    assert "cpu64" in fits["cpu16"] and "cpu64" in fits["cpu4"]


def test_a_job_reserves_what_its_needs_say():
    assert PlannedJob(
        "gpus2", "a", 1, Needs(require_cuda=True, gpus=2, min_vram_gib=40, min_cores=4)
    ).demand == Demand(gpus=2, vram_gib=40, cores=4)
    assert PlannedJob(
        "share", "b", 1, Needs(require_cuda=True, share_gpu=True, min_vram_gib=8)
    ).demand == Demand(gpus=1, vram_gib=8, share_gpu=True, cores=1)
    assert PlannedJob("cpu", "c", 1, Needs(min_cores=16, min_ram_gib=16)).demand == Demand(
        cores=16, ram_gib=16
    )


def test_the_manifest_loads_with_every_job_s_needs_and_sleep():
    jobs = workload(11, 30)
    manifest = loads(manifest_text(jobs, 11), "<test>")
    by_name = {j.name: j for j in manifest.jobs}
    assert set(by_name) == {j.name for j in jobs}
    for planned in jobs:
        spec = by_name[planned.name]
        assert spec.needs == planned.needs
        assert spec.command == ("sleep", str(planned.duration_s))


def _times(host: str, queued: float, started: float, finished: float) -> Times:
    return Times(host, queued, started, finished)


ONE = PoolHost("one", gpus=(24.0,), cores=4, ram_gib=32)
GPU_AND_CPU = [
    PlannedJob("gpu1", "g", 2.0, Needs(require_cuda=True)),
    PlannedJob("cpu4", "c", 2.0, Needs(min_cores=2)),
]


def test_measure_compares_fleet_with_the_oracle_on_the_run_times_taken():
    jobs = GPU_AND_CPU
    # fleet ran them one after the other though both fit at once: half as good as the oracle
    times = {"g": _times("one", 100.0, 100.0, 103.0), "c": _times("one", 100.0, 103.0, 106.0)}
    fig = measure(5, jobs, times, published_at=100.0, hosts=[ONE])
    assert fig.fleet_s == pytest.approx(6.0) and fig.publish_s == pytest.approx(0.0)
    assert fig.oracle_s == pytest.approx(3.0)  # the measured 3 s each, side by side
    assert fig.oracle_nominal_s == pytest.approx(2.0)
    assert fig.ratio == pytest.approx(0.5)
    # while c waited (100-103) it would have fit: the free cores (4 - 1 held by g) idled 3 s
    assert fig.idle_gpu_s == pytest.approx(0.0)
    assert fig.idle_core_s == pytest.approx(9.0)


def test_a_fleet_as_good_as_the_oracle_scores_one_and_idles_nothing():
    jobs = GPU_AND_CPU
    times = {"g": _times("one", 0.0, 0.0, 2.0), "c": _times("one", 0.0, 0.0, 2.0)}
    fig = measure(1, jobs, times, published_at=0.0, hosts=[ONE])
    assert fig.ratio == pytest.approx(1.0)
    assert fig.idle_gpu_s == fig.idle_core_s == 0.0


def test_the_report_names_every_host_and_the_summary_every_seed():
    jobs = [PlannedJob("gpu1", "g", 2.0, Needs(require_cuda=True))]
    fig = measure(9, jobs, {"g": _times("one", 0.3, 0.5, 2.5)}, published_at=0.0, hosts=[ONE])
    text = "\n".join(report_lines(fig, jobs, [ONE]))
    assert "seed 9: 1 jobs" in text and "one" in text and "oracle/makespan = 0.80" in text
    assert "of which publish 0.3 s" in text
    table = summary_lines([fig, fig])
    assert len(table) == 3 and table[1].split()[:5] == ["9", "2.5", "0.3", "2.0", "0.80"]
