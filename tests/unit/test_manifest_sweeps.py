"""Hyper tables checked against the trainer schema, and sweeps: their checks, the cross
product of their lists, and the names and hyper of each point."""

import pytest

from tests.unit.manifest_cases import COMMAND, GBT, job_of, jobs_of, only_problem, problems


@pytest.mark.parametrize(
    "hyper, key, message, fix",
    [
        ("lr = 0.1", "lr", "unknown key for model 'gbt'", "did you mean 'learning_rate'?"),
        ("max_dept = 3", "max_dept", "unknown key for model 'gbt'", "did you mean 'max_depth'?"),
        (
            'learning_rate = "fast"',
            "learning_rate",
            "must be float, got str 'fast'",
            "use e.g. 0.1",
        ),
        ("max_depth = 2.5", "max_depth", "must be int, got float 2.5", "use e.g. 6"),
        ("max_depth = true", "max_depth", "must be int, got bool True", "use e.g. 6"),
        ("learning_rate = 0", "learning_rate", "0 is out of range (0, 1]", "use a value in (0, 1]"),
        ("max_depth = 65", "max_depth", "65 is out of range [1, 64]", "use a value in [1, 64]"),
        (
            "learning_rate = nan",
            "learning_rate",
            "must be a finite number, got nan",
            "use e.g. 0.1",
        ),
        (
            'objective = "hinge"',
            "objective",
            "'hinge' is not one of 'auto', 'binary:logistic', 'multi:softprob', 'reg:squarederror'",
            "use one of 'auto', 'binary:logistic', 'multi:softprob', 'reg:squarederror'",
        ),
    ],
)
def test_a_bad_hyper_value_in_an_inline_table_is_reported_at_its_key(
    tmp_path, hyper, key, message, fix
):
    p = only_problem(tmp_path, GBT + f"hyper = {{ n_estimators = 10, {hyper} }}\n")
    assert (p.line, p.field, p.message, p.fix) == (5, f"jobs[0].hyper.{key}", message, fix)


def test_a_bad_mlp_layer_list_is_reported_with_the_bad_part(tmp_path):
    text = (
        '[[jobs]]\nname = "a"\nmodel = "mlp"\ndata = "d.csv"\nhyper = { hidden_sizes = "64,x" }\n'
    )
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.message) == (
        5,
        "jobs[0].hyper.hidden_sizes",
        "layer width 'x' is not a whole number",
    )


def test_a_bad_hyper_key_in_a_hyper_sub_table_is_reported_at_its_own_line(tmp_path):
    p = only_problem(tmp_path, GBT + "[jobs.hyper]\nmax_depth = 3\nlr = 0.1\n")
    assert (p.line, p.field, p.fix) == (7, "jobs[0].hyper.lr", "did you mean 'learning_rate'?")


def test_every_bad_hyper_key_of_a_job_is_reported(tmp_path):
    found = problems(tmp_path, GBT + "[jobs.hyper]\nlr = 0.1\nmax_depth = 0\n")
    assert [(p.field, p.line) for p in found] == [
        ("jobs[0].hyper.lr", 6),
        ("jobs[0].hyper.max_depth", 7),
    ]


def test_a_command_job_takes_any_hyper_unchecked(tmp_path):
    job = job_of(tmp_path, COMMAND + 'hyper = { lr = 0.1, anything = "goes" }\n')
    assert job.hyper == {"lr": 0.1, "anything": "goes"}


@pytest.mark.parametrize("value", ["3", "[]", '"3,4"'])
def test_a_sweep_value_that_is_not_a_non_empty_list_is_rejected(tmp_path, value):
    p = only_problem(tmp_path, GBT + f"[jobs.sweep]\nmax_depth = {value}\n")
    assert (p.line, p.field, p.message, p.fix) == (
        6,
        "jobs[0].sweep.max_depth",
        "a sweep value must be a non-empty list",
        "write max_depth = [a, b, ...]",
    )


@pytest.mark.parametrize("seeds", ["[0, 1.5]", '["0"]', "[true]"])
def test_a_seed_sweep_of_non_integers_is_rejected(tmp_path, seeds):
    p = only_problem(tmp_path, GBT + f"sweep = {{ seed = {seeds} }}\n")
    assert (p.line, p.field, p.message, p.fix) == (
        5,
        "jobs[0].sweep.seed",
        "seeds must be integers",
        "write seed = [0, 1, 2]",
    )


def test_a_key_in_both_hyper_and_sweep_is_rejected_at_the_sweep(tmp_path):
    p = only_problem(
        tmp_path, GBT + "hyper = { max_depth = 3 }\n[jobs.sweep]\nmax_depth = [4, 5]\n"
    )
    assert (p.line, p.field, p.message, p.fix) == (
        7,
        "jobs[0].sweep.max_depth",
        "max_depth is set in both hyper and sweep",
        "keep it in one place",
    )


def test_a_bad_hyper_value_in_a_sweep_is_reported_at_the_sweep_key(tmp_path):
    p = only_problem(tmp_path, GBT + "[jobs.sweep]\nseed = [0, 1]\nlearning_rate = [0.1, 2.0]\n")
    assert (p.line, p.field, p.message) == (
        7,
        "jobs[0].sweep.learning_rate",
        "2.0 is out of range (0, 1]",
    )


def test_every_bad_value_of_a_sweep_is_reported_once_at_its_line(tmp_path):
    text = (
        '[[jobs]]\nname = "a"\nmodel = "mlp"\ndata = "d.csv"\n'
        "[jobs.sweep]\nlearning_rate = [0.1, -1, 20]\nepochs = [0, 5]\n"
    )
    found = problems(tmp_path, text)
    assert [(p.line, p.field, p.message) for p in found] == [
        (6, "jobs[0].sweep.learning_rate", "-1 is out of range (0, 10]"),
        (6, "jobs[0].sweep.learning_rate", "20 is out of range (0, 10]"),
        (7, "jobs[0].sweep.epochs", "0 is out of range [1, 10000]"),
    ]


def test_bad_sweep_values_are_reported_even_when_another_sweep_key_is_not_a_list(tmp_path):
    found = problems(tmp_path, GBT + "[jobs.sweep]\nseed = 3\nmax_depth = [0, 4]\n")
    assert [(p.line, p.field) for p in found] == [
        (6, "jobs[0].sweep.seed"),
        (7, "jobs[0].sweep.max_depth"),
    ]


def test_an_unknown_hyper_key_in_a_sweep_suggests_the_trainer_key(tmp_path):
    p = only_problem(tmp_path, GBT + "[jobs.sweep]\nlr = [0.1, 0.2]\n")
    assert (p.line, p.field, p.fix) == (6, "jobs[0].sweep.lr", "did you mean 'learning_rate'?")


def test_a_sweep_is_the_cross_product_of_its_lists_named_by_point(tmp_path):
    jobs = jobs_of(
        tmp_path, GBT + "[jobs.sweep]\nmax_depth = [3, 5]\nlearning_rate = [0.1, 0.2, 0.3]\n"
    )
    assert [j.name for j in jobs] == [
        "a[learning_rate=0.1,max_depth=3]",
        "a[learning_rate=0.1,max_depth=5]",
        "a[learning_rate=0.2,max_depth=3]",
        "a[learning_rate=0.2,max_depth=5]",
        "a[learning_rate=0.3,max_depth=3]",
        "a[learning_rate=0.3,max_depth=5]",
    ]
    assert [(j.hyper["learning_rate"], j.hyper["max_depth"]) for j in jobs] == [
        (0.1, 3),
        (0.1, 5),
        (0.2, 3),
        (0.2, 5),
        (0.3, 3),
        (0.3, 5),
    ]
    assert len({j.job_id for j in jobs}) == 6


def test_a_seed_sweep_gives_one_job_per_seed_with_the_same_hyper(tmp_path):
    jobs = jobs_of(
        tmp_path, GBT + "hyper = { max_depth = 4 }\nseed = 9\n[jobs.sweep]\nseed = [0, 1, 2]\n"
    )
    assert [(j.name, j.seed) for j in jobs] == [
        ("a[seed=0]", 0),
        ("a[seed=1]", 1),
        ("a[seed=2]", 2),
    ]
    assert all(j.hyper == jobs[0].hyper and "seed" not in j.hyper for j in jobs)
    assert len({j.job_id for j in jobs}) == 3


def test_a_sweep_point_of_a_command_job_goes_into_its_hyper(tmp_path):
    jobs = jobs_of(tmp_path, COMMAND + "[jobs.sweep]\nwidth = [8, 16]\nseed = [1]\n")
    assert [(j.name, j.hyper, j.seed) for j in jobs] == [
        ("a[seed=1,width=8]", {"width": 8}, 1),
        ("a[seed=1,width=16]", {"width": 16}, 1),
    ]


def test_a_sweep_over_a_number_and_the_same_digits_as_a_string_gives_two_names(tmp_path):
    jobs = jobs_of(tmp_path, COMMAND + 'sweep = { k = [1, "1", 1.0, true, "a,b"] }\n')
    assert [j.name for j in jobs] == ["a[k=1]", 'a[k="1"]', "a[k=1.0]", "a[k=True]", 'a[k="a,b"]']


@pytest.mark.parametrize(
    "key, fix",
    [
        ("sed", "did you mean 'seed'?"),
        ("max_dept", "did you mean 'max_depth'?"),
        ("lr", "did you mean 'learning_rate'?"),
    ],
)
def test_an_unknown_swept_key_is_matched_against_seed_and_the_trainers_keys(tmp_path, key, fix):
    p = only_problem(tmp_path, GBT + f"[jobs.sweep]\n{key} = [0, 1]\n")
    assert (p.line, p.field, p.message, p.fix) == (
        6,
        f"jobs[0].sweep.{key}",
        "unknown key for model 'gbt'",
        fix,
    )


def test_an_unknown_swept_key_with_no_likely_match_lists_every_key_a_sweep_takes_seed_included(
    tmp_path,
):
    p = only_problem(tmp_path, GBT + "[jobs.sweep]\nzzz = [0, 1]\n")
    assert p.fix.startswith("known keys: n_estimators, max_depth") and p.fix.endswith(", seed")
