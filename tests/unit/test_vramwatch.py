"""A sharing job held to its VRAM budget (tasks.vramwatch): the decision, by example."""

from __future__ import annotations

import os

import pytest

from tasks.vramwatch import GIB, VramWatch, over_budget

MINE = {100, 101}


@pytest.mark.parametrize(
    "used, budget, over",
    [
        ({100: 1 * GIB, 101: 1 * GIB}, 2.0, None),  # at its budget
        ({100: 2 * GIB + GIB // 8}, 2.0, None),  # within the CUDA-context tolerance
        ({100: 2 * GIB, 101: GIB}, 2.0, 3.0),  # its two processes together are over
        ({100: GIB, 555: 40 * GIB}, 2.0, None),  # another job's memory is not its own
    ],
)
def test_only_the_jobs_own_processes_count_against_its_budget(used, budget, over):
    assert over_budget(used, lambda pid: pid in MINE, budget) == over


def test_the_watch_stops_a_job_over_budget_naming_the_budget_and_the_fix():
    me, group = os.getpid(), os.getpgid(0)
    now = [0.0]
    reads = iter([{me: GIB}, {me: 5 * GIB}])
    watch = VramWatch(lambda: next(reads), 2.0, "GPU 0", lambda: now[0])
    assert watch.check(group) is None
    assert watch.check(group) is None  # not read again before CHECK_EVERY_S
    now[0] = 10.0
    verdict = watch.check(group)
    assert "used 5.00 GiB of GPU memory on GPU 0, over its budget of 2 GiB" in verdict
    assert "raise min_vram_gib" in verdict
    assert watch.check(group) == verdict  # stays stopped


def test_a_device_nvml_cannot_read_is_not_watched():
    watch = VramWatch(lambda: None, 2.0, "GPU 0", lambda: 100.0)
    assert watch.check(12345) is None


def test_a_device_nvml_stops_answering_for_fails_closed_after_three_checks():
    from tasks.vramwatch import UNREADABLE_CHECKS, UsageUnknown

    def broken():
        raise UsageUnknown("NVMLError_Unknown: Unknown Error")

    now = [0.0]
    watch = VramWatch(broken, 2.0, "GPU 0", lambda: now[0])
    verdicts = []
    for _ in range(UNREADABLE_CHECKS):
        verdicts.append(watch.check(os.getpgid(0)))
        now[0] += 10.0
    assert verdicts[:-1] == [None] * (UNREADABLE_CHECKS - 1)
    assert "could not be read through NVML 3 times in a row (NVMLError_Unknown" in verdicts[-1]


def test_one_failed_read_between_good_ones_does_not_stop_a_job():
    from tasks.vramwatch import UsageUnknown

    reads = iter(
        [UsageUnknown("blip"), UsageUnknown("blip"), {}, UsageUnknown("blip"), UsageUnknown("blip")]
    )

    def usage():
        r = next(reads)
        if isinstance(r, Exception):
            raise r
        return r

    now = [0.0]
    watch = VramWatch(usage, 2.0, "GPU 0", lambda: now[0])
    for _ in range(5):
        assert watch.check(os.getpgid(0)) is None
        now[0] += 10.0


def test_a_real_gpu_nvml_cannot_read_raises_instead_of_reading_as_within_budget():
    from tasks.vramwatch import UsageUnknown, nvml_usage

    with pytest.raises(UsageUnknown):
        nvml_usage("GPU-00000000-0000-0000-0000-000000000000")()  # no such device here
    assert nvml_usage(None)() is None  # a simulated GPU: not watched


HOST_NS = "Name:\tcelery\nPid:\t4242\nNSpid:\t4242\n"
CONTAINER_NS = "Name:\tcelery\nPid:\t7\nNSpid:\t913245\t7\n"


@pytest.mark.parametrize(
    "real_gpus, status, unwatched, refused",
    [
        (True, HOST_NS, False, None),  # the host's PID namespace: NVML's PIDs are ours
        (False, CONTAINER_NS, False, None),  # simulated GPUs are never watched
        (True, CONTAINER_NS, False, "serves no share_gpu job"),
        (True, CONTAINER_NS, True, "share_gpu jobs run unwatched (FLEET_SHARE_GPU_UNWATCHED=1)"),
    ],
)
def test_a_worker_whose_pid_namespace_hides_its_processes_from_nvml_says_so(
    real_gpus, status, unwatched, refused
):
    from tasks.vramwatch import accounting_problem

    said = accounting_problem(real_gpus, status, unwatched)
    assert (said is None) if refused is None else (refused in said)
    if said and not unwatched:
        assert "pid: host" in said and "FLEET_SHARE_GPU_UNWATCHED=1" in said
