"""A search's settings as frozen values: ``SearchConfig`` with its ``Range``/``Choices`` space,
its ``Direction`` and its sampler and pruner (``Component``: an Optuna class by the name a
manifest uses, with its effective constructor arguments).

Pure, and the one shape every layer reads: the publisher builds it from ``[jobs.search]``
(``manifest.search.parse``), Redis keeps it as JSON (``to_dict``/``from_dict``), and the
workers build Optuna's objects from it (``state.search.study``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from core.errors import FleetError
from manifest.search import knobs
from manifest.search.pbt import PbtConfig

# metrics that are better high: an accuracy, a score, a reward; anything else (a loss) low
MAXIMIZED = re.compile(r"acc|auc|f1|score|r2|precision|recall|reward|return|map\b|iou|bleu", re.I)


class Direction(str, Enum):
    """Which way a search's metric is better."""

    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"

    @classmethod
    def parse(cls, text: str) -> Direction:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise FleetError(f"--direction {text!r}: choose minimize or maximize") from None

    @classmethod
    def guess(cls, metric: str) -> Direction:
        """Maximize an accuracy, a score or a reward; minimize anything else (a loss, an error)."""
        return cls.MAXIMIZE if MAXIMIZED.search(metric) else cls.MINIMIZE


@dataclass(frozen=True)
class Range:
    """A number drawn from [low, high]: on a log scale, or on a grid of ``step``."""

    low: float
    high: float
    log: bool = False
    step: float | None = None
    integer: bool = False

    def text(self) -> str:
        """``log-uniform in [0.0001, 0.1]``, ``integer in [32, 256] step 32``."""
        kind = ("log-" if self.log else "") + ("integer" if self.integer else "uniform")
        step = f" step {self.step:g}" if self.step is not None else ""
        return f"{kind} in [{self.low:g}, {self.high:g}]{step}"

    def grid(self) -> list:
        """Each value of a stepped range, low first (the grid sampler's points)."""
        assert self.step is not None, "only a stepped range has a grid"
        n = int(round((self.high - self.low) / self.step))
        values = [self.low + i * self.step for i in range(n + 1)]
        return [int(v) for v in values] if self.integer else values

    def to_dict(self) -> dict:
        return {
            "low": self.low,
            "high": self.high,
            "log": self.log,
            "step": self.step,
            "int": self.integer,
        }


@dataclass(frozen=True)
class Choices:
    """One of a list of values, in the order the space declares them."""

    values: tuple

    def text(self) -> str:
        return "one of " + ", ".join(json.dumps(c) for c in self.values)

    def to_dict(self) -> dict:
        return {"choices": list(self.values)}


Dist = Range | Choices


def dist_from_dict(d: Mapping) -> Dist:
    if "choices" in d:
        return Choices(tuple(d["choices"]))
    return Range(d["low"], d["high"], bool(d.get("log")), d.get("step"), bool(d.get("int")))


@dataclass(frozen=True)
class Component:
    """An Optuna sampler or pruner: the manifest's name for it and the keyword arguments its
    class is built with (every one fleet passes, defaults included: what --dry-run shows)."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """``asha(min_resource=5, reduction_factor=3, ...)``; the bare name without arguments."""
        inner = ", ".join(f"{k}={json.dumps(v)}" for k, v in self.args.items())
        return f"{self.name}({inner})" if inner else self.name

    def to_dict(self) -> dict:
        return {"name": self.name, "args": dict(self.args)}

    @classmethod
    def from_dict(cls, d: Mapping) -> Component:
        return cls(d["name"], dict(d.get("args") or {}))


@dataclass(frozen=True)
class SearchConfig:
    """What a search runs: its budget, its objective, how it samples and prunes, its space."""

    metric: str
    space: Mapping[str, Dist]
    trials: int = 20
    parallel: int = 4
    direction: Direction = Direction.MINIMIZE
    sampler: Component = Component("tpe")
    pruner: Component = Component("none")
    seed: int = 0
    max_failures: int = 5
    # the step a trial that runs to its end reports last (its fixed budget, e.g. `epochs`);
    # None when the space samples the budget or the job's is unknown
    last_step: int | None = None
    # population-based training (manifest.search.pbt): its trials are the members
    pbt: PbtConfig | None = None

    def to_dict(self) -> dict:
        """JSON-ready; the search's id is a digest of it (``manifest.search.spec``)."""
        return {
            "trials": self.trials,
            "parallel": self.parallel,
            "metric": self.metric,
            "direction": self.direction.value,
            "sampler": self.sampler.to_dict(),
            "pruner": self.pruner.to_dict(),
            "seed": self.seed,
            "max_failures": self.max_failures,
            "last_step": self.last_step,
            "space": {k: v.to_dict() for k, v in self.space.items()},
            # only when set: a search without PBT keeps the id it always had
            **({"pbt": self.pbt.to_dict()} if self.pbt is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> SearchConfig:
        """From ``to_dict``'s JSON (a record written before tables: sampler and pruner as
        bare names, ``min_resource`` beside them)."""
        last_step = d.get("last_step")

        def component(kind: str, default: str) -> Component:
            got = d.get(kind, default)
            if not isinstance(got, str):
                return Component.from_dict(got)
            # a bare name: built as the publisher builds it today, defaults filled in
            first = knobs.FIRST_STEP_ARG.get(got) if kind == "pruner" else None
            given = {first: d["min_resource"]} if first and "min_resource" in d else {}
            return Component(got, knobs.effective(kind, got, given, last_step))

        return cls(
            metric=d["metric"],
            space={k: dist_from_dict(v) for k, v in (d.get("space") or {}).items()},
            trials=int(d.get("trials", 20)),
            parallel=int(d.get("parallel", 4)),
            direction=Direction(d.get("direction", Direction.MINIMIZE)),
            sampler=component("sampler", "tpe"),
            pruner=component("pruner", "none"),
            seed=int(d.get("seed", 0)),
            max_failures=int(d.get("max_failures", 5)),
            last_step=last_step,
            pbt=PbtConfig.from_dict(d["pbt"]) if d.get("pbt") else None,
        )
