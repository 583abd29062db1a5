"""Hyperparameters of the built-in trainers: names, types, ranges and defaults.

Pure data and checks: no numpy, pandas, torch or xgboost, so the publisher can validate a
manifest's ``hyper`` tables on a host without the ``train`` extra, and an operator can list
what each trainer takes (``TRAINERS``, each ``Param.to_dict()``). The trainers themselves
(``trainers/``) read their defaults from here.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from core.errors import ManifestError, Problem

MAX_HIDDEN_LAYERS = 16
MAX_LAYER_WIDTH = 65536
# Names other libraries use for our keys; difflib alone cannot see that 'lr' is 'learning_rate'.
ALIASES = {
    "lr": "learning_rate",
    "eta": "learning_rate",
    "num_boost_round": "n_estimators",
    "rounds": "n_estimators",
    "depth": "max_depth",
    "lambda": "reg_lambda",
    "hidden": "hidden_sizes",
    "layers": "hidden_sizes",
    "bs": "batch_size",
    "wd": "weight_decay",
    "optim": "optimizer",
    "label": "target",
    "y": "target",
    "validation_fraction": "valid_fraction",
    "num_epochs": "epochs",
}


@dataclass(frozen=True)
class Param:
    """One hyperparameter. ``min``/``max`` bound numbers inclusively unless ``min_exclusive``."""

    name: str
    type: type
    default: Any
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    help: str = ""
    min_exclusive: bool = False
    check: Callable[[Any], str | None] | None = None  # extra check: returns a message or None
    # another spelling people write, turned into the one representation before any check
    coerce: Callable[[Any], Any] | None = None

    @property
    def range_text(self) -> str:
        """The accepted interval of a number, e.g. ``(0, 1]``; ``[-inf, inf)`` when unbounded."""
        lo = "(" if self.min_exclusive else "["
        lo += "-inf" if self.min is None else f"{self.min:g}"
        hi = "inf)" if self.max is None else f"{self.max:g}]"
        return f"{lo}, {hi}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what a listing of the trainer's hyperparameters shows."""
        numeric = self.type in (int, float)
        return {
            "name": self.name,
            "type": self.type.__name__,
            "default": self.default,
            "range": self.range_text if numeric else None,
            "choices": list(self.choices) if self.choices is not None else None,
            "help": self.help,
        }


def parse_hidden_sizes(value: str) -> tuple[int, ...]:
    """``"64,32"`` -> ``(64, 32)``; raises ValueError naming the bad part."""
    parts = [p.strip() for p in value.split(",")]
    if not value.strip() or any(not p for p in parts):
        raise ValueError(f"{value!r} is not a comma-separated list of layer widths")
    sizes = []
    for p in parts:
        if not p.isdigit():
            raise ValueError(f"layer width {p!r} is not a whole number")
        sizes.append(int(p))
    if len(sizes) > MAX_HIDDEN_LAYERS:
        raise ValueError(f"{len(sizes)} layers is more than {MAX_HIDDEN_LAYERS}")
    if any(not 1 <= s <= MAX_LAYER_WIDTH for s in sizes):
        raise ValueError(f"every layer width must be in 1..{MAX_LAYER_WIDTH}")
    return tuple(sizes)


def widths_text(value: Any) -> Any:
    """A TOML list of layer widths, ``[64, 32]``, as the one representation ``"64,32"``."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return value


def _check_hidden_sizes(value: str) -> str | None:
    try:
        parse_hidden_sizes(value)
    except ValueError as e:
        return str(e)
    return None


def _table(*params: Param) -> dict[str, Param]:
    return {p.name: p for p in params}


def _target() -> Param:
    return Param("target", str, "target", help="name of the label column")


def _valid_fraction() -> Param:
    return Param("valid_fraction", float, 0.2, 0.05, 0.5, help="share of rows held out")


TRAINERS: dict[str, dict[str, Param]] = {
    "gbt": _table(
        Param("n_estimators", int, 200, 1, 100000, help="boosting rounds (upper bound)"),
        Param("max_depth", int, 6, 1, 64),
        Param("learning_rate", float, 0.1, 0, 1, min_exclusive=True),
        Param("subsample", float, 1.0, 0, 1, min_exclusive=True),
        Param("colsample_bytree", float, 1.0, 0, 1, min_exclusive=True),
        Param("min_child_weight", float, 1.0, 0),
        Param("reg_lambda", float, 1.0, 0),
        Param(
            "objective",
            str,
            "auto",
            choices=("auto", "binary:logistic", "multi:softprob", "reg:squarederror"),
            help="auto: chosen from the target column",
        ),
        Param("early_stopping_rounds", int, 20, 0, 10000, help="0 turns early stopping off"),
        _target(),
        _valid_fraction(),
    ),
    "mlp": _table(
        Param(
            "hidden_sizes",
            str,
            "64,32",
            help='layer widths, e.g. "64,32"',
            check=_check_hidden_sizes,
            coerce=widths_text,
        ),
        Param("epochs", int, 20, 1, 10000),
        Param("batch_size", int, 256, 1, 65536),
        Param("learning_rate", float, 1e-3, 0, 10, min_exclusive=True),
        Param("weight_decay", float, 0.0, 0),
        Param("dropout", float, 0.0, 0, 0.95),
        Param("optimizer", str, "adam", choices=("adam", "adamw", "sgd")),
        Param(
            "task",
            str,
            "auto",
            choices=("auto", "classification", "regression"),
            help="auto: classification when the target looks like labels",
        ),
        _target(),
        _valid_fraction(),
    ),
}


def _type_ok(param: Param, value: Any) -> bool:
    if isinstance(value, bool):  # bool is an int subclass; never accept it as a number
        return param.type is bool
    if param.type is float:
        return isinstance(value, (int, float))
    return isinstance(value, param.type)


def _check_value(p: Param, value: Any) -> tuple[str, str] | None:
    """(message, fix) for a bad value, or None."""
    value = p.coerce(value) if p.coerce else value
    if not _type_ok(p, value):
        got = type(value).__name__
        return f"must be {p.type.__name__}, got {got} {value!r}", f"use e.g. {p.default!r}"
    if p.type in (int, float):
        if not math.isfinite(value):
            return f"must be a finite number, got {value!r}", f"use e.g. {p.default!r}"
        too_low = p.min is not None and (value <= p.min if p.min_exclusive else value < p.min)
        too_high = p.max is not None and value > p.max
        if too_low or too_high:
            return f"{value!r} is out of range {p.range_text}", f"use a value in {p.range_text}"
    if p.choices is not None and value not in p.choices:
        return (
            f"{value!r} is not one of {', '.join(map(repr, p.choices))}",
            f"use one of {', '.join(map(repr, p.choices))}",
        )
    if p.check is not None and (message := p.check(value)):
        return message, f"use e.g. {p.default!r}"
    return None


def unknown_key_fix(key: str, known: Iterable[str]) -> str:
    """The fix for an unknown key among ``known`` names: the one it most likely meant (its
    alias, or the closest spelling), else the list of them."""
    known = list(known)
    alias = ALIASES.get(key.lower())
    close = [alias] if alias in known else difflib.get_close_matches(key, known, n=1)
    return f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"


def check_hyper(model: str, hyper: dict) -> list[tuple[str, str, str]]:
    """Every problem in ``hyper`` for ``model`` as (key, message, fix); empty when valid."""
    if not isinstance(model, str) or model not in TRAINERS:
        known = ", ".join(sorted(TRAINERS))
        return [("", f"unknown model {model!r}", f"use one of: {known}")]
    if not isinstance(hyper, dict):
        got = type(hyper).__name__
        return [("", f"hyper must be a table, got {got}", "write key = value pairs")]
    params = TRAINERS[model]
    problems = []
    for key, value in hyper.items():
        if key not in params:
            fix = unknown_key_fix(str(key), params)
            problems.append((str(key), f"unknown key for model {model!r}", fix))
        elif bad := _check_value(params[key], value):
            problems.append((key, *bad))
    return problems


def resolve_hyper(model: str, hyper: dict) -> dict:
    """``hyper`` with every default filled in; raises ManifestError listing every problem."""
    problems = check_hyper(model, hyper)
    if problems:
        raise ManifestError(
            [Problem("hyper", None, key or "model", message, fix) for key, message, fix in problems]
        )
    params = TRAINERS[model]
    resolved = {name: p.default for name, p in params.items()}
    resolved.update({k: params[k].coerce(v) if params[k].coerce else v for k, v in hyper.items()})
    for name, p in TRAINERS[model].items():  # an int given for a float stays a float downstream
        if p.type is float:
            resolved[name] = float(resolved[name])
    return resolved
