"""manifest.hyper, the built-in trainers' hyperparameter schema: every problem check_hyper
reports, defaults, and that it stays pure."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.errors import ManifestError
from manifest.hyper import TRAINERS, Param, check_hyper, parse_hidden_sizes, resolve_hyper
from trainers.protocol import format_metric_line, parse_metric_line


def keys(problems):
    return [key for key, _, _ in problems]


def test_defaults_are_valid_for_every_trainer():
    for model, params in TRAINERS.items():
        defaults = {name: p.default for name, p in params.items()}
        assert check_hyper(model, defaults) == [], model


def test_an_empty_hyper_is_valid_and_resolves_to_the_defaults():
    assert check_hyper("gbt", {}) == []
    resolved = resolve_hyper("gbt", {})
    assert resolved["n_estimators"] == 200 and resolved["objective"] == "auto"
    assert resolve_hyper("mlp", {})["hidden_sizes"] == "64,32"


def test_resolve_keeps_given_values_and_makes_ints_for_floats_floats():
    resolved = resolve_hyper("mlp", {"epochs": 3, "learning_rate": 1})
    assert resolved["epochs"] == 3
    assert resolved["learning_rate"] == 1.0 and isinstance(resolved["learning_rate"], float)


def test_resolve_raises_a_manifest_error_listing_every_problem():
    with pytest.raises(ManifestError) as info:
        resolve_hyper("gbt", {"lr": 0.1, "max_depth": 0})
    assert [p.field for p in info.value.problems] == ["lr", "max_depth"]


@pytest.mark.parametrize(
    "model, key, suggestion",
    [
        ("gbt", "lr", "learning_rate"),
        ("gbt", "max_dept", "max_depth"),
        ("gbt", "n_estimator", "n_estimators"),
        ("mlp", "hidden_size", "hidden_sizes"),
        ("mlp", "epoch", "epochs"),
    ],
)
def test_an_unknown_key_suggests_the_closest_known_key(model, key, suggestion):
    [(got_key, message, fix)] = check_hyper(model, {key: 1})
    assert got_key == key and "unknown key" in message
    assert fix == f"did you mean {suggestion!r}?"


def test_an_unknown_key_with_no_close_match_lists_the_known_keys():
    [(_, _, fix)] = check_hyper("gbt", {"zzzz": 1})
    assert fix.startswith("known keys:") and "n_estimators" in fix


@pytest.mark.parametrize(
    "model, key, value",
    [
        ("gbt", "n_estimators", 2.0),  # a float is not an int
        ("gbt", "n_estimators", True),  # bool is not an int
        ("gbt", "max_depth", "6"),
        ("gbt", "learning_rate", "0.1"),
        ("gbt", "subsample", False),  # bool is not a float either
        ("gbt", "objective", 1),
        ("mlp", "hidden_sizes", 64),  # one width is still written as a list: [64]
        ("mlp", "optimizer", None),
    ],
)
def test_a_value_of_the_wrong_type_is_reported(model, key, value):
    [(got_key, message, fix)] = check_hyper(model, {key: value})
    assert got_key == key and message.startswith("must be ") and fix


def test_an_int_is_fine_where_a_float_is_expected():
    assert check_hyper("gbt", {"learning_rate": 1, "min_child_weight": 0}) == []


@pytest.mark.parametrize(
    "model, key, value",
    [
        ("gbt", "n_estimators", 0),
        ("gbt", "n_estimators", 100001),
        ("gbt", "max_depth", 65),
        ("gbt", "learning_rate", 0.0),  # the lower bound is exclusive
        ("gbt", "learning_rate", 1.5),
        ("gbt", "subsample", 0),
        ("gbt", "reg_lambda", -0.1),
        ("gbt", "early_stopping_rounds", -1),
        ("gbt", "valid_fraction", 0.01),
        ("mlp", "epochs", 0),
        ("mlp", "batch_size", 65537),
        ("mlp", "learning_rate", 0),
        ("mlp", "dropout", 0.96),
        ("mlp", "weight_decay", -1e-4),
        ("mlp", "valid_fraction", 0.6),
        ("gbt", "reg_lambda", float("nan")),
        ("gbt", "reg_lambda", float("inf")),
    ],
)
def test_a_value_out_of_range_is_reported_with_the_range(model, key, value):
    [(got_key, message, fix)] = check_hyper(model, {key: value})
    assert got_key == key
    assert "out of range" in message or "finite" in message
    assert fix.startswith("use ")


@pytest.mark.parametrize(
    "model, key, value",
    [
        ("gbt", "learning_rate", 1.0),
        ("gbt", "valid_fraction", 0.05),
        ("gbt", "valid_fraction", 0.5),
        ("mlp", "dropout", 0.0),
        ("mlp", "dropout", 0.95),
        ("gbt", "early_stopping_rounds", 0),
    ],
)
def test_inclusive_bounds_accept_the_bound_itself(model, key, value):
    assert check_hyper(model, {key: value}) == []


@pytest.mark.parametrize(
    "model, key, value",
    [
        ("gbt", "objective", "binary:hinge"),
        ("mlp", "optimizer", "rmsprop"),
        ("mlp", "task", "ranking"),
    ],
)
def test_a_value_not_among_the_choices_lists_the_choices(model, key, value):
    [(got_key, message, fix)] = check_hyper(model, {key: value})
    assert got_key == key and "is not one of" in message
    for choice in TRAINERS[model][key].choices:
        assert repr(choice) in fix


@pytest.mark.parametrize(
    "text", ["", "64,,32", "64,x", "0", "-4", "64, 70000", ",".join(["8"] * 17)]
)
def test_bad_hidden_sizes_are_reported(text):
    [(key, message, fix)] = check_hyper("mlp", {"hidden_sizes": text})
    assert key == "hidden_sizes" and message and fix == "use e.g. '64,32'"


def test_hidden_sizes_may_be_a_toml_list_and_resolve_to_the_one_representation():
    assert check_hyper("mlp", {"hidden_sizes": [64, 32]}) == []
    assert resolve_hyper("mlp", {"hidden_sizes": [64, 32]})["hidden_sizes"] == "64,32"
    assert resolve_hyper("mlp", {"hidden_sizes": [128]})["hidden_sizes"] == "128"


@pytest.mark.parametrize(
    "widths, said",
    [
        ([], "is not a comma-separated list"),
        ([64, "x"], "'x' is not a whole"),
        ([64.5], "'64.5' is not a whole"),
        ([0], "in 1.."),
    ],
)
def test_a_bad_list_of_widths_names_the_bad_width(widths, said):
    [(key, message, _)] = check_hyper("mlp", {"hidden_sizes": widths})
    assert key == "hidden_sizes" and said in message


def test_hidden_sizes_parse_to_a_tuple_of_widths():
    assert parse_hidden_sizes("64, 32,8") == (64, 32, 8)
    assert parse_hidden_sizes("16") == (16,)


@pytest.mark.parametrize("model", ["svm", "", None, "GBT"])
def test_an_unknown_model_is_one_problem_naming_the_known_models(model):
    [(key, message, fix)] = check_hyper(model, {"n_estimators": 5})
    assert key == "" and "unknown model" in message
    assert "gbt" in fix and "mlp" in fix


def test_a_hyper_that_is_not_a_table_is_one_problem():
    [(key, message, _)] = check_hyper("gbt", [("n_estimators", 5)])
    assert key == "" and "table" in message


def test_every_problem_is_reported_not_just_the_first():
    problems = check_hyper("gbt", {"lr": 0.1, "max_depth": 0, "objective": "x", "subsample": "1"})
    assert keys(problems) == ["lr", "max_depth", "objective", "subsample"]


def test_params_are_frozen():
    with pytest.raises(AttributeError):
        TRAINERS["gbt"]["max_depth"].default = 3  # type: ignore[misc]
    assert isinstance(TRAINERS["gbt"]["max_depth"], Param)


def test_each_param_lists_as_plain_data_with_its_type_range_default_and_choices():
    params = TRAINERS["gbt"]
    assert params["learning_rate"].to_dict() == {
        "name": "learning_rate",
        "type": "float",
        "default": 0.1,
        "range": "(0, 1]",
        "choices": None,
        "help": "",
    }
    assert params["min_child_weight"].to_dict()["range"] == "[0, inf)"
    objective = params["objective"].to_dict()
    assert (objective["type"], objective["range"], objective["choices"][0]) == ("str", None, "auto")
    assert all(json.dumps(p.to_dict()) for ps in TRAINERS.values() for p in ps.values())


def test_metric_lines_round_trip_and_other_lines_are_ignored():
    line = format_metric_line({"epoch": 3, "train_loss": 0.41})
    assert line == 'FLEET_METRIC {"epoch": 3, "train_loss": 0.41}'
    assert parse_metric_line(line) == {"epoch": 3, "train_loss": 0.41}
    assert parse_metric_line("epoch 3 done") is None
    assert parse_metric_line("FLEET_METRIC {not json") is None
    assert parse_metric_line("FLEET_METRIC [1, 2]") is None


def test_schema_and_protocol_import_no_heavy_libraries():
    code = (
        "import sys, manifest.hyper, trainers.protocol; "
        "print(sorted(m for m in ('numpy', 'pandas', 'torch', 'xgboost') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
