"""Population-based training, pure: the scheduler table checked at publish (kinds, ranges, Ray's
names as "did you mean"), and a member's decision at a boundary (who is judged, the bottom
quantile, the donor drawn the same on a replay, the new values inside the space)."""

import math
import random

import pytest

from manifest.loader import load
from manifest.search.config import Choices, Direction, Range, SearchConfig
from manifest.search.exploit import clamp, decide, explore, perturb, quantile_size, sample
from manifest.search.pbt import Kind, PbtConfig, Standing, requeue_wire, should_pause
from tests.unit.manifest_cases import write

PBT_JOB = """
[[jobs]]
name = "p"
command = ["python", "train.py"]
checkpoint = "ckpt/"
[jobs.search]
metric = "loss"
last_step = 100
population = 4
"""
SCHED = 'scheduler = { name = "pbt", interval = 10 }\n'
SPACE = "[jobs.search.space]\nlr = { low = 0.001, high = 0.1, log = true }\n"


def _problems(tmp_path, text: str) -> list[tuple[str, str, str]]:
    from core.errors import ManifestError

    with pytest.raises(ManifestError) as e:
        load(write(tmp_path, text))
    return [(p.field, p.message, p.fix) for p in e.value.problems]


def test_a_pbt_search_queues_its_whole_population_and_draws_its_first_values_at_random(tmp_path):
    (s,) = load(write(tmp_path, PBT_JOB + SCHED + SPACE)).searches
    c = s.config
    assert c.pbt == PbtConfig(population=4, interval=10)
    assert (c.trials, c.parallel, c.sampler.name, c.pruner.name) == (4, 4, "random", "none")
    assert SearchConfig.from_dict(c.to_dict()) == c
    assert any(
        line.startswith("  scheduler pbt(population=4, interval=10") for line in s.describe()
    )


def test_a_search_without_pbt_keeps_its_id(tmp_path):
    plain = PBT_JOB.replace("population = 4\n", "")
    (s,) = load(write(tmp_path, plain + SPACE)).searches
    assert "pbt" not in s.config.to_dict() and s.config.pbt is None


@pytest.mark.parametrize(
    ("scheduler", "field", "message", "fix"),
    [
        (
            'scheduler = { name = "pbt", perturbation_interval = 10 }',
            "scheduler.perturbation_interval",
            "unknown key",
            "did you mean 'interval'?",
        ),
        (
            'scheduler = { name = "pbt", interval = 10, quantile_fraction = 0.2 }',
            "scheduler.quantile_fraction",
            "unknown key",
            "did you mean 'quantile'?",
        ),
        (
            'scheduler = { name = "pbt", interval = 10, quantile = 0.6 }',
            "scheduler.quantile",
            "must be in (0, 0.5], got 0.6",
            "use e.g. quantile = 0.25",
        ),
        (
            'scheduler = { name = "pbt", interval = 10, resample_probability = 2 }',
            "scheduler.resample_probability",
            "must be in [0, 1], got 2",
            "use e.g. resample_probability = 0.25",
        ),
        (
            'scheduler = { name = "pbt", interval = "10" }',
            "scheduler.interval",
            "must be an integer, got '10'",
            "write it as an integer",
        ),
        (
            'scheduler = { name = "pbt", interval = 100 }',
            "scheduler.interval",
            "interval 100 leaves no boundary before last_step 100",
            "use an interval below 100",
        ),
        (
            'scheduler = { name = "pbt", interval = 10, perturbation_factors = [0.8, -1] }',
            "scheduler.perturbation_factors",
            "must be a non-empty list of numbers > 0, got [0.8, -1]",
            "write e.g. perturbation_factors = [0.8, 1.2]",
        ),
        (
            'scheduler = { name = "asha", interval = 10 }',
            "scheduler.name",
            "unknown scheduler 'asha'",
            'use name = "pbt"',
        ),
        (
            "scheduler = { interval = 10 }",
            "scheduler",
            "a scheduler table needs its name",
            'add name = "pbt"',
        ),
    ],
)
def test_a_bad_scheduler_is_reported_at_its_key_with_a_fix(
    tmp_path, scheduler, field, message, fix
):
    found = _problems(tmp_path, PBT_JOB + scheduler + "\n" + SPACE)
    assert found[0] == (f"jobs[0].search.{field}", message, fix)


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (('checkpoint = "ckpt/"\n', ""), "jobs[0]", "a pbt search needs the job's checkpoint"),
        (
            ("population = 4\n", "population = 4\ntrials = 9\n"),
            "jobs[0].search.trials",
            "a pbt search takes no trials",
        ),
        (
            ("population = 4\n", "population = 4\nparallel = 2\n"),
            "jobs[0].search.parallel",
            "a pbt search takes no parallel",
        ),
        (
            ("population = 4\n", 'population = 4\npruner = "asha"\n'),
            "jobs[0].search.pruner",
            "a pbt search stops no member early",
        ),
        (
            ("population = 4\n", "population = 1\n"),
            "jobs[0].search.population",
            "must be 2..1000, got 1",
        ),
        (
            ("last_step = 100\n", ""),
            "jobs[0].search",
            "a pbt search needs the step its members end at",
        ),
    ],
)
def test_what_a_pbt_search_needs_of_its_job_is_checked(tmp_path, change, field, message):
    found = _problems(tmp_path, PBT_JOB.replace(*change) + SCHED + SPACE)
    assert [(f, m.split(":")[0]) for f, m, _ in found] == [(field, message)]


def test_a_population_without_a_scheduler_is_refused(tmp_path):
    found = _problems(tmp_path, PBT_JOB + SPACE)
    assert [(f, m) for f, m, _ in found] == [
        ("jobs[0].search.population", "a population needs its scheduler")
    ]


# --- the decision -------------------------------------------------------------------------

CONFIG = PbtConfig(population=8, interval=10, quantile=0.25, resample_probability=0.0)
SPACE_LR = {"lr": Range(0.001, 0.1, log=True)}


def member(n: int, step: int, value: float, ckpt: int | None = None, lr: float = 0.01):
    return Standing(n, step, value, step if ckpt is None else ckpt, {"lr": lr})


def judge(m: Standing, others, config=CONFIG, direction=Direction.MINIMIZE, seed=0):
    return decide(m, others, config, SPACE_LR, direction=direction, seed=seed)


@pytest.mark.parametrize(
    ("n", "quantile", "size"),
    [
        (1, 0.25, 0),
        (2, 0.25, 1),
        (3, 0.25, 1),
        (4, 0.25, 1),
        (5, 0.25, 2),
        (8, 0.25, 2),
        (8, 0.5, 4),
        (3, 0.5, 1),
    ],
)
def test_the_quantile_holds_ceil_n_times_q_members_at_most_half(n, quantile, size):
    assert quantile_size(n, quantile) == size


def test_the_first_member_at_a_boundary_goes_on_alone():
    d = judge(member(0, 10, 9.0), [member(1, 0, 0.1), member(2, 0, 0.2)])
    assert (d.kind, d.judged) == (Kind.ALONE, 1)


@pytest.mark.parametrize(
    ("me", "others", "kind", "donor"),
    [
        # the worst of four at step 10 takes the best's checkpoint
        (
            member(3, 10, 4.0),
            [member(0, 10, 1.0), member(1, 10, 2.0), member(2, 10, 3.0)],
            Kind.EXPLOIT,
            0,
        ),
        # the best goes on
        (
            member(0, 10, 1.0),
            [member(1, 10, 2.0), member(2, 10, 3.0), member(3, 10, 4.0)],
            Kind.CONTINUE,
            None,
        ),
        # a middle member goes on
        (
            member(1, 10, 2.0),
            [member(0, 10, 1.0), member(2, 10, 3.0), member(3, 10, 4.0)],
            Kind.CONTINUE,
            None,
        ),
        # those still below the boundary do not count: judged among two, it is the worse
        (
            member(3, 10, 4.0),
            [member(0, 20, 1.0), member(1, 0, 0.1), member(2, 0, 0.1)],
            Kind.EXPLOIT,
            0,
        ),
        # a member ahead is judged by its latest value, not its value at this boundary
        (member(3, 10, 1.5), [member(0, 30, 1.0)], Kind.EXPLOIT, 0),
        # a NaN ranks last
        (member(3, 10, math.nan), [member(0, 10, 9.0)], Kind.EXPLOIT, 0),
        (member(0, 10, 9.0), [member(3, 10, math.nan)], Kind.CONTINUE, None),
        # the only top member has no checkpoint at or after the boundary yet: nobody to copy
        (member(3, 10, 4.0), [member(0, 10, 1.0, ckpt=5)], Kind.CONTINUE, None),
        (member(3, 10, 4.0), [Standing(0, 10, 1.0, None)], Kind.CONTINUE, None),
    ],
)
def test_a_member_is_exploited_only_from_the_bottom_and_from_a_top_checkpoint(
    me, others, kind, donor
):
    d = judge(me, others)
    assert (d.kind, d.donor) == (kind, donor)
    if kind is Kind.EXPLOIT:
        assert d.donor_checkpoint_step >= me.step and d.old == me.values


def test_maximize_exploits_the_lowest():
    d = judge(member(0, 10, 0.5), [member(1, 10, 0.9)], direction=Direction.MAXIMIZE)
    assert (d.kind, d.donor) == (Kind.EXPLOIT, 1)
    d = judge(member(1, 10, 0.9), [member(0, 10, 0.5)], direction=Direction.MAXIMIZE)
    assert d.kind is Kind.CONTINUE


def test_a_replay_of_a_boundary_draws_the_same_donor_and_values_and_another_seed_may_not():
    me = member(7, 20, 9.0)
    others = [member(n, 20, float(n)) for n in range(7)]  # 8 judged: top 0 and 1
    first = judge(me, others, seed=3)
    assert first == judge(me, list(reversed(others)), seed=3)
    assert first.kind is Kind.EXPLOIT and first.donor in (0, 1)
    draws = {
        (judge(me, others, seed=s).donor, judge(me, others, seed=s).new["lr"]) for s in range(20)
    }
    assert len(draws) > 1  # the seed matters


def test_the_new_values_are_the_donors_times_a_factor():
    me, donor = member(1, 10, 5.0, lr=0.09), member(0, 10, 1.0, lr=0.01)
    d = judge(me, [donor])
    assert d.new["lr"] in (pytest.approx(0.008), pytest.approx(0.012)) and d.resampled == ()
    assert d.to_dict()["old"] == {"lr": 0.09}


@pytest.mark.parametrize(
    ("value", "dist", "factors", "expect"),
    [
        (0.09, Range(0.001, 0.1, log=True), (1.2,), 0.1),  # clamped at high
        (0.001, Range(0.001, 0.1, log=True), (0.8,), 0.001),  # clamped at low
        (100, Range(32, 256, integer=True), (1.2,), 120),  # an integer stays one
        (101, Range(32, 256, integer=True), (0.8,), 81),  # rounded
        (0.5, Range(0.0, 1.0, step=0.25), (1.2,), 0.5),  # 0.6 snapped to the grid
        (0.5, Range(0.0, 1.0, step=0.25), (1.6,), 0.75),
    ],
)
def test_a_range_is_perturbed_by_a_factor_inside_the_space(value, dist, factors, expect):
    assert perturb(value, dist, factors, random.Random(0)) == pytest.approx(expect)


@pytest.mark.parametrize(
    ("value", "seen"),
    [("a", {"a", "b"}), ("b", {"a", "c"}), ("c", {"b", "c"})],
)
def test_a_choice_steps_to_a_neighbour_clamped_at_the_ends(value, seen):
    dist = Choices(("a", "b", "c"))
    got = {perturb(value, dist, (0.8, 1.2), random.Random(s)) for s in range(40)}
    assert got == seen


def test_resample_probability_one_draws_every_key_again_inside_the_space():
    space = {
        "lr": Range(0.001, 0.1, log=True),
        "bs": Range(32, 256, step=32, integer=True),
        "act": Choices(("relu", "tanh")),
    }
    config = PbtConfig(population=4, interval=10, resample_probability=1.0)
    for s in range(50):
        new, resampled = explore(
            {"lr": 0.05, "bs": 64, "act": "relu"}, space, config, random.Random(s)
        )
        assert resampled == ("lr", "bs", "act")
        assert (
            0.001 <= new["lr"] <= 0.1
            and new["bs"] in range(32, 257, 32)
            and new["act"] in ("relu", "tanh")
        )


def test_a_sample_is_inside_its_range_and_a_clamp_keeps_it_there():
    r = random.Random(1)
    for _ in range(100):
        assert 0.001 <= sample(Range(0.001, 0.1, log=True), r) <= 0.1
    assert clamp(300.0, Range(32, 256, step=32, integer=True)) == 256


@pytest.mark.parametrize(
    ("step", "queued", "pause"),
    [
        (10, [], False),  # nobody waits
        (10, [0], True),  # a member never started waits: it runs first
        (10, [10, 20], False),  # those waiting are level or ahead
        (20, [10], True),
    ],
)
def test_a_member_yields_its_host_only_to_a_member_behind_it(step, queued, pause):
    assert should_pause(step, queued) is pause


@pytest.mark.parametrize(
    ("base", "step", "wire"),
    [(4, 0, 4), (4, 10, 5), (4, 25, 6), (4, 90, 9), (9, 30, 9), (0, 10, 1)],
)
def test_a_member_further_ahead_goes_back_to_a_list_served_later(base, step, wire):
    assert requeue_wire(base, step, 10, 9) == wire
