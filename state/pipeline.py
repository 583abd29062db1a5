"""A pipeline's edges in Redis, read as plain values (views, `fleet why`, Flower, benches).

Two sets per edge end, written by Lua only (lua/publish.lua records them, lua/release.lua
empties and re-arms them; docs/exactly-once.md says why that is safe):

- ``fleet:followers:<member>``: the followers of an upstream (never emptied by a release,
  so a requeue of the upstream finds the followers it cancelled);
- ``fleet:waits:<member>``: a follower's upstreams not yet succeeded. The SREM that empties
  it, while the follower is still ``waiting``, releases it: once.
- ``fleet:releasing:<member>`` and the ``fleet:releases`` index: a succeeded upstream's
  followers its end's own script left for later (a fan-out wider than one slice), taken a
  slice per call by ``release_slice``: right after the end by the process that recorded it,
  and by the reaper each round, so one that died between slices leaves nothing behind.

A member is ``job:<id>`` or ``search:<id>`` (``manifest.pipeline.member``). A follower's own
fields (``after``, ``inputs``, ``input_jobs``, ``params``, ``cancelled_by``) are its job
record's, read through ``state.jobrecord``.
"""

from __future__ import annotations

import time

import redis

from core import constants as C
from manifest.pipeline import Kind, member, parse_member
from state import scripts
from state.jobrecord import JOB_KEY_PREFIX
from state.redis_conn import decoding

__all__ = [
    "Kind",
    "member",
    "parse_member",
    "waits_on",
    "followers",
    "waits_key",
    "followers_key",
    "release_slice",
    "release_rest",
]


def waits_key(kind: Kind | str, ident: str) -> str:
    return C.WAITS_KEY + member(kind, ident)


def followers_key(kind: Kind | str, ident: str) -> str:
    return C.FOLLOWERS_KEY + member(kind, ident)


def waits_on(client: redis.Redis, kind: Kind | str, ident: str) -> list[str]:
    """The members the follower still waits for, sorted (empty: released, or no edges)."""
    return sorted(decoding(client).smembers(waits_key(kind, ident)))


def followers(client: redis.Redis, kind: Kind | str, ident: str) -> list[str]:
    """The members of everything published to start after this upstream, sorted."""
    return sorted(decoding(client).smembers(followers_key(kind, ident)))


def release_slice(client: redis.Redis, upstream: str = "") -> tuple[int, int, str]:
    """One slice of a release left to finish (lua/release_rest.lua): of ``upstream``'s (a
    member), or of the one waiting longest. (released, left, its upstream); the upstream is
    "" when no release is left."""
    n, left, um = scripts.script(decoding(client), "release_rest")(
        args=[JOB_KEY_PREFIX, time.time(), upstream]
    )
    return int(n), int(left), um


def release_rest(client: redis.Redis) -> list[str]:
    """Finish every release left, a slice per script call (any process may, at once: a slice
    releases each follower once); a line per upstream whose followers it released."""
    done: dict[str, int] = {}
    while True:
        n, _, um = release_slice(client)
        if not um:
            return [f"released {k} follower(s) of {m}" for m, k in done.items() if k]
        done[um] = done.get(um, 0) + n
