"""A search's trial hash has one owner, as the job record has: only ``state/search/trial.py``
reads ``fleet:search:<id>:trial:<n>`` outside a Lua script; every other module reads a
``TrialRecord`` through it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.harness.owners import called, raw_hash_reads

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("state", "tasks", "fleet", "bench")
OWNER = ROOT / "state" / "search" / "trial.py"


def names_a_trial_hash(key: ast.expr) -> bool:
    """``key(sid, "trial", n)`` (state.search.store) or ``trial_key(sid, n)``."""
    fn = called(key)
    return fn == "trial_key" or (
        fn == "key"
        and any(isinstance(a, ast.Constant) and a.value == "trial" for a in key.args[1:2])
    )


def raw_trial_reads(tree: ast.AST) -> list[int]:
    return raw_hash_reads(tree, names_a_trial_hash)


def test_only_the_trial_module_reads_a_trials_hash():
    found = {
        str(p.relative_to(ROOT)): lines
        for root in PACKAGES
        for p in sorted((ROOT / root).rglob("*.py"))
        if p != OWNER and (lines := raw_trial_reads(ast.parse(p.read_text(), filename=str(p))))
    }
    assert not found, (
        f"these read a trial's hash by hand: {found}; read it with state.search.trial.fetch "
        "or fetch_many (a TrialRecord), which decodes every field in one place"
    )


def test_the_check_sees_a_raw_read_of_a_trial_hash():
    code = 'r.hget(key(sid, "trial", n), "reason")\nr.hgetall(key(sid, "iv", n))\n'
    assert raw_trial_reads(ast.parse(code)) == [1]
