"""A job's ``[jobs.search]`` table read into a ``SearchConfig``.

Pure: the table is checked like ``hyper`` (each bound and choice against the trainer's schema,
each field's kind, "did you mean" for unknown keys, every problem at its line with a fix).
The sampler and pruner are a name or a table of the Optuna class's own arguments
(``manifest.search.knobs``).
"""

from __future__ import annotations

import math
from typing import Any

from core.constants import DEFAULT_MAX_FAILURES
from manifest.fields import check_table, is_kind, wrong_kind
from manifest.hyper import TRAINERS, check_hyper, unknown_key_fix
from manifest.problems import Problems, suggest
from manifest.search import knobs, pbt
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
    "population": "int",
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
    own = ("sampler", "pruner", "scheduler")
    s = check_table(p, path, {k: v for k, v in raw.items() if k not in own}, SEARCH_FIELDS)
    c = {**DEFAULTS, **s}
    _settings(p, path, raw, c)
    _refuse_mixes(p, path, t)
    last_step = c.get("last_step", budget(t))
    scheduler = _scheduler(p, path, raw, s, t, last_step)
    if scheduler is not None:  # every member is queued at once: the budget is the population
        c["trials"] = c["parallel"] = scheduler.population
    default_sampler = "random" if scheduler is not None else "tpe"
    sampler = _component(p, path, "sampler", raw.get("sampler", default_sampler), {}, last_step)
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
        pbt=scheduler,
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


def _scheduler(
    p: Problems, path: tuple, raw: dict, s: dict, t: dict, last_step: int | None
) -> pbt.PbtConfig | None:
    """The ``scheduler`` table (population-based training) with its ``population``; None
    when the search has neither, or either has a problem (each reported at its key)."""
    table, population = raw.get("scheduler"), s.get("population")
    if table is None and population is None:
        return None
    where, mark = path + ("scheduler",), len(p.paths)
    example = (
        '{ name = "pbt", interval = 10, quantile = 0.25, resample_probability = 0.25, '
        "perturbation_factors = [0.8, 1.2] }"
    )
    if table is None:
        p.add(
            path + ("population",), "a population needs its scheduler", f"add scheduler = {example}"
        )
        return None
    if not isinstance(table, dict):
        p.add(where, f"must be a table, got {table!r}", f"write scheduler = {example}")
        return None
    given = check_table(
        p, where, {k: v for k, v in table.items() if k != pbt.FACTORS_KEY}, pbt.SCHEDULER_FIELDS
    )
    _scheduler_values(p, where, table, given, last_step)
    _pbt_job(p, path, raw, s, t, population, last_step)
    if len(p.paths) > mark:
        return None
    return pbt.PbtConfig(
        population=population,
        interval=given["interval"],
        quantile=float(given.get("quantile", pbt.DEFAULT_QUANTILE)),
        resample_probability=float(
            given.get("resample_probability", pbt.DEFAULT_RESAMPLE_PROBABILITY)
        ),
        perturbation_factors=tuple(
            float(f) for f in table.get(pbt.FACTORS_KEY, pbt.DEFAULT_FACTORS)
        ),
    )


def _scheduler_values(
    p: Problems, where: tuple, table: dict, given: dict, last_step: int | None
) -> None:
    """Each of the scheduler's values in its range (their kinds were checked already)."""
    name = given.get("name")
    if "name" not in table:
        p.add(where, "a scheduler table needs its name", f'add name = "{pbt.SCHEDULER}"')
    elif isinstance(name, str) and name != pbt.SCHEDULER:
        p.add(where + ("name",), f"unknown scheduler {name!r}", f'use name = "{pbt.SCHEDULER}"')
    interval = given.get("interval")
    if "interval" not in table:
        p.add(
            where,
            "a pbt scheduler needs its interval",
            "add interval = 10 (steps between boundaries)",
        )
    elif interval is not None and interval < 1:
        p.add(where + ("interval",), f"must be >= 1, got {interval}", "use e.g. interval = 10")
    elif interval is not None and last_step is not None and interval >= last_step:
        p.add(
            where + ("interval",),
            f"interval {interval} leaves no boundary before last_step {last_step}",
            f"use an interval below {last_step}",
        )
    q = given.get("quantile")
    if q is not None and not 0 < q <= 0.5:
        p.add(where + ("quantile",), f"must be in (0, 0.5], got {q}", "use e.g. quantile = 0.25")
    rp = given.get("resample_probability")
    if rp is not None and not 0 <= rp <= 1:
        p.add(
            where + ("resample_probability",),
            f"must be in [0, 1], got {rp}",
            "use e.g. resample_probability = 0.25",
        )
    if pbt.FACTORS_KEY in table:
        f = table[pbt.FACTORS_KEY]
        if not (
            isinstance(f, list)
            and f
            and all(is_kind(x, "num") and math.isfinite(x) and x > 0 for x in f)
        ):
            p.add(
                where + (pbt.FACTORS_KEY,),
                f"must be a non-empty list of numbers > 0, got {f!r}",
                "write e.g. perturbation_factors = [0.8, 1.2]",
            )


def _pbt_job(
    p: Problems,
    path: tuple,
    raw: dict,
    s: dict,
    t: dict,
    population: int | None,
    last_step: int | None,
) -> None:
    """What a PBT search needs of its job and of the rest of its table."""
    if population is None:
        p.add(path, "a pbt scheduler needs its population", "add population = 8 (members)")
    elif not pbt.MIN_POPULATION <= population <= pbt.MAX_POPULATION:
        p.add(
            path + ("population",),
            f"must be {pbt.MIN_POPULATION}..{pbt.MAX_POPULATION}, got {population}",
            f"use a population in {pbt.MIN_POPULATION}..{pbt.MAX_POPULATION}",
        )
    if last_step is None:
        p.add(
            path,
            "a pbt search needs the step its members end at",
            "add last_step = 100 (the step each member reports last)",
        )
    if not t.get("checkpoint"):
        p.add(
            path[:-1],
            "a pbt search needs the job's checkpoint: a member takes another's to go on",
            'add checkpoint = "ckpt/" and resume from $FLEET_CHECKPOINT_DIR in the job',
        )
    for key, why in (
        ("trials", "the population is the budget"),
        ("parallel", "every member is queued at once; the hosts bound how many run"),
    ):
        if key in s:
            p.add(path + (key,), f"a pbt search takes no {key}: {why}", f"remove {key}")
    pruner = raw.get("pruner", "none")
    if (pruner.get("name") if isinstance(pruner, dict) else pruner) != "none":
        p.add(
            path + ("pruner",),
            "a pbt search stops no member early: its bottom members take better ones' checkpoints",
            "remove pruner",
        )
    if isinstance(t.get("nodes"), int) and t["nodes"] > 1:
        p.add(
            path[:-1] + ("nodes",),
            "a pbt search's members cannot be gangs yet",
            "remove nodes, or use a search without a scheduler",
        )
