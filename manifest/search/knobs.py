"""Optuna's samplers and pruners by the names a manifest uses, and the constructor arguments
a manifest may set on each.

``sampler = "tpe"`` or ``sampler = { name = "tpe", n_startup_trials = 10 }``: the keys beside
``name`` are the Optuna class's own keyword arguments. Each is listed here with the kind TOML
writes it in and Optuna's default, so a publisher without Optuna checks them too;
``tests/unit/test_search_knobs.py`` pins this table to the installed Optuna's signatures. An
argument that takes a Python object (a callable, a sampler) is not listed: TOML cannot write it.
Where fleet's default differs from Optuna's, ``fleet_defaults`` says so and docs/search.md
why. Pure: ``state.search.study`` builds the classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from manifest.fields import KIND_WORDS, is_kind

AUTO = "auto"


@dataclass(frozen=True)
class Arg:
    """One constructor argument: its kind (``manifest.fields`` kinds, plus ``int|auto`` and
    ``num|none``) and Optuna's default for it."""

    kind: str
    default: Any


@dataclass(frozen=True)
class Knob:
    """One Optuna class as a manifest names it."""

    cls: str  # "samplers.TPESampler": under the optuna package
    args: Mapping[str, Arg] = field(default_factory=dict)
    # arguments fleet sets itself, and what sets them
    managed: Mapping[str, str] = field(default_factory=dict)


_SEEDED = {"seed": "the search's seed sets it (each trial's sampler is seeded from it)"}
_NO_ARGS = Knob("pruners.NopPruner")
_PERCENTILE_ARGS = {
    "n_startup_trials": Arg("int", 5),
    "n_warmup_steps": Arg("int", 0),
    "interval_steps": Arg("int", 1),
    "n_min_trials": Arg("int", 1),
}

SAMPLERS: dict[str, Knob] = {
    "tpe": Knob(
        "samplers.TPESampler",
        {
            "consider_prior": Arg("bool", None),
            "prior_weight": Arg("num", None),
            "consider_magic_clip": Arg("bool", None),
            "consider_endpoints": Arg("bool", None),
            "n_startup_trials": Arg("int", 10),
            "n_ei_candidates": Arg("int", 24),
            "multivariate": Arg("bool", None),
            "group": Arg("bool", False),
            "warn_independent_sampling": Arg("bool", None),
            "constant_liar": Arg("bool", True),
        },
        _SEEDED,
    ),
    "random": Knob("samplers.RandomSampler", {}, _SEEDED),
    "grid": Knob(
        "samplers.GridSampler",
        {},
        {"search_space": "the space's choices and steps", "seed": "the search's seed"},
    ),
    "qmc": Knob(
        "samplers.QMCSampler",
        {
            "qmc_type": Arg("str", "sobol"),
            "scramble": Arg("bool", False),
            "warn_asynchronous_seeding": Arg("bool", True),
            "warn_independent_sampling": Arg("bool", True),
        },
        _SEEDED,
    ),
    "cmaes": Knob(
        "samplers.CmaEsSampler",
        {
            "sigma0": Arg("num", None),
            "n_startup_trials": Arg("int", 1),
            "warn_independent_sampling": Arg("bool", True),
            "consider_pruned_trials": Arg("bool", False),
            "restart_strategy": Arg("str", None),
            "popsize": Arg("int", None),
            "inc_popsize": Arg("int", -1),
            "use_separable_cma": Arg("bool", False),
            "with_margin": Arg("bool", False),
            "lr_adapt": Arg("bool", False),
        },
        _SEEDED,
    ),
    "gp": Knob(
        "samplers.GPSampler",
        {
            "n_startup_trials": Arg("int", 10),
            "deterministic_objective": Arg("bool", False),
            "warn_independent_sampling": Arg("bool", True),
        },
        _SEEDED,
    ),
    "nsga2": Knob(
        "samplers.NSGAIISampler",
        {
            "population_size": Arg("int", 50),
            "mutation_prob": Arg("num", None),
            "crossover_prob": Arg("num", 0.9),
            "swapping_prob": Arg("num", 0.5),
        },
        _SEEDED,
    ),
    "bruteforce": Knob(
        "samplers.BruteForceSampler", {"avoid_premature_stop": Arg("bool", False)}, _SEEDED
    ),
}

PRUNERS: dict[str, Knob] = {
    "none": _NO_ARGS,
    "median": Knob("pruners.MedianPruner", _PERCENTILE_ARGS),
    "percentile": Knob(
        "pruners.PercentilePruner", {"percentile": Arg("num", None)} | _PERCENTILE_ARGS
    ),
    "asha": Knob(
        "pruners.SuccessiveHalvingPruner",
        {
            "min_resource": Arg("int|auto", AUTO),
            "reduction_factor": Arg("int", 4),
            "min_early_stopping_rate": Arg("int", 0),
            "bootstrap_count": Arg("int", 0),
        },
    ),
    "hyperband": Knob(
        "pruners.HyperbandPruner",
        {
            "min_resource": Arg("int", 1),
            "max_resource": Arg("int|auto", AUTO),
            "reduction_factor": Arg("int", 3),
            "bootstrap_count": Arg("int", 0),
        },
    ),
}

# The argument each pruner starts judging at: where a bare `min_resource` of the search goes.
FIRST_STEP_ARG = {
    "median": "n_warmup_steps",
    "percentile": "n_warmup_steps",
    "asha": "min_resource",
    "hyperband": "min_resource",
}
PERCENTILE_DEFAULT = 25.0  # Optuna has none; a quarter keeps the best three quarters going


def fleet_defaults(kind: str, name: str, last_step: int | None) -> dict[str, Any]:
    """The arguments whose default fleet chooses (docs/search.md says why); ``last_step``:
    the search's fixed budget, when it has one."""
    if kind == "sampler":
        # parallel trials: without the liar, TPE samples next to the ones still running
        return {"constant_liar": True} if name == "tpe" else {}
    out: dict[str, Any] = {}
    if name in ("median", "percentile"):
        # Optuna judges from step 0: a trial would be cut on its first, noisiest report
        out["n_warmup_steps"] = max(1, last_step // 4) if last_step else 1
    if name == "percentile":
        out["percentile"] = PERCENTILE_DEFAULT
    if name == "hyperband" and last_step:
        out["max_resource"] = last_step  # its brackets span the real budget, not a guess
    return out


def effective(kind: str, name: str, given: Mapping[str, Any], last_step: int | None) -> dict:
    """Every argument the class is built with, by name: Optuna's defaults, fleet's, the
    manifest's; those left at None are Optuna's own choice and are not passed."""
    knob = (SAMPLERS if kind == "sampler" else PRUNERS)[name]
    args = {k: a.default for k, a in knob.args.items()}
    args |= fleet_defaults(kind, name, last_step) | dict(given)
    return {k: v for k, v in args.items() if v is not None}


def kind_ok(value: Any, kind: str) -> bool:
    if kind == "int|auto":
        return value == AUTO or is_kind(value, "int")
    return is_kind(value, kind)


def kind_words(kind: str) -> str:
    return 'an integer or "auto"' if kind == "int|auto" else KIND_WORDS[kind]
