"""docs/layers.md shows the import graph as it is: its drawing is scripts/import-graph's output."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_layer_drawing_is_the_current_import_graph():
    drawn = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "import-graph")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert drawn in (ROOT / "docs" / "layers.md").read_text(), (
        "the import graph changed: run scripts/import-graph and paste its output "
        "into docs/layers.md"
    )


PACKAGES = ("core", "routing", "manifest", "state", "artifacts", "trainers", "tasks", "fleet")


def lint(tree: Path) -> subprocess.CompletedProcess:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=tree,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
    )


def copy_tree(tmp_path: Path) -> Path:
    import shutil

    tree = tmp_path / "tree"
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tree / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_contracts_hold_and_an_import_up_a_layer_breaks_them(tmp_path):
    tree = copy_tree(tmp_path)
    assert lint(tree).returncode == 0, lint(tree).stdout
    (tree / "core" / "upward.py").write_text(
        "import fleet.cli  # the ground reaching for the CLI\n"
    )
    broken = lint(tree)
    assert broken.returncode != 0 and "core is not allowed to import fleet" in broken.stdout


def test_an_import_circle_inside_a_package_breaks_them(tmp_path):
    tree = copy_tree(tmp_path)
    (tree / "tasks" / "circle_a.py").write_text("import tasks.circle_b\n")
    (tree / "tasks" / "circle_b.py").write_text("import tasks.circle_a\n")
    broken = lint(tree)
    assert broken.returncode != 0 and "No cycles are allowed in tasks" in broken.stdout


PURE = ("routing", "manifest")
PROBE = "routing.detect"
IO_MODULES = {
    "psutil",
    "pynvml",
    "subprocess",
    "socket",
    "redis",
    "kombu",
    "celery",
    "boto3",
    "requests",
}


def imported(path: Path) -> set[str]:
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_the_pure_floor_does_no_io_but_in_the_host_probe_and_nothing_pure_imports_the_probe():
    found = {}
    for pkg in (*PURE, "core"):
        for path in (ROOT / pkg).rglob("*.py"):
            if path == ROOT / "routing" / "detect.py":
                continue
            names = imported(path)
            bad = {n for n in names if n.split(".")[0] in IO_MODULES and pkg in PURE} | {
                PROBE
            } & names
            if bad:
                found[str(path.relative_to(ROOT))] = sorted(bad)
    assert found == {}, f"I/O in the pure floor (docs/layers.md): {found}"
