"""A pipeline member's one spelling: ``job:<id>`` or ``search:<id>``.

An upstream or a follower is a job or a search, known by its ID; Redis sets and Lua name it by
this string (``state/lua/release.lua``), so one set holds either kind. Here, below every layer,
so that the readers of those sets (``fleet status``) need nothing of the manifest's.
"""

from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    """What an upstream is."""

    JOB = "job"
    SEARCH = "search"  # done once every trial it issued ended; its best trial is its result


def member(kind: Kind | str, ident: str) -> str:
    """The upstream's or follower's name in Redis sets: ``job:<id>`` or ``search:<id>``."""
    return f"{Kind(kind).value}:{ident}"


def parse_member(text: str) -> tuple[Kind, str]:
    """``member``'s inverse; a string that is not one raises ValueError naming it."""
    kind, sep, ident = text.partition(":")
    if not sep or not ident or kind not in Kind._value2member_map_:
        raise ValueError(f"{text!r} is not a pipeline member (job:<id> or search:<id>)")
    return Kind(kind), ident
