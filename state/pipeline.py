"""A pipeline's edges in Redis, read as plain values (views, `fleet why`, Flower, benches).

Two sets per edge end, written by Lua only (lua/publish.lua records them, lua/release.lua
empties and re-arms them; docs/exactly-once.md says why that is safe):

- ``fleet:followers:<member>``: the followers of an upstream (never emptied by a release,
  so a requeue of the upstream finds the followers it cancelled);
- ``fleet:waits:<member>``: a follower's upstreams not yet succeeded. The SREM that empties
  it, while the follower is still ``waiting``, releases it: once.

A member is ``job:<id>`` or ``search:<id>`` (``manifest.pipeline.member``). A follower's own
fields (``after``, ``inputs``, ``input_jobs``, ``params``, ``cancelled_by``) are its job
record's, read through ``state.jobrecord``.
"""

from __future__ import annotations

import redis

from core import constants as C
from manifest.pipeline import Kind, member, parse_member
from state.redis_conn import decoding

__all__ = ["Kind", "member", "parse_member", "waits_on", "followers", "waits_key", "followers_key"]


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
