"""Where a queue's messages wait: kombu's priority lists, and one list per owner and priority.

kombu's Redis transport keeps a queue's messages in one list per priority step: ``queue``
for wire priority 0 and ``queue\\x06\\x16N`` for the others. For fair share, fleet pushes a
published job to its owner's list of that priority instead, ``queue\\x06\\x17OWNER\\x06\\x16N``,
and registers ``queue\\x06\\x17OWNER`` in ``C.OWNER_LISTS_KEY`` in the same atomic step
(state/lua/owned.lua). A worker asks for a queue's plain lists first (messages from a
publisher older than owners), then each owner's lists in fair-share order
(tasks/transport.py). Everything that counts or looks for a queue's messages goes through
``depths`` and ``keys_of`` here, so owner lists are never missed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from core import constants as C
from state import scripts

PRIORITY_SEP = "\x06\x16"  # kombu's Channel.sep
OWNER_SEP = "\x06\x17"
PRIORITY_STEPS = tuple(range(C.MAX_PRIORITY + 1))  # kombu's priority_steps (celeryconfig): 0..9


def list_key(queue: str, wire_pri: int) -> str:
    """kombu's own list for ``queue`` at a wire priority (0 is served first)."""
    return f"{queue}{PRIORITY_SEP}{wire_pri}" if wire_pri else queue


def owner_member(queue: str, owner: str) -> str:
    return f"{queue}{OWNER_SEP}{owner}"


def owner_key(queue: str, owner: str | None, wire_pri: int) -> str:
    """The list ``owner``'s messages for ``queue`` wait in; kombu's own list with no owner."""
    if not owner:
        return list_key(queue, wire_pri)
    return f"{owner_member(queue, owner)}{PRIORITY_SEP}{wire_pri}"


@dataclass(frozen=True)
class ListKey:
    """A message list's key, read back: its queue, owner (None: kombu's plain list), priority."""

    queue: str
    owner: str | None
    wire_pri: int


def parse(key: str) -> ListKey:
    """``ListKey`` of any list key ``list_key`` or ``owner_key`` made."""
    head, sep, pri = key.rpartition(PRIORITY_SEP)
    if not sep or not pri.isdigit():
        head, pri = key, "0"
    queue, osep, owner = head.partition(OWNER_SEP)
    return ListKey(queue, owner if osep else None, int(pri))


def queue_of(key: str) -> str:
    return parse(key).queue


def push(client: redis.Redis, key: str, message: str | bytes) -> None:
    """LPUSH ``message`` to ``key`` as fleet's scripts do (lua/owned.lua): an owner's list is
    registered in the same transaction, so workers ask for it."""
    pipe = client.pipeline(transaction=True)
    push_in(pipe, key, message)
    pipe.execute()


def push_in(pipe, key: str, message: str | bytes, leftmost: bool = True) -> None:
    """Queue ``push`` on a transaction someone else executes (LPUSH, or RPUSH: served next)."""
    k = parse(key)
    (pipe.lpush if leftmost else pipe.rpush)(key, message)
    if k.owner:
        pipe.sadd(C.OWNER_LISTS_KEY, owner_member(k.queue, k.owner))


def owners_by_queue(members: Iterable[str]) -> dict[str, list[str]]:
    """``queue -> owners`` from owner-list set members (``queue\\x06\\x17owner``)."""
    out: dict[str, list[str]] = {}
    for m in members:
        queue, sep, owner = m.partition(OWNER_SEP)
        if sep and owner:
            out.setdefault(queue, []).append(owner)
    return out


def registered(client: redis.Redis) -> dict[str, list[str]]:
    """Every queue's owners that may have messages waiting (read-only; the set may hold a
    few whose lists emptied since a worker last pruned it)."""
    return owners_by_queue(_text(m) for m in client.smembers(C.OWNER_LISTS_KEY))


def live(client: redis.Redis) -> dict[str, list[str]]:
    """Like ``registered``, forgetting owner lists that are empty now (one script call)."""
    members = scripts.script(client, "prune_owners")(
        keys=[C.OWNER_LISTS_KEY], args=list(PRIORITY_STEPS)
    )
    return owners_by_queue(_text(m) for m in members)


def keys_of(queue: str, owners: Iterable[str], steps: Iterable[int] = PRIORITY_STEPS) -> list[str]:
    """Every list of ``queue`` in the order a worker serves it: kombu's plain lists by priority,
    then each owner's (in the order given) by priority."""
    steps = tuple(steps)
    keys = [list_key(queue, p) for p in steps]
    for owner in owners:
        keys += [owner_key(queue, owner, p) for p in steps]
    return keys


def depths(client: redis.Redis, queues: Iterable[str]) -> dict[str, list[int]]:
    """Messages waiting per queue by wire priority.

    Every owner's lists and the plain ones summed.
    """
    queues = list(queues)
    owners = registered(client)
    pipe = client.pipeline(transaction=False)
    for q in queues:
        for key in keys_of(q, owners.get(q, ())):
            pipe.llen(key)
    flat = iter(pipe.execute())
    out: dict[str, list[int]] = {}
    n = len(PRIORITY_STEPS)
    for q in queues:
        depth = [0] * n
        for _ in range(1 + len(owners.get(q, ()))):
            for p in range(n):
                depth[p] += next(flat)
        out[q] = depth
    return out


def owner_depths(client: redis.Redis, queue: str) -> dict[str | None, int]:
    """Messages waiting in ``queue`` per owner (None: kombu's plain lists)."""
    owners = registered(client).get(queue, [])
    pipe = client.pipeline(transaction=False)
    for key in keys_of(queue, owners):
        pipe.llen(key)
    flat = pipe.execute()
    n = len(PRIORITY_STEPS)
    out: dict[str | None, int] = {None: sum(flat[:n])}
    for i, owner in enumerate(owners, 1):
        out[owner] = sum(flat[i * n : (i + 1) * n])
    return out


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else v
