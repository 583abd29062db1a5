"""The job record has one owner: only ``state/jobrecord.py`` names a job's hash key, reads it
outside a Lua script, and defines ``JobState``, which every module imports from there."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.harness.owners import called, raw_hash_reads

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "state", "tasks", "routing", "manifest", "artifacts", "fleet", "trainers")
OWNER = ROOT / "state" / "jobrecord.py"
CONSTANTS = ROOT / "core" / "constants.py"  # keeps the prefix among the other key prefixes


def sources(*, with_tests: bool = False) -> list[Path]:
    roots = [ROOT / p for p in PACKAGES] + [ROOT / "bench"]
    if with_tests:
        roots.append(ROOT / "tests")
    out = [p for r in roots for p in r.rglob("*.py")]
    return sorted(p for p in out if "__pycache__" not in p.parts)


def key_namings(tree: ast.AST) -> list[int]:
    """Lines that name a job's hash: ``C.JOB_KEY``, ``JOB_KEY`` or the text ``fleet:job:``."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr == "JOB_KEY")
        or (isinstance(node, ast.Name) and node.id == "JOB_KEY")
        or (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "fleet:job:" in node.value
        )
    )


def raw_reads(tree: ast.AST) -> list[int]:
    """Lines that read a job's hash by hand: ``client.hget(job_key(id), ...)`` and the like."""
    return raw_hash_reads(tree, lambda key: called(key) == "job_key")


def test_only_the_record_module_names_a_jobs_hash_key():
    found = {
        str(p.relative_to(ROOT)): lines
        for p in sources()
        if p not in (OWNER, CONSTANTS)
        and (lines := key_namings(ast.parse(p.read_text(), filename=str(p))))
    }
    assert not found, (
        f"these name a job's hash key {found}: use state.jobrecord.job_key(job_id) "
        "(or JOB_KEY_PREFIX for a Lua script that walks jobs)"
    )


def test_no_module_reads_a_jobs_hash_by_hand():
    found = {
        str(p.relative_to(ROOT)): lines
        for p in sources()
        if p != OWNER and (lines := raw_reads(ast.parse(p.read_text(), filename=str(p))))
    }
    assert not found, (
        f"these read a job's hash by hand {found}: use state.jobrecord.fetch / fetch_many "
        "with the fields they need"
    )


def test_job_state_is_imported_from_its_one_home():
    found = sorted(
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in sources(with_tests=True)
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p)))
        if isinstance(node, ast.ImportFrom)
        and node.module != "state.jobrecord"
        and any(a.name == "JobState" for a in node.names)
    )
    assert not found, f"import JobState from state.jobrecord, not at {found}"


def test_the_checks_see_what_they_forbid():
    bad = ast.parse(
        "from state.records import JobState\n"
        "r.hget(C.JOB_KEY + jid, 'state')\n"
        "r.hmget(job_key(jid), 'state')\n"
        "k = 'fleet:job:' + jid\n"
    )
    assert key_namings(bad) == [2, 4]
    assert raw_reads(bad) == [3]
