"""A job's ``[jobs.search]`` table read into a ``SearchConfig``.

Pure: the table is checked like ``hyper`` (each bound and choice against the trainer's schema,
each field's kind, "did you mean" for unknown keys, every problem at its line with a fix).
The sampler and pruner are a name or a table of the Optuna class's own arguments
(``manifest.search.knobs``).
"""

from __future__ import annotations

from typing import Any

from core.constants import DEFAULT_MAX_FAILURES
from manifest.fields import check_table, is_kind, wrong_kind
from manifest.hyper import TRAINERS, check_hyper, unknown_key_fix
from manifest.problems import Problems, suggest
from manifest.search import knobs
from manifest.search.config import Choices, Component, Direction, Dist, Range, SearchConfig

SEARCH_FIELDS = {
    "trials": "int",
    "parallel": "int",
    "metric": "str",
    "direction": "str",
    "seed": "int",
    "max_failures": "int",
    "space": "table",
    "min_resource": "int",
    "last_step": "int",
}
RANGE_FIELDS = {"low": "num", "high": "num", "log": "bool", "step": "num"}
DEFAULTS = {
    "trials": 20,
    "parallel": 4,
    "seed": 0,
    "max_failures": DEFAULT_MAX_FAILURES,
}
MAX_TRIALS = 100_000
# the hyper key that fixes a built-in trainer's budget, the step it reports last
BUDGET_KEYS = {"mlp": "epochs", "gbt": "n_estimators"}
COMMAND_BUDGET_KEY = "epochs"  # a command job's fixed `epochs`, counted 1..epochs as mlp does


def read_config(p: Problems, path: tuple, t: dict) -> SearchConfig | None:
    """Job table ``t``'s search settings with defaults filled, its space checked; None when it
    has none, or has a problem (each reported at its key)."""
    raw = t.get("search")
    if raw is None:
        return None
    mark = len(p.paths)
    path = path + ("search",)
    if not isinstance(raw, dict):
        p.add(path, *wrong_kind("search", raw, "table"))
        return None
    s = check_table(
        p, path, {k: v for k, v in raw.items() if k not in ("sampler", "pruner")}, SEARCH_FIELDS
    )
    c = {**DEFAULTS, **s}
    _settings(p, path, raw, c)
    _refuse_mixes(p, path, t)
    last_step = c.get("last_step", budget(t))
    sampler = _component(p, path, "sampler", raw.get("sampler", "tpe"), {}, last_step)
    first = {} if "min_resource" not in s else {"min_resource": s["min_resource"]}
    pruner = _component(p, path, "pruner", raw.get("pruner", "none"), first, last_step)
    space = _space(p, path + ("space",), s.get("space"), t, sampler)
    if len(p.paths) > mark:
        return None
    return SearchConfig(
        metric=c["metric"],
        space=space,
        trials=c["trials"],
        parallel=c["parallel"],
        direction=Direction(c.get("direction", Direction.MINIMIZE)),
        sampler=sampler,
        pruner=pruner,
        seed=c["seed"],
        max_failures=c["max_failures"],
        last_step=last_step,
    )


def budget(t: dict) -> int | None:
    """The step a trial of table ``t`` reports last, when the job fixes it: a built-in
    trainer's budget key (its default when the table leaves it out), a command job's
    ``epochs``; None when the space samples it, or the job has none."""
    model, hyper, space = t.get("model"), t.get("hyper") or {}, (t.get("search") or {})
    key = BUDGET_KEYS.get(model) if model else COMMAND_BUDGET_KEY
    if key is None or (isinstance(space, dict) and key in (space.get("space") or {})):
        return None
    value = hyper.get(key, TRAINERS[model][key].default if model in TRAINERS else None)
    return value if is_kind(value, "int") and value > 0 else None


def _refuse_mixes(p: Problems, path: tuple, t: dict) -> None:
    if t.get("sweep"):
        p.add(
            path[:-1] + ("sweep",),
            "a job cannot have both sweep and search",
            "move each swept key into [jobs.search.space] as { choices = [...] }, "
            "or split the job in two",
        )
    if t.get("prefer_cuda"):
        p.add(
            path[:-1] + ("prefer_cuda",),
            "a search's trials cannot fall back from GPU to CPU yet",
            "set require_cuda = true, or leave both out to run on CPU",
        )


def _settings(p: Problems, path: tuple, raw: dict, c: dict) -> None:
    if "metric" not in raw:
        p.add(
            path,
            "a search needs the metric it optimises",
            'add metric = "valid_loss" (a key of the job\'s FLEET_METRIC lines)',
        )
    for key, lo, hi in (
        ("trials", 1, MAX_TRIALS),
        ("parallel", 1, 10_000),
        ("max_failures", 1, MAX_TRIALS),
        ("seed", 0, 2**32 - 1),
        ("min_resource", 1, 2**31),
        ("last_step", 1, 2**31),
    ):
        if is_kind(c.get(key), "int") and not lo <= c[key] <= hi:
            p.add(path + (key,), f"must be {lo}..{hi}, got {c[key]}", f"use a value in {lo}..{hi}")
    names = [d.value for d in Direction]
    if isinstance(c.get("direction"), str) and c["direction"] not in names:
        p.add(
            path + ("direction",),
            f"unknown direction {c['direction']!r}",
            f"use one of: {', '.join(names)}",
        )


def _component(
    p: Problems, path: tuple, kind: str, raw: Any, first: dict, last_step: int | None
) -> Component:
    """The sampler or pruner ``raw`` (a name, or a table of its name and Optuna arguments)
    with every argument it is built with; a bad one is reported and the default taken."""
    known = knobs.SAMPLERS if kind == "sampler" else knobs.PRUNERS
    fallback = Component("tpe" if kind == "sampler" else "none")
    where, name_eg = path + (kind,), "tpe" if kind == "sampler" else "asha"
    if not isinstance(raw, (str, dict)):
        p.add(
            where,
            f"must be a name or a table, got {raw!r}",
            f'write {kind} = "{name_eg}" or {kind} = {{ name = "{name_eg}", ... }}',
        )
        return fallback
    if isinstance(raw, str):
        name, at = raw, where
    else:
        name, at = raw.get("name"), where + ("name",) if "name" in raw else where
    if name is None:
        p.add(at, f"a {kind} table needs its name", f'add name = "{name_eg}"')
        return fallback
    if name not in known:
        p.add(at, f"unknown {kind} {name!r}", f"use one of: {', '.join(known)}")
        return fallback
    raw = raw if isinstance(raw, dict) else {"name": raw}
    given = {k: v for k, v in raw.items() if k != "name"}
    if first:
        given = _first_step(p, path, name, given, first["min_resource"])
    good = _arguments(p, where, name, known[name], given)
    return Component(name, knobs.effective(kind, name, good, last_step))


def _arguments(p: Problems, where: tuple, name: str, knob: knobs.Knob, given: dict) -> dict:
    """The arguments of ``given`` that ``knob``'s class takes, each of its kind; the others
    reported at their key."""
    good = {}
    for key, value in given.items():
        if key in knob.managed:
            p.add(where + (key,), f"fleet sets {key}: {knob.managed[key]}", f"remove {key}")
        elif key not in knob.args:
            p.add(
                where + (key,),
                f"not an argument of optuna.{knob.cls}",
                suggest(key, knob.args) if knob.args else f"{name} takes no arguments",
            )
        elif not knobs.kind_ok(value, knob.args[key].kind):
            words = knobs.kind_words(knob.args[key].kind)
            p.add(where + (key,), f"must be {words}, got {value!r}", f"write it as {words}")
        else:
            good[key] = value
    return good


def _first_step(p: Problems, path: tuple, pruner: str, given: dict, step: int) -> dict:
    """A search's ``min_resource`` as the pruner's own argument for its first judged step."""
    arg = knobs.FIRST_STEP_ARG.get(pruner)
    if arg is None:
        p.add(
            path + ("min_resource",),
            f"pruner {pruner!r} judges no step: min_resource has nothing to set",
            'set a pruner (e.g. pruner = "asha"), or remove min_resource',
        )
        return given
    if arg in given:
        p.add(
            path + ("min_resource",),
            f"the pruner table sets {arg} already",
            "keep one of the two",
        )
        return given
    return {**given, arg: step}


def _space(p: Problems, path: tuple, space: dict | None, t: dict, sampler: Component) -> dict:
    if not space:
        p.add(
            path,
            "a search needs a space of at least one key",
            "add [jobs.search.space] with e.g. "
            "learning_rate = { low = 1e-4, high = 1e-1, log = true }",
        )
        return {}
    out = {}
    for name, raw in space.items():
        if (dist := _one(p, path + (name,), name, raw, t, sampler.name)) is not None:
            out[name] = dist
    return out


def _one(p: Problems, path: tuple, name: str, raw: Any, t: dict, sampler: str) -> Dist | None:
    """One key of the space: ``Choices`` or ``Range``."""
    model = t.get("model")
    if model in TRAINERS and name not in TRAINERS[model]:
        p.add(path, f"unknown key for model {model!r}", unknown_key_fix(name, TRAINERS[model]))
        return None
    if name in (t.get("hyper") or {}):
        p.add(path, f"{name} is set in both hyper and the search space", "keep it in one place")
        return None
    if not isinstance(raw, dict):
        p.add(path, "must be a table", "write { low = ..., high = ... } or { choices = [...] }")
        return None
    if "choices" in raw:
        return _choices(p, path, raw, model, name)
    mark = len(p.paths)
    check_table(p, path, raw, RANGE_FIELDS)
    if len(p.paths) > mark:
        return None
    dist = _range(p, path, raw, model, name)
    if dist is not None and sampler == "grid" and dist.step is None:
        p.add(path, "the grid sampler needs a finite grid", "give it choices = [...] or a step")
        return None
    return dist


def _choices(p: Problems, path: tuple, raw: dict, model: str | None, name: str) -> Choices | None:
    choices = raw["choices"]
    if not isinstance(choices, list) or not choices or len(raw) > 1:
        p.add(path, "choices must be a non-empty list, alone", "write { choices = [a, b, ...] }")
        return None
    if model in TRAINERS:
        choices = [_as_param(TRAINERS[model][name].type, c) for c in choices]
        if not _checked(p, path + ("choices",), model, name, choices):
            return None
    return Choices(tuple(choices))


def _as_param(kind: type, value: Any) -> Any:
    # a list of layer widths reads as the trainer's "128,64"
    if kind is str and isinstance(value, list) and all(is_kind(v, "int") for v in value):
        return ",".join(map(str, value))
    return value


def _range(p: Problems, path: tuple, raw: dict, model: str | None, name: str) -> Range | None:
    if not all(k in raw for k in ("low", "high")):
        p.add(path, "a range needs numbers low and high", "write { low = 0.001, high = 0.1 }")
        return None
    low, high, log, step = raw["low"], raw["high"], raw.get("log", False), raw.get("step")
    as_int = all(is_kind(v, "int") for v in (low, high, step if step is not None else 0))
    if model in TRAINERS:
        as_int = TRAINERS[model][name].type is int
        if as_int and not all(is_kind(v, "int") for v in (low, high)):
            p.add(
                path,
                f"{name} is an integer: low and high must be integers",
                "write e.g. { low = 32, high = 256 }",
            )
            return None
        if not _checked(p, path, model, name, [low, high]):
            return None
    problem = _range_problem(low, high, log, step)
    if problem:
        p.add(path, *problem)
        return None
    return Range(low, high, log, step, as_int)


def _range_problem(low, high, log, step) -> tuple[str, str] | None:
    if low > high:
        return f"low {low} is above high {high}", "swap them"
    if log and low <= 0:
        return f"a log range needs low > 0, got {low}", "use e.g. low = 1e-5"
    if log and step is not None:
        return "a range is either log or stepped, not both", "remove log or step"
    if step is not None and step <= 0:
        return f"step must be > 0, got {step}", "use e.g. step = 1"
    return None


def _checked(p: Problems, path: tuple, model: str, name: str, values: list) -> bool:
    """Each value against the trainer's schema; False (reported) on the first bad one."""
    for v in values:
        for _, message, fix in check_hyper(model, {name: v}):
            p.add(path, message, fix)
            return False
    return True
