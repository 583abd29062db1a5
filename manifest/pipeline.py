"""A pipeline's edges as values: what a job waits for (``after``), whose bundles it takes
(``inputs``) and whose best values it trains with (``params_from``).

An upstream is a job or a search, known by its ID. Redis keys and Lua name it by its
*member* string, ``job:<id>`` or ``search:<id>``: one spelling for both kinds, so a follower's
set of upstreams still awaited and an upstream's set of followers hold either kind.
A sweep is not a kind: a sweep named in a manifest stands for its points, each a job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# the members' spelling lives in core (fleet status reads it without the manifest); here too,
# beside the values that use it
from core.members import Kind, member, parse_member  # noqa: F401


@dataclass(frozen=True)
class Upstream:
    """One job or search a follower starts after."""

    kind: Kind
    id: str
    name: str  # as the manifest (or the names index) calls it, for messages and views

    @property
    def member(self) -> str:
        return member(self.kind, self.id)

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "id": self.id, "name": self.name}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Upstream:
        return cls(Kind(d["kind"]), d["id"], d["name"])


@dataclass(frozen=True)
class Input:
    """One upstream whose bundle the follower gets under ``$FLEET_INPUTS/<dir>/``: a job's own
    bundle, a search's best trial's; a sweep gives one Input per point, ``dir`` its point
    name (``prep[lr=0.1]``)."""

    name: str  # as written in ``inputs``
    dir: str
    kind: Kind
    id: str

    @property
    def member(self) -> str:
        return member(self.kind, self.id)

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "dir": self.dir, "kind": self.kind.value, "id": self.id}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Input:
        return cls(d["name"], d["dir"], Kind(d["kind"]), d["id"])


def record_fields(
    after: tuple[Upstream, ...], inputs: tuple[Input, ...], params_from: str | None
) -> dict[str, str]:
    """A follower's edges as its record stores them (lua/publish.lua, lua/search_create.lua);
    none for a job without edges: a record holding ``after`` is what makes it wait."""
    if not after:
        return {}
    out = {"after": json.dumps([u.to_dict() for u in after])}
    if inputs:
        out["inputs"] = json.dumps([i.to_dict() for i in inputs])
    if params_from:
        out["params_from"] = params_from
    return out


def waits_note(after: tuple[Upstream, ...]) -> str:
    """What a follower's plan row adds: the upstreams it waits on (a sweep's points as one
    name), so that a dry run shows the pipeline's order before anything is sent."""
    names = list(dict.fromkeys(u.name.split("[", 1)[0] for u in after))
    if not names:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"; waits on {shown}"
