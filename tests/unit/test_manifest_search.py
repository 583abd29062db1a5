"""[jobs.search]: checked like hyper (line, field, the trainer's schema, did you mean), its
space normalised, its id from its content; and the pure parts of a search (trial seeds, the
status line, the step of a metric line)."""

import dataclasses

import pytest

from manifest.loader import load
from manifest.search.config import Choices, Range, SearchConfig
from manifest.search.spec import trial_job_id, trial_name
from state.jobrecord import JobState
from state.search.study import trial_seed
from state.search.view import SearchView
from tasks.run import Stop
from tasks.runend import stopped_at_end, stopped_early
from tasks.trial import trial_budget
from tests.unit.manifest_cases import COMMAND, only_problem, problems, write

MLP = '[[jobs]]\nname = "t"\nmodel = "mlp"\ndata = "d.csv"\nhyper = { epochs = 4 }\n'
SEARCH = '[jobs.search]\nmetric = "valid_loss"\n[jobs.search.space]\n'  # space keys start at line 9


def search_of(tmp_path, text: str):
    (s,) = load(write(tmp_path, text)).searches
    return s


def test_a_search_is_its_base_job_and_a_normalised_space(tmp_path):
    s = search_of(
        tmp_path,
        MLP + SEARCH + "learning_rate = { low = 1e-4, high = 1e-1, log = true }\n"
        "batch_size = { low = 32, high = 256, step = 32 }\n"
        "hidden_sizes = { choices = [[64], [128, 64]] }\n",
    )
    assert s.name == "t" and s.base.hyper["epochs"] == 4 and s.base.search == s.search_id
    # layer lists read as the trainer's text
    assert s.config.space == {
        "learning_rate": Range(1e-4, 0.1, log=True),
        "batch_size": Range(32, 256, step=32, integer=True),
        "hidden_sizes": Choices(("64", "128,64")),
    }
    c = s.config
    # the last step: the mlp's fixed epochs
    assert (c.trials, c.parallel, c.sampler.name, c.max_failures, c.last_step) == (
        20,
        4,
        "tpe",
        5,
        4,
    )
    assert SearchConfig.from_dict(c.to_dict()) == c
    assert s.trial_name(3) == trial_name("t", 3) == "t[trial=3]"
    assert any("log-uniform in [0.0001, 0.1]" in line for line in s.describe())


def test_the_same_search_has_the_same_id_and_a_changed_one_another(tmp_path):
    text = MLP + SEARCH + "dropout = { low = 0.0, high = 0.5 }\n"
    same = search_of(tmp_path, text).search_id
    assert search_of(tmp_path, text.replace('name = "t"', 'name = "renamed"')).search_id == same
    assert search_of(tmp_path, text.replace("0.5", "0.6")).search_id != same
    assert search_of(tmp_path, text.replace("epochs = 4", "epochs = 5")).search_id != same
    assert trial_job_id(same, 0) != trial_job_id(same, 1) and trial_job_id(same, 0) == trial_job_id(
        same, 0
    )


@pytest.mark.parametrize(
    "line, field, message, fix",
    [
        (
            "lr = { low = 1e-4, high = 1e-1 }",
            "lr",
            "unknown key for model 'mlp'",
            "did you mean 'learning_rate'?",
        ),
        (
            "dropout = { low = 0.0, high = 2.0 }",
            "dropout",
            "2.0 is out of range [0, 0.95]",
            "use a value in [0, 0.95]",
        ),
        (
            "batch_size = { low = 1.5, high = 8 }",
            "batch_size",
            "batch_size is an integer: low and high must be integers",
            "write e.g. { low = 32, high = 256 }",
        ),
        (
            'optimizer = { choices = ["adam", "lion"] }',
            "optimizer.choices",
            "'lion' is not one of 'adam', 'adamw', 'sgd'",
            "use one of 'adam', 'adamw', 'sgd'",
        ),
        (
            "epochs = { low = 1, high = 9 }",
            "epochs",
            "epochs is set in both hyper and the search space",
            "keep it in one place",
        ),
        (
            "learning_rate = { low = 0.1, high = 0.01 }",
            "learning_rate",
            "low 0.1 is above high 0.01",
            "swap them",
        ),
        (
            "weight_decay = { low = 0.0, high = 1.0, log = true }",
            "weight_decay",
            "a log range needs low > 0, got 0.0",
            "use e.g. low = 1e-5",
        ),
        (
            "dropout = { low = 0.0, hihg = 0.5 }",
            "dropout.hihg",
            "unknown key",
            "did you mean 'high'?",
        ),
    ],
)
def test_a_bad_space_key_is_reported_at_its_line_with_a_fix(tmp_path, line, field, message, fix):
    p = only_problem(tmp_path, MLP + SEARCH + line + "\n")
    assert (p.line, p.field, p.message, p.fix) == (9, f"jobs[0].search.space.{field}", message, fix)


def test_bad_settings_are_each_reported(tmp_path):
    found = problems(
        tmp_path,
        COMMAND + '[jobs.search]\ntrials = 0\nsampler = "tpee"\npruner = "asha2"\n'
        'direction = "down"\n[jobs.search.space]\nx = { low = 0, high = 1 }\n',
    )
    assert [(p.field, p.message) for p in found] == [
        ("jobs[0].search", "a search needs the metric it optimises"),
        ("jobs[0].search.trials", "must be 1..100000, got 0"),
        ("jobs[0].search.sampler", "unknown sampler 'tpee'"),
        ("jobs[0].search.pruner", "unknown pruner 'asha2'"),
        ("jobs[0].search.direction", "unknown direction 'down'"),
    ]


def test_min_resource_is_the_pruners_first_judged_step_and_at_least_one(tmp_path):
    p = only_problem(
        tmp_path,
        COMMAND + SEARCH.replace("]\n", "]\nmin_resource = 2\n", 1) + "x = { low = 0, high = 1 }\n",
    )
    assert (p.field, p.fix) == (
        "jobs[0].search.min_resource",
        'set a pruner (e.g. pruner = "asha"), or remove min_resource',
    )
    p = only_problem(
        tmp_path,
        COMMAND
        + SEARCH.replace("]\n", ']\npruner = "asha"\nmin_resource = 0\n', 1)
        + "x = { low = 0, high = 1 }\n",
    )
    assert (p.field, p.message) == ("jobs[0].search.min_resource", "must be 1..2147483648, got 0")
    s = search_of(
        tmp_path,
        COMMAND
        + SEARCH.replace("]\n", ']\npruner = "asha"\nmin_resource = 2\n', 1)
        + "x = { low = 0, high = 1 }\n",
    )
    assert s.config.pruner.args["min_resource"] == 2
    s = search_of(
        tmp_path,
        COMMAND
        + SEARCH.replace("]\n", ']\npruner = "median"\nmin_resource = 3\n', 1)
        + "x = { low = 0, high = 1 }\n",
    )
    assert s.config.pruner.args["n_warmup_steps"] == 3  # median judges from step 3 on


def test_a_search_with_a_sweep_is_refused_with_what_to_do(tmp_path):
    p = only_problem(
        tmp_path, COMMAND + "[jobs.sweep]\nseed = [1, 2]\n" + SEARCH + "x = { low = 0, high = 1 }\n"
    )
    assert (p.field, p.message) == ("jobs[0].sweep", "a job cannot have both sweep and search")
    assert "[jobs.search.space]" in p.fix


def test_a_grid_search_needs_a_finite_grid(tmp_path):
    p = only_problem(
        tmp_path,
        COMMAND
        + SEARCH.replace("]\n", ']\nsampler = "grid"\n', 1)
        + "x = { low = 0.0, high = 1.0 }\n",
    )
    assert (p.field, p.message) == (
        "jobs[0].search.space.x",
        "the grid sampler needs a finite grid",
    )


def test_a_command_jobs_space_takes_any_numbers_and_choices(tmp_path):
    s = search_of(
        tmp_path,
        COMMAND + SEARCH + 'x = { low = -1, high = 1 }\nk = { choices = ["a", 2, [1, 2]] }\n',
    )
    assert s.config.space["x"].integer and s.config.space["k"] == Choices(("a", 2, [1, 2]))
    assert s.config.space["k"].text() == 'one of "a", 2, [1, 2]'


def test_a_trials_seed_depends_on_the_search_seed_and_its_number_only():
    assert trial_seed(0, 5) == trial_seed(0, 5) and len({trial_seed(0, n) for n in range(50)}) == 50
    assert trial_seed(1, 5) != trial_seed(0, 5)


def test_a_search_shows_as_one_status_line_with_its_best_and_why_it_stopped():
    v = SearchView(
        search_id="s",
        name="tune-mlp",
        config=SearchConfig("valid_loss", {}, trials=64),
        issued=45,
        ended=37,
        counts={JobState.SUCCEEDED: 20, JobState.PRUNED: 12, JobState.FAILED: 5},
        running=8,
        best_value=0.0812,
        best_trial=23,
    )
    assert v.summary() == (
        "tune-mlp: search 37/64, 8 running, 12 pruned, 5 failed, best valid_loss=0.0812 (trial 23)"
    )
    stopped = SearchView(**{**v.__dict__, "running": 0, "stopped": "5 trials failed in a row"})
    assert stopped.summary().endswith("; stopped: 5 trials failed in a row") and stopped.done
    why = "no 'val_accuracy' in trial 0's metric lines; it printed valid_accuracy, train_loss"
    failing = SearchView(**{**v.__dict__, "last_failure": why})
    assert failing.summary().endswith("; last failure: " + why) and not failing.done


@pytest.mark.parametrize(
    "stopped, returncode, ran_to_end, pruned, killed_at_end",
    [
        (Stop.PRUNED, -9, False, True, False),  # the runner stopped it: its supervisor's kill
        (Stop.PRUNED, 0, False, False, False),  # it exited by itself before the stop landed
        (Stop.PRUNED, -9, True, False, True),  # killed after it reported its last step: complete
        (None, 0, False, False, False),
        (None, 1, True, False, False),  # it crashed by itself after its last step: a failure
        (Stop.TIMEOUT, -9, True, False, False),
    ],
)
def test_a_run_is_pruned_only_when_its_pruner_stopped_it_before_it_exited_or_ended(
    stopped, returncode, ran_to_end, pruned, killed_at_end
):
    assert stopped_early(stopped, returncode, ran_to_end) is pruned
    assert stopped_at_end(stopped, ran_to_end) is killed_at_end


def test_a_trial_whose_space_samples_its_budget_is_judged_by_its_own_last_step():
    from manifest.schema import JobSpec

    job = JobSpec(
        name="m[trial=0]", job_id="j", model="mlp", hyper={"epochs": 6}, search="s", trial=0
    )
    config = SearchConfig(metric="val_loss", space={}, trials=2, parallel=1)
    assert trial_budget(job, config) == 6
    assert trial_budget(job, dataclasses.replace(config, last_step=9)) == 9
