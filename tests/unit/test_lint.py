"""ruff is configured in pyproject.toml, pinned, run by scripts/test before any test, and passes."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_scripts_test_lints_before_it_runs_the_tests():
    script = (ROOT / "scripts" / "test").read_text()
    assert "ruff check" in script and script.index("ruff check") < script.index("pytest")
    assert "ruff format --check" in script
    assert script.index("ruff format --check") < script.index("pytest")


def test_long_lines_are_not_ignored_any_more():
    ignored = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "E501" not in ignored.get("ignore", [])


def test_ruff_is_pinned_and_selects_the_agreed_rules():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(d.startswith("ruff==") for d in project["project"]["optional-dependencies"]["dev"])
    ruff = project["tool"]["ruff"]
    assert ruff["line-length"] == 100 and ruff["target-version"] == "py311"
    assert {"E", "F", "W", "I", "B", "UP"} <= set(ruff["lint"]["select"])


def test_the_tree_passes_ruff():
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run(
        [str(ruff), "check", "--quiet", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        [str(ruff), "format", "--check", "--quiet", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
