"""The Lua script registry (state.scripts): every script under state/lua resolves, parts are
not scripts of their own, a bad include names its line, and no other module reads, loads or
runs a script."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from core.errors import ConfigError
from state import scripts

ROOT = Path(__file__).resolve().parents[2]
CODE = ("core", "routing", "manifest", "state", "artifacts", "trainers", "tasks", "fleet", "bench")


def test_every_file_under_state_lua_is_a_script_or_a_part_some_script_includes():
    parts = {p for text in scripts.SOURCES.values() for p in scripts.includes(text)}
    assert parts == {"owned", "publish", "release"}
    assert set(scripts.SCRIPTS) | parts == set(scripts.SOURCES)
    assert {"claim", "ack", "publish_many", "search_issue", "prune_owners"} <= set(scripts.SCRIPTS)


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
def test_every_include_of_a_script_is_resolved(name):
    text = scripts.get(name).text
    assert scripts.includes(text) == []
    for part in scripts.includes(scripts.SOURCES[name]):
        assert scripts.resolve(part, scripts.SOURCES) in text


def test_an_include_is_spliced_at_its_own_line_and_resolves_its_own_includes():
    sources = {"a": "x\n--@@B@@\ny", "b": "--@@C@@\nb", "c": "c"}
    assert scripts.resolve("a", sources) == "x\nc\nb\ny"


def test_a_marker_inside_a_line_is_no_include():
    # e.g. the message tag placeholder a script matches with string.gsub
    sources = {"a": "local t = '--@@B@@'\nstring.gsub(m, '@@FLEET%-TAG@@', x)"}
    assert scripts.resolve("a", sources) == sources["a"]


def test_an_include_of_a_missing_file_names_the_script_its_line_and_the_file():
    with pytest.raises(ConfigError, match=r"a\.lua line 2: --@@NOPE@@ includes .*nope\.lua"):
        scripts.resolve("a", {"a": "x\n--@@NOPE@@\n"})


def test_an_include_circle_is_refused_naming_the_circle():
    with pytest.raises(ConfigError, match="a -> b -> a"):
        scripts.resolve("a", {"a": "--@@B@@", "b": "--@@A@@"})


def test_an_unknown_script_name_lists_the_scripts_there_are():
    with pytest.raises(ConfigError, match=r"no Lua script 'clam'.*claim"):
        scripts.get("clam")


def test_a_script_is_registered_once_per_client():
    import redis

    client = redis.Redis()  # no connection is made: register_script only hashes the text
    first = scripts.script(client, "claim")
    assert scripts.script(client, "claim") is first
    assert first.sha == scripts.get("claim").sha
    assert scripts.script(redis.Redis(), "claim") is not first


def _lua_paths(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that name a Lua file or state/lua (docstrings aside)."""
    docs = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and (node.value.endswith(".lua") or node.value.startswith("lua/") or node.value == "lua")
    ]


def test_no_module_but_the_registry_reads_a_lua_script():
    files = [p for top in CODE for p in (ROOT / top).rglob("*.py")]
    files += [p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_scripts.py"]
    files.append(ROOT / "celeryconfig.py")
    found = [
        f"{p.relative_to(ROOT)}:{line}: {text!r}"
        for p in files
        if p != ROOT / "state" / "scripts.py"
        for line, text in _lua_paths(ast.parse(p.read_text(), str(p)))
    ]
    assert found == [], "run scripts through state.scripts (script/get), not by reading lua/"


# redis-py's ways to run or load a script: only state/scripts.py calls them
SCRIPT_CALLS = ("eval", "eval_ro", "evalsha", "evalsha_ro", "register_script", "script_load")


def _script_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls of ``x.eval(...)`` and its kin, with arguments (torch's ``net.eval()`` has none);
    ``super().evalsha`` (an override that adds to EVALSHA, state/redis_conn.py) is no way of
    its own to run a script."""
    return [
        (node.lineno, node.func.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SCRIPT_CALLS
        and (node.args or node.keywords)
        and not (
            isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "super"
        )
    ]


# a bench's baseline that is no product script: the bare push a release is measured against
BENCH_FLOORS = {"bench/pipeline.py"}


def test_no_module_but_the_registry_runs_or_loads_a_script():
    # the code only: a test may load a script's text to check that Redis compiles it
    files = [p for top in CODE for p in (ROOT / top).rglob("*.py")] + [ROOT / "celeryconfig.py"]
    found = [
        f"{p.relative_to(ROOT)}:{line}: .{call}("
        for p in files
        if p != ROOT / "state" / "scripts.py" and f"{p.relative_to(ROOT)}" not in BENCH_FLOORS
        for line, call in _script_calls(ast.parse(p.read_text(), str(p)))
    ]
    assert found == [], "run scripts by name through state.scripts (script/read_only)"


def test_the_scan_would_see_a_script_run_another_way():
    code = "c.eval(T, 0)\nc.register_script(T)\nsuper().evalsha(s)\nnet.eval()"
    assert _script_calls(ast.parse(code)) == [(1, "eval"), (2, "register_script")]


READS = {"GET", "HGET", "HMGET", "EXISTS", "HEXISTS", "SMEMBERS", "SISMEMBER", "SCARD", "LLEN"}
READS |= {"LRANGE", "LPOS", "ZRANGE", "ZRANK", "ZRANGEBYSCORE"}


def test_the_scripts_that_only_read_are_the_ones_run_as_evalsha_ro():
    # a read-only ACL user (fleet-readonly) may run EVALSHA_RO, and only a script that writes
    # nothing: bulk.py's states and names (tests/integration/test_scripts.py sees them run so)
    called = {
        n: set(re.findall(r"redis\.call\('([A-Z]+)'", s.text)) for n, s in scripts.SCRIPTS.items()
    }
    assert all(called.values()), "a script calls Redis as redis.call('CMD', ...)"
    assert {n for n, cmds in called.items() if cmds <= READS} == {"states", "names"}


def test_the_scan_would_see_a_read_of_a_lua_file():
    code = 'resources.files("state").joinpath(f"lua/{name}.lua").read_text()\nopen("x.lua")'
    assert sorted(line for line, _ in _lua_paths(ast.parse(code))) == [1, 1, 2]
