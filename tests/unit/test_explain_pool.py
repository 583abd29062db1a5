"""What a waiting job lacks, by table: on a host that could run it (its pool now), and across
the fleet when no live host ever could (GPU counts included)."""

import pytest

from manifest.schema import Needs
from routing.capability import Capability, CudaDevice
from routing.explain import (
    Holding,
    HostFacts,
    QueueFacts,
    fleet_lacks,
    nearest,
    shortfall,
    verdict,
    waits_for,
)
from routing.pool import Demand, GpuReserve, Pool, admit


def cap(name, vram=(), ram=32.0, cores=8):
    return Capability(
        name, cores, ram, ram, tuple(CudaDevice(i, "gpu", v, v) for i, v in enumerate(vram))
    )


def filled(pool: Pool, *demands: Demand) -> Pool:
    for d in demands:
        pool = admit(pool, d)[1]
    return pool


BIG4 = Pool.of([80] * 4, 32, 125)
DDP = Holding("ddp", (0, 1, 2), 1, 0.0)


@pytest.mark.parametrize(
    "host, needs, reasons",
    [
        (cap("a", vram=[80]), Needs(True, 24, gpus=2), ["GPUs 1 < 2 (>= 24 GiB each)"]),
        (cap("a", vram=[80, 16]), Needs(True, 24, gpus=2), ["GPUs 1 < 2 (>= 24 GiB each)"]),
        (cap("a", vram=[16, 16]), Needs(True, 0, gpus=4), ["GPUs 2 < 4"]),
        (cap("a", vram=[16, 16]), Needs(True, 24, gpus=2), ["VRAM 16 < 24 GiB (largest device)"]),
        (cap("a", vram=[80, 80]), Needs(True, 24, gpus=2), []),
        (cap("a", vram=[80]), Needs(True, 24), []),
    ],
)
def test_a_host_with_too_few_gpus_that_fit_says_how_many_it_has(host, needs, reasons):
    assert shortfall(host, needs) == reasons


def test_the_nearest_host_for_a_4_gpu_job_is_the_one_with_the_most_gpus_that_fit():
    q = QueueFacts("cuda.gpus4.vram24", "cuda", Needs(True, 24, gpus=4))
    hosts = [
        HostFacts(cap("one", vram=[80])),
        HostFacts(cap("two", vram=[80, 80])),
        HostFacts(cap("cpu")),
    ]
    assert nearest(verdict(h, q, None, None) for h in hosts).hostname == "two"


@pytest.mark.parametrize(
    "needs, caps, said",
    [
        (
            Needs(True, 24, gpus=4),
            [cap("big2", vram=[80, 80]), cap("small", vram=[16] * 4)],
            "no live host has 4 GPUs with >= 24 GiB (most: 2 on big2)",
        ),
        (
            Needs(True, 0, gpus=4),
            [cap("b", vram=[16]), cap("a", vram=[16])],
            "no live host has 4 GPUs (most: 1 on a)",
        ),
        (
            Needs(True, 40),
            [cap("gpu16", vram=[16]), cap("cpu8")],
            "no live host has a GPU with >= 40 GiB (largest: 16 GiB on gpu16)",
        ),
        (Needs(True), [cap("cpu8")], "no live host has a CUDA device"),
        (
            Needs(min_ram_gib=64),
            [cap("a", ram=31.96), cap("b", ram=8)],
            "no live host has 64 GiB RAM (most: 32 GiB on a)",
        ),
        (Needs(min_cores=64), [cap("a", cores=16)], "no live host has 64 cores (most: 16 on a)"),
        (Needs(True, 24, gpus=2), [cap("big2", vram=[80, 80])], None),
        # no one has both
        (
            Needs(True, 24, min_cores=64),
            [cap("gpu", vram=[80]), cap("cpu64", cores=64)],
            None,
        ),
        (Needs(True), [], None),
    ],
)
def test_what_no_live_host_has_is_said_once_for_the_fleet(needs, caps, said):
    assert fleet_lacks(needs, caps) == said


@pytest.mark.parametrize(
    "pool, demand, holding, said",
    [
        (
            filled(BIG4, Demand(gpus=3, vram_gib=24)),
            Demand(gpus=2, vram_gib=24),
            [DDP],
            "needs 2 free GPUs with >= 24 GiB: big4 has 1 free, busy with ddp",
        ),
        (filled(BIG4, Demand(gpus=3)), Demand(gpus=1, vram_gib=24), [DDP], None),
        (
            filled(BIG4, *[Demand(gpus=1)] * 4),
            Demand(gpus=1, vram_gib=24),
            [Holding(n, (i,), 1) for i, n in enumerate("abcde")],
            "needs 1 free GPU with >= 24 GiB: big4 has 0 free, busy with a, b, c and 2 more",
        ),
        (
            filled(Pool.of([80], 8, 64), Demand(gpus=1, vram_gib=70, share_gpu=True)),
            Demand(gpus=1, vram_gib=20, share_gpu=True),
            [Holding("llm", (0,), 1)],
            "needs 20 GiB of VRAM on one GPU to share: "
            "on big4, most room left is 10 GiB, busy with llm",
        ),
        (
            filled(Pool.of([80], 8, 64, GpuReserve(2, 8.0)), Demand(cores=4)),
            Demand(cores=4),
            [Holding("cpu-job", (), 4), DDP],
            "needs 4 free cores: big4 has 2 free for CPU jobs (4 free, 2 kept for idle GPUs), "
            "busy with cpu-job, ddp",
        ),
        (
            filled(Pool.of([], 8, 16), Demand(cores=1, ram_gib=12)),
            Demand(ram_gib=8),
            [Holding("big-ram", (), 1, 12.0), Holding("tiny", (), 1)],
            "needs 8 GiB free RAM: big4 has 4 GiB free, busy with big-ram",
        ),
        (BIG4, Demand(gpus=4, vram_gib=80), [], None),
    ],
)
def test_a_host_that_could_run_the_job_says_what_it_lacks_now_and_who_holds_it(
    pool, demand, holding, said
):
    assert waits_for("big4", pool, demand, holding) == said
