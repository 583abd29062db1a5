"""A sharing job held to its VRAM budget (tasks.vramwatch): the decision, by example."""
from __future__ import annotations

import os

import pytest

from tasks.vramwatch import GIB, VramWatch, over_budget

MINE = {100, 101}


@pytest.mark.parametrize("used, budget, over", [
    ({100: 1 * GIB, 101: 1 * GIB}, 2.0, None),            # at its budget
    ({100: 2 * GIB + GIB // 8}, 2.0, None),               # within the CUDA-context tolerance
    ({100: 2 * GIB, 101: GIB}, 2.0, 3.0),                  # its two processes together are over
    ({100: GIB, 555: 40 * GIB}, 2.0, None),                # another job's memory is not its own
])
def test_only_the_jobs_own_processes_count_against_its_budget(used, budget, over):
    assert over_budget(used, lambda pid: pid in MINE, budget) == over


def test_the_watch_stops_a_job_over_budget_naming_the_budget_and_the_fix():
    me, group = os.getpid(), os.getpgid(0)
    now = [0.0]
    reads = iter([{me: GIB}, {me: 5 * GIB}])
    watch = VramWatch(lambda: next(reads), 2.0, "GPU 0", lambda: now[0])
    assert watch.check(group) is None
    assert watch.check(group) is None          # not read again before CHECK_EVERY_S
    now[0] = 10.0
    verdict = watch.check(group)
    assert "used 5.00 GiB of GPU memory on GPU 0, over its budget of 2 GiB" in verdict
    assert "raise min_vram_gib" in verdict
    assert watch.check(group) == verdict       # stays stopped


def test_a_device_nvml_cannot_read_is_not_watched():
    watch = VramWatch(lambda: None, 2.0, "GPU 0", lambda: 100.0)
    assert watch.check(12345) is None
