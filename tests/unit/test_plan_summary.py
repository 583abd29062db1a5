"""A long publish plan is summarised: counts per queue and per sweep, then the first rows."""

import pytest

from fleet.manifests import loads
from fleet.plan_summary import summarise, sweep_base
from fleet.publish import PlanRow, plan


@pytest.mark.parametrize(
    "name, base",
    [
        ("gbt[seed=1]", "gbt"),
        ("gbt[seed=1,lr=0.1]", "gbt"),
        ('mlp[opt="a[b]"]', "mlp"),
        ("plain", "plain"),
        ("[odd]", "[odd]"),
        ("half[open", "half[open"),
    ],
)
def test_a_sweep_point_groups_under_its_base_name(name, base):
    assert sweep_base(name) == base


def rows(manifest_text: str) -> list[PlanRow]:
    return plan(loads(manifest_text, "m.toml"), {})


MANIFEST = """
[[jobs]]
name = "big"
command = ["true"]
[jobs.sweep]
seed = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]

[[jobs]]
name = "gpu"
command = ["true"]
require_cuda = true
[jobs.sweep]
seed = [0, 1, 2]

[[jobs]]
name = "single"
command = ["true", "x"]
"""


def test_the_summary_counts_jobs_per_queue_and_per_sweep_largest_first():
    s = summarise(rows(MANIFEST), first=4)
    assert s.total == 14 and s.actions == {"publish": 14}
    assert [(g.name, g.jobs) for g in s.queues] == [("cpu", 11), ("cuda", 3)]
    assert [(g.name, g.jobs, g.actions) for g in s.sweeps] == [
        ("big", 10, {"publish": 10}),
        ("gpu", 3, {"publish": 3}),
        ("single", 1, {"publish": 1}),
    ]


def test_the_summary_keeps_the_first_rows_and_counts_the_rest():
    s = summarise(rows(MANIFEST), first=4)
    assert [r.job.name for r in s.first] == [
        "big[seed=0]",
        "big[seed=1]",
        "big[seed=2]",
        "big[seed=3]",
    ]
    assert s.more_rows == 10


def test_groups_beyond_the_limit_are_counted_not_listed():
    s = summarise(rows(MANIFEST), limit=1)
    assert [g.name for g in s.sweeps] == ["big"] and s.more_sweeps == 2
    assert [g.name for g in s.queues] == ["cpu"] and s.more_queues == 1
