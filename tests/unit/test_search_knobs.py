"""A search's sampler and pruner: a name or a table of the Optuna class's own arguments,
checked at their line (unknown names get did-you-mean, wrong kinds the kind wanted), with
fleet's defaults and the search's fixed budget filled in; the table pinned to Optuna's
signatures; and every space field's kind checked."""

import inspect

import pytest

from manifest.search import knobs
from manifest.search.config import Component, Range
from manifest.search.parse import budget
from tests.unit.manifest_cases import COMMAND, load, only_problem, write

# settings are added after metric, from line 7; a space key after them
HEAD = COMMAND + 'hyper = { epochs = 20 }\n[jobs.search]\nmetric = "loss"\n'
SPACE = "[jobs.search.space]\nx = { low = 0.0, high = 1.0 }\n"


def config_of(tmp_path, settings: str):
    (s,) = load(write(tmp_path, HEAD + settings + "\n" + SPACE)).searches
    return s.config


@pytest.mark.parametrize(
    "settings, kind, name, args",
    [
        (
            'sampler = { name = "tpe", n_startup_trials = 10, multivariate = true }',
            "sampler",
            "tpe",
            {"n_startup_trials": 10, "multivariate": True, "constant_liar": True},
        ),
        ('sampler = "random"', "sampler", "random", {}),
        (
            'pruner = { name = "asha", min_resource = 5, reduction_factor = 3 }',
            "pruner",
            "asha",
            {"min_resource": 5, "reduction_factor": 3, "min_early_stopping_rate": 0},
        ),
        (
            'pruner = { name = "median", n_warmup_steps = 5 }',
            "pruner",
            "median",
            {"n_warmup_steps": 5, "n_startup_trials": 5},
        ),
        # fleet's defaults: a quarter of the budget warms up, hyperband spans the budget
        ('pruner = "median"', "pruner", "median", {"n_warmup_steps": 5, "interval_steps": 1}),
        ('pruner = "percentile"', "pruner", "percentile", {"percentile": 25.0}),
        ('pruner = "hyperband"', "pruner", "hyperband", {"max_resource": 20, "min_resource": 1}),
        ('pruner = "asha"', "pruner", "asha", {"min_resource": "auto", "reduction_factor": 4}),
        ('pruner = "asha"\nmin_resource = 2', "pruner", "asha", {"min_resource": 2}),
    ],
)
def test_a_sampler_or_pruner_is_built_with_its_given_arguments_and_the_defaults(
    tmp_path, settings, kind, name, args
):
    c = getattr(config_of(tmp_path, settings), kind)
    assert c.name == name and args.items() <= dict(c.args).items()


@pytest.mark.parametrize(
    "settings, field, message, fix",
    [
        (
            'pruner = { name = "asha", reduction_factr = 3 }',
            "pruner.reduction_factr",
            "not an argument of optuna.pruners.SuccessiveHalvingPruner",
            "did you mean 'reduction_factor'?",
        ),
        (
            'sampler = { name = "tpe", n_startup_trials = "10" }',
            "sampler.n_startup_trials",
            "must be an integer, got '10'",
            "write it as an integer",
        ),
        (
            'pruner = { name = "asha", min_resource = "five" }',
            "pruner.min_resource",
            "must be an integer or \"auto\", got 'five'",
            'write it as an integer or "auto"',
        ),
        (
            'sampler = { name = "tpe", seed = 3 }',
            "sampler.seed",
            "fleet sets seed: the search's seed sets it (each trial's sampler is seeded from it)",
            "remove seed",
        ),
        (
            'pruner = { name = "ashaa" }',
            "pruner.name",
            "unknown pruner 'ashaa'",
            "use one of: none, median, percentile, asha, hyperband",
        ),
        (
            "pruner = { min_resource = 5 }",
            "pruner",
            "a pruner table needs its name",
            'add name = "asha"',
        ),
        ("pruner = 3", "pruner", "must be a name or a table, got 3", None),
        (
            'pruner = { name = "none", n_warmup_steps = 2 }',
            "pruner.n_warmup_steps",
            "not an argument of optuna.pruners.NopPruner",
            "none takes no arguments",
        ),
        (
            'pruner = { name = "median", n_warmup_steps = 2 }\nmin_resource = 3',
            "min_resource",
            "the pruner table sets n_warmup_steps already",
            "keep one of the two",
        ),
    ],
)
def test_a_bad_sampler_or_pruner_argument_is_reported_at_its_line(
    tmp_path, settings, field, message, fix
):
    p = only_problem(tmp_path, HEAD + settings + "\n" + SPACE)
    line = 7 + settings.count("\n")  # the setting's own line: the last of them
    assert (p.line, p.field, p.message) == (line, f"jobs[0].search.{field}", message)
    assert fix is None or p.fix == fix


@pytest.mark.parametrize(
    "entry, field, message",
    [
        ('{ low = 0.1, high = 1.0, log = "false" }', "x.log", "must be true or false, got 'false'"),
        ('{ low = 0.1, high = 1.0, log = "yes" }', "x.log", "must be true or false, got 'yes'"),
        ('{ low = 0, high = 8, step = "2" }', "x.step", "must be a number, got '2'"),
        ('{ low = "0", high = 1 }', "x.low", "must be a number, got '0'"),
        ("{ low = 0, high = 1, lo = 1 }", "x.lo", "unknown key"),
    ],
)
def test_each_space_field_has_its_kind_checked_at_its_line(tmp_path, entry, field, message):
    p = only_problem(tmp_path, HEAD + "[jobs.search.space]\nx = " + entry + "\n")
    assert (p.line, p.field, p.message) == (8, f"jobs[0].search.space.{field}", message)


def test_log_false_is_a_linear_range(tmp_path):
    (s,) = load(
        write(tmp_path, HEAD + "[jobs.search.space]\nx = { low = 0.1, high = 1.0, log = false }\n")
    ).searches
    assert s.config.space["x"] == Range(0.1, 1.0, log=False)


@pytest.mark.parametrize(
    "table, last",
    [
        ({"model": "mlp", "hyper": {"epochs": 7}}, 7),
        ({"model": "mlp"}, 20),  # the trainer's default epochs
        ({"model": "gbt", "hyper": {"n_estimators": 50}}, 50),
        ({"command": ["x"], "hyper": {"epochs": 9}}, 9),
        ({"command": ["x"]}, None),
        ({"model": "mlp", "search": {"space": {"epochs": {"low": 1, "high": 9}}}}, None),
    ],
)
def test_a_search_has_a_last_step_where_its_job_fixes_its_budget(table, last):
    assert budget(table) == last


def test_dry_run_shows_the_effective_arguments_defaults_included(tmp_path):
    (s,) = load(
        write(tmp_path, HEAD + 'pruner = { name = "asha", min_resource = 5 }\n' + SPACE)
    ).searches
    lines = s.describe()
    assert ", last step 20," in lines[0]
    assert lines[1].startswith("  sampler tpe(") and "constant_liar=true" in lines[1]
    assert lines[2] == (
        "  pruner asha(min_resource=5, reduction_factor=4, min_early_stopping_rate=0, "
        "bootstrap_count=0)"
    )


KNOBS = [("sampler", n, k) for n, k in knobs.SAMPLERS.items()] + [
    ("pruner", n, k) for n, k in knobs.PRUNERS.items()
]


@pytest.mark.parametrize("kind, name, knob", KNOBS, ids=[f"{k}-{n}" for k, n, _ in KNOBS])
def test_the_arguments_table_matches_optunas_signatures_and_builds_each_class(kind, name, knob):
    pytest.importorskip("optuna")
    from manifest.search.config import SearchConfig
    from state.search import study

    where, cls_name = knob.cls.split(".")
    cls = getattr(getattr(study._optuna(), where), cls_name)
    params = inspect.signature(cls.__init__).parameters
    for arg, spec in knob.args.items():
        assert arg in params, f"optuna.{knob.cls} has no argument {arg}"
        default = params[arg].default
        assert spec.default == (None if default is inspect.Parameter.empty else default), arg
    for arg in knob.managed:
        assert arg in params
    space = {"x": Range(0, 4, step=1, integer=True)}
    args = knobs.effective(kind, name, {}, 20)
    config = SearchConfig("loss", space, **{kind: Component(name, args)})
    built = study.sampler(config, 0) if kind == "sampler" else study.pruner(config)
    assert type(built) is cls


def test_a_config_recorded_with_bare_names_reads_as_one_built_today():
    from manifest.search.config import SearchConfig

    old = {"metric": "loss", "space": {}, "sampler": "tpe", "pruner": "asha", "min_resource": 3}
    c = SearchConfig.from_dict(old)
    assert c.sampler == Component("tpe", knobs.effective("sampler", "tpe", {}, None))
    assert c.pruner.args["min_resource"] == 3 and c.pruner.args["reduction_factor"] == 4
    assert SearchConfig.from_dict(c.to_dict()) == c
