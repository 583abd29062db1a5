"""Admission on a host's resource pool: pure, no broker (routing.pool)."""

from __future__ import annotations

import pytest

from manifest.schema import Needs
from routing.pool import Demand, GpuReserve, Pool, admit, demand_of, fits, lacking, release


def take_all(pool: Pool, demands: list[Demand]):
    grants = []
    for d in demands:
        got = admit(pool, d)
        assert got is not None, f"{d} should fit; {lacking(pool, d)}"
        grant, pool = got
        grants.append(grant)
    return grants, pool


def test_a_4_gpu_16_core_host_starts_a_2_gpu_job_two_1_gpu_jobs_and_six_2_core_cpu_jobs_at_once():
    pool = Pool.of([24, 24, 24, 24], cores=16, ram_gib=128)
    demands = [Demand(gpus=2, vram_gib=16), Demand(gpus=1), Demand(gpus=1)] + [Demand(cores=2)] * 6
    grants, pool = take_all(pool, demands)
    assert len(set(grants[0].gpus)) == 2
    all_gpus = [g for grant in grants for g in grant.gpus]
    assert sorted(all_gpus) == [0, 1, 2, 3]
    cores = [c for grant in grants for c in grant.cores]
    assert len(cores) == len(set(cores)) == 3 + 12


def test_cpu_jobs_leave_the_cores_and_ram_idle_gpus_need():
    pool = Pool.of([16], cores=8, ram_gib=32, reserve=GpuReserve(cores=2, ram_gib=8))
    _, pool = take_all(pool, [Demand(cores=2)] * 3)
    assert not fits(pool, Demand(cores=1))
    assert "kept for idle GPUs" in lacking(pool, Demand(cores=1))
    assert fits(pool, Demand(gpus=1, vram_gib=8, cores=2))


def test_a_gpu_job_takes_the_reserve_of_the_gpu_it_takes_and_then_cpu_jobs_may_not():
    pool = Pool.of([16], cores=4, ram_gib=16, reserve=GpuReserve(cores=2, ram_gib=8))
    grant, pool = admit(pool, Demand(gpus=1, cores=1))
    assert fits(pool, Demand(cores=3))  # no idle GPU left to keep room for
    pool = release(pool, grant)
    assert not fits(pool, Demand(cores=3))


def test_a_2_gpu_job_never_fits_a_1_gpu_host_and_says_what_it_lacks():
    pool = Pool.of([80], cores=32, ram_gib=256)
    assert not fits(pool, Demand(gpus=2))
    assert lacking(pool, Demand(gpus=2, vram_gib=24)) == "needs 2 free GPUs with >= 24 GiB; 1 free"


def test_whole_gpu_jobs_take_the_smallest_device_that_fits():
    pool = Pool.of([80, 16, 24], cores=8, ram_gib=64)
    grant, _ = admit(pool, Demand(gpus=1, vram_gib=12))
    assert grant.gpus == (1,)
    grant, _ = admit(pool, Demand(gpus=1, vram_gib=20))
    assert grant.gpus == (2,)


@pytest.mark.parametrize(
    "budgets, fit",
    [
        ([40, 40], True),
        ([40, 30, 10], True),
        ([40, 41], False),
        ([79, 2], False),
    ],
)
def test_sharing_jobs_fill_one_device_while_their_budgets_fit_its_vram(budgets, fit):
    pool = Pool.of([80], cores=16, ram_gib=64)
    ok = True
    for b in budgets:
        got = admit(pool, Demand(gpus=1, vram_gib=b, share_gpu=True))
        if got is None:
            ok = False
            break
        _, pool = got
    assert ok is fit


def test_a_shared_device_is_never_handed_out_whole_and_a_whole_one_never_shared():
    pool = Pool.of([80], cores=16, ram_gib=64)
    shared, pool = admit(pool, Demand(gpus=1, vram_gib=2, share_gpu=True))
    assert not fits(pool, Demand(gpus=1))
    pool = release(pool, shared)
    whole, pool = admit(pool, Demand(gpus=1))
    assert not fits(pool, Demand(gpus=1, vram_gib=2, share_gpu=True))
    assert fits(release(pool, whole), Demand(gpus=1))


def test_sharing_jobs_pack_onto_a_device_already_shared():
    pool = Pool.of([80, 80], cores=16, ram_gib=64)
    first, pool = admit(pool, Demand(gpus=1, vram_gib=10, share_gpu=True))
    second, pool = admit(pool, Demand(gpus=1, vram_gib=10, share_gpu=True))
    assert first.gpus == second.gpus
    assert fits(pool, Demand(gpus=1))  # the other device stays whole


def test_release_gives_everything_back():
    empty = Pool.of([24, 24], cores=8, ram_gib=32)
    grants, pool = take_all(
        empty,
        [
            Demand(gpus=1, ram_gib=4),
            Demand(gpus=1, vram_gib=4, share_gpu=True),
            Demand(cores=2, ram_gib=2),
        ],
    )
    for g in grants:
        pool = release(pool, g)
    assert pool == empty


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(gpus=-1),
        dict(cores=-1),
        dict(ram_gib=-1.0),
        dict(gpus=2, share_gpu=True),
        dict(gpus=0, share_gpu=True),
    ],
)
def test_a_demand_refuses_impossible_values(kwargs):
    with pytest.raises(ValueError, match="demand"):
        Demand(**kwargs)


@pytest.mark.parametrize(
    "needs, on_gpu, demand",
    [
        (Needs(), False, Demand(cores=1)),
        (Needs(min_cores=8, min_ram_gib=4), False, Demand(cores=8, ram_gib=4)),
        (Needs(require_cuda=True, min_vram_gib=24), True, Demand(gpus=1, vram_gib=24)),
        (Needs(require_cuda=True, min_vram_gib=24, gpus=4), True, Demand(gpus=4, vram_gib=24)),
        (
            Needs(require_cuda=True, min_vram_gib=2, share_gpu=True),
            True,
            Demand(gpus=1, vram_gib=2, share_gpu=True),
        ),
        (Needs(min_vram_gib=10, gpus=2), False, Demand(cores=1)),  # prefer_cuda on its CPU fallback
        (Needs(min_vram_gib=10), True, Demand(gpus=1, vram_gib=10)),  # prefer_cuda on its GPU tier
    ],
)
def test_a_jobs_needs_become_what_it_reserves(needs, on_gpu, demand):
    assert demand_of(needs, on_gpu) == demand
