"""The built-in trainers and their hyperparameters as plain rows, from the schema that
validates manifests (``manifest.hyper``), for `fleet trainers`, its ``--json`` and the
table in docs/manifest.md (``markdown``; a test fails when the page drifts from it)."""

from __future__ import annotations

from dataclasses import dataclass

from manifest.hyper import TRAINERS, Param


@dataclass(frozen=True)
class HyperRow:
    """One hyperparameter of one trainer, as people read it."""

    trainer: str
    name: str
    type: str
    default: object
    range: str  # "" when any value of the type goes; else bounds or the choices
    help: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def bounds(p: Param) -> str:
    """``[1, 64]``, ``(0, 1]``, ``>= 0``, one of ``a | b``; empty when unbounded. Pure."""
    if p.choices:
        return " | ".join(map(str, p.choices))
    if p.min is None and p.max is None:
        return ""
    if p.max is None:
        return f"{'>' if p.min_exclusive else '>='} {p.min:g}"
    lo = "(" if p.min_exclusive else "["
    return f"{lo}{'-inf' if p.min is None else f'{p.min:g}'}, {p.max:g}]"


def rows(trainer: str | None = None) -> list[HyperRow]:
    return [
        HyperRow(name, p.name, p.type.__name__, p.default, bounds(p), p.help)
        for name, params in TRAINERS.items()
        if trainer in (None, name)
        for p in params.values()
    ]


def markdown() -> str:
    """docs/manifest.md's table of every trainer's hyperparameters."""
    out = [
        "| trainer | hyperparameter | type | default | range | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows():
        out.append(
            f"| `{r.trainer}` | `{r.name}` | {r.type} | `{r.default!r}` | "
            f"{r.range.replace('|', '&#124;')} "
            f"| {r.help} |".replace("|  |", "| |")
        )
    return "\n".join(out) + "\n"
