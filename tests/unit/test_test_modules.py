"""A test module is not a library: what tests share lives in tests/harness/ or tests/fixtures/,
so running, moving or deleting one test file never changes what another collects or imports."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and any(p.startswith("test_") for p in parts[1:])


def test_no_module_under_tests_imports_a_test_module():
    offenders = [
        f"{path.relative_to(TESTS.parent)} imports {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for name in sorted(imported_modules(path))
        if is_test_module(name)
    ]
    assert not offenders, (
        "move what these share into tests/harness/ or tests/fixtures/:\n" + "\n".join(offenders)
    )


def test_the_check_sees_each_way_of_importing_a_test_module(tmp_path):
    bad = tmp_path / "bad.py"
    for line in (
        "from tests.e2e.test_chaos import chaos",
        "from tests.e2e import test_chaos",
        "import tests.unit.test_poison",
    ):
        bad.write_text(line + "\n")
        assert any(map(is_test_module, imported_modules(bad))), line
    bad.write_text("from tests.harness.chaos import Chaos\nimport tests.waiting\n")
    assert not any(map(is_test_module, imported_modules(bad)))


def test_every_gpu_test_module_skips_where_there_is_no_gpu():
    # CI has no GPU: a GPU module without its skip mark fails there (one lost it in a move)
    import importlib

    for path in sorted((TESTS / "gpu").glob("test_*.py")):
        module = importlib.import_module(f"tests.gpu.{path.stem}")
        marks = getattr(module, "pytestmark", [])
        marks = marks if isinstance(marks, list) else [marks]
        assert any(m.name == "gpu" for m in marks), f"{path.name}: no pytest.mark.gpu"
        assert any(m.name == "skipif" for m in marks), f"{path.name}: no skipif without a GPU"
