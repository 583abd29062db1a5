"""A host's pool from its heartbeat, and `fleet hosts` at 80 and 100 columns: free/total GPUs,
cores and RAM per host; an older worker's heartbeat (no pool) still shows."""

import io

import pytest
from rich.console import Console

from fleet.cli.hosts import host_cells, render_hosts, summary
from fleet.query.hosts import HostView, RunningJob
from fleet.query.pools import GpuUse, HostPool
from routing.capability import Capability, CudaDevice
from routing.pool import Demand, lacking

NOW = 1_700_000_000.0


def gpu(i, state="free", jobs=(), shared=0.0, vram=80.0):
    return {
        "index": i,
        "name": "NVIDIA H100 80GB HBM3",
        "vram_gib": vram,
        "state": state,
        "shared_gib": shared,
        "jobs": list(jobs),
    }


BIG4_POOL = {
    "gpus": [
        gpu(0, "whole", ["j-ddp"]),
        gpu(1, "whole", ["j-ddp"]),
        gpu(2, "shared", ["j-s1", "j-s2"], 6.0),
        gpu(3),
    ],
    "cores": {"total": 32, "free": 26, "kept_for_gpus": 2},
    "ram_gib": {"total": 125.0, "free": 100.0},
    "jobs": {
        "j-ddp": {"gpus": [0, 1], "cores": 4, "ram_gib": 16.0, "shared_gib": 0.0},
        "j-s1": {"gpus": [2], "cores": 1, "ram_gib": 4.0, "shared_gib": 2.0},
        "j-s2": {"gpus": [2], "cores": 1, "ram_gib": 5.0, "shared_gib": 4.0},
    },
}
CPU_POOL = {
    "gpus": [],
    "cores": {"total": 64, "free": 60, "kept_for_gpus": 0},
    "ram_gib": {"total": 251.5, "free": 240.0},
    "jobs": {"j-x": {"gpus": [], "cores": 4, "ram_gib": 11.5}},
}


def cap(name, vram=(), cores=8, ram=32.0):
    return Capability(
        name,
        cores,
        ram,
        ram,
        tuple(CudaDevice(i, "NVIDIA H100 80GB HBM3", v, v) for i, v in enumerate(vram)),
    ).to_dict()


def view(name, pool=None, state="up", vram=(), cores=8, ram=32.0, running=(), slots=1):
    return HostView(
        name,
        state,
        NOW - 3,
        f"{name}@x",
        cap(name, vram, cores, ram),
        None,
        ("cuda.gpus2.vram24", "cuda", "cpu") if vram else ("cpu",),
        (),
        slots,
        tuple(RunningJob(j, n, "cuda", NOW - 30) for j, n in running),
        NOW - 99,
        1,
        pool=pool,
    )


VIEWS = [
    view(
        "big4",
        BIG4_POOL,
        vram=[80] * 4,
        cores=32,
        ram=125.0,
        running=[("j-ddp", "ddp-llama[seed=0]"), ("j-s1", "tiny-a"), ("j-s2", "tiny-b")],
    ),
    view("cpu64", CPU_POOL, cores=64, ram=251.5, running=[("j-x", "xgb")]),
    view("old-gpu", None, vram=[24], running=[("j-o", "legacy")]),
    view("gone", None, state="lost"),
]


def test_a_heartbeat_pool_reads_as_free_and_held_gpus_cores_and_ram():
    p = HostPool.from_dict(BIG4_POOL)
    assert (p.free_gpus, p.shared_gpus, p.cores_free, p.ram_free_gib) == (1, 1, 26, 100.0)
    assert p.gpus[2].use is GpuUse.SHARED and p.gpus[2].jobs == ("j-s1", "j-s2")
    assert [(h.name, h.gpus, h.cores) for h in p.holdings({"j-ddp": "ddp"})] == [
        ("ddp", (0, 1), 4),
        ("j-s1", (2,), 1),
        ("j-s2", (2,), 1),
    ]


@pytest.mark.parametrize(
    "demand, said",
    [
        (Demand(gpus=2, vram_gib=24), "needs 2 free GPUs with >= 24 GiB; 1 free"),
        (Demand(gpus=1, vram_gib=24), None),
        (Demand(gpus=1, vram_gib=75, share_gpu=True), None),  # the free GPU takes it
        # kept for the idle GPU
        (
            Demand(cores=25),
            "needs 25 free cores; 24 free for CPU jobs (26 free, 2 kept for idle GPUs)",
        ),
        (Demand(cores=24), None),
    ],
)
def test_the_pool_rebuilt_from_a_heartbeat_answers_lacking_as_the_workers_own_would(demand, said):
    assert lacking(HostPool.from_dict(BIG4_POOL).pool(), demand) == said


def test_cells_show_free_over_total_and_an_older_worker_shows_question_marks_for_what_is_free():
    cells = {v.hostname: host_cells(v, NOW) for v in VIEWS}
    assert [cells["big4"][c] for c in ("GPUs", "cores", "RAM GiB")] == [
        "1/4, 1 shared",
        "26/32",
        "100/125",
    ]
    assert [cells["cpu64"][c] for c in ("GPUs", "cores", "RAM GiB")] == ["-", "60/64", "240/252"]
    assert [cells["gone"][c] for c in ("GPUs", "cores", "RAM GiB")] == ["-", "-", "-"]
    assert [cells["old-gpu"][c] for c in ("GPUs", "cores", "RAM GiB")] == ["?/1", "?/8", "?/32"]
    assert str(cells["old-gpu"]["jobs"]) == "legacy" and cells["gone"]["state"] == "lost 3s ago"
    assert cells["big4"]["GPU models"] == "4× NVIDIA H100 80GB HBM3 80 GiB"


def test_the_summary_adds_up_the_pools_and_counts_slots_of_workers_without_one():
    assert summary(VIEWS) == (
        "3 live, 3 busy; free/total: GPUs 1/4, cores 86/96, RAM 340/376 GiB; "
        "1/1 slots in use on workers that report no pool"
    )
    assert summary([VIEWS[2]]) == "1 live, 1 busy; 1/1 slots in use"


def text_at(width: int, wide: bool = False) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(render_hosts(VIEWS, NOW, width=width, wide=wide))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 100])
def test_at_80_and_100_columns_hosts_states_and_free_resources_stay_whole(width):
    text = text_at(width)
    assert max(len(line) for line in text.splitlines()) <= width
    for v in VIEWS:
        assert v.hostname in text
    for cell in (
        "1/4, 1 shared",
        "26/32",
        "100/125",
        "60/64",
        "?/8",
        "lost 3s ago",
        "3 live, 3 busy",
    ):
        assert cell in text
    assert "ddp-llama" in text


def test_wide_shows_gpu_models_queues_and_when_each_was_seen():
    text = text_at(220, wide=True)
    assert (
        "4× NVIDIA H100 80GB HBM3 80 GiB" in text
        and "cuda.gpus2.vram24, cuda, cpu" in text
        and "3s ago" in text
    )
    assert "ddp-llama[seed=0], tiny-a, tiny-b" in text


@pytest.mark.parametrize(
    "needs, said",
    [
        (
            {"require_cuda": True, "min_vram_gib": 24, "min_ram_gib": 7, "min_cores": 0, "gpus": 2},
            "CUDA, 2 GPUs, VRAM >= 24 GiB each, RAM >= 7 GiB",
        ),
        (
            {
                "require_cuda": True,
                "min_vram_gib": 2,
                "min_ram_gib": 0,
                "min_cores": 0,
                "share_gpu": True,
            },
            "CUDA, 2 GiB of VRAM on a shared GPU",
        ),
        (
            {"require_cuda": True, "min_vram_gib": 10, "min_ram_gib": 0, "min_cores": 0},
            "CUDA, VRAM >= 10 GiB",
        ),
        (
            {"require_cuda": False, "min_vram_gib": 0, "min_ram_gib": 0, "min_cores": 4},
            "cores >= 4",
        ),
    ],
)
def test_why_says_what_a_host_needs_for_a_queue_gpu_count_and_sharing_included(needs, said):
    from fleet.cli.hosts import needs_text
    from manifest.schema import Needs

    assert needs_text(Needs(**needs)) == said


@pytest.mark.parametrize(
    "cores_kept, ram_kept, said",
    [
        (0, None, None),  # -Q cpu: nothing kept
        # the default reserve
        (
            1,
            None,
            "needs 60 GiB free RAM; "
            "56 GiB free for CPU jobs (64 GiB free, 8 GiB kept for idle GPUs)",
        ),
        # as the heartbeat says
        (
            1,
            14.0,
            "needs 60 GiB free RAM; "
            "50 GiB free for CPU jobs (64 GiB free, 14 GiB kept for idle GPUs)",
        ),
    ],
)
def test_what_idle_gpus_keep_back_from_cpu_jobs_comes_from_the_heartbeat(
    cores_kept, ram_kept, said
):
    ram = {"total": 64.0, "free": 64.0} | ({} if ram_kept is None else {"kept_for_gpus": ram_kept})
    p = HostPool.from_dict(
        {
            "gpus": [gpu(0)],
            "cores": {"total": 8, "free": 8, "kept_for_gpus": cores_kept},
            "ram_gib": ram,
            "jobs": {},
        }
    )
    assert lacking(p.pool(), Demand(cores=1, ram_gib=60)) == said


def test_a_gpu_yielded_to_its_owner_is_not_free_and_says_why_under_the_table_at_80_columns():
    pool = {
        **BIG4_POOL,
        "gpus": [
            *BIG4_POOL["gpus"][:3],
            {**gpu(3), "yielded": "GPU 3 in use by pid 4242 (not fleet)"},
        ],
    }
    desk = view("desk", pool, vram=[80] * 4, cores=32, ram=125.0, running=[("j-ddp", "ddp")])
    assert HostPool.from_dict(pool).free_gpus == 0
    assert lacking(HostPool.from_dict(pool).pool(), Demand(gpus=1)) == "needs 1 free GPU; 0 free"
    cells = host_cells(desk, NOW)
    assert (cells["state"], cells["GPUs"]) == ("busy, yielded", "0/4, 1 shared")
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(render_hosts([desk], NOW, width=80))
    text = console.export_text()
    assert "desk: yielded: GPU 3 in use by pid 4242 (not fleet)" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert desk.to_dict(NOW)["yielded"] == {"3": "GPU 3 in use by pid 4242 (not fleet)"}


@pytest.mark.parametrize(
    "seen_ago_s, said", [(3, "lost 3s ago"), (245, "lost 4m05s ago"), (7620, "lost 2h07m ago")]
)
def test_a_lost_hosts_age_reads_like_every_other_duration(seen_ago_s, said):
    gone = next(v for v in VIEWS if v.hostname == "gone")
    assert host_cells(gone, gone.seen_at + seen_ago_s)["state"] == said
