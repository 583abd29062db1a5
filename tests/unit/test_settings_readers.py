"""Nothing reads a FLEET_* variable around core.registry: every read of one (``env.get``,
``env[...]``, ``os.getenv``, ``in env``) outside the registry is a variable given to jobs
(the trainers' side of the contract), and every variable read anywhere is declared."""

import ast
from pathlib import Path

from core import registry
from core.setting import Scope

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "routing", "manifest", "state", "artifacts", "trainers", "tasks", "fleet")
TOP_MODULES = ("celeryconfig.py", "flowerconfig.py")
ALLOWED = {"core/registry.py"}  # the one reader of fleet's own variables
READS = ("get", "pop", "getenv", "setdefault")


def _sources() -> list[Path]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    return files + [ROOT / m for m in TOP_MODULES]


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "FLEET_..." assignments."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if isinstance(t, ast.Name) and isinstance(node.value.value, str):
                    out[t.id] = node.value.value
    return out


def _every_constant() -> dict[str, str]:
    """Constants of every module, for ``module.NAME`` references."""
    out: dict[str, str] = {}
    for path in _sources():
        out.update(_constants(ast.parse(path.read_text())))
    return out


def _name(node, local: dict[str, str], every: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.Name):
        text = local.get(node.id, "")
    elif isinstance(node, ast.Attribute):
        text = every.get(node.attr, "")
    else:
        return None
    return text if text.startswith("FLEET_") else None


def _envish(node) -> bool:
    """An environment by its name: ``env``, ``environ``, ``os.environ``, ``self.env``."""
    ident = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "env" in ident.lower() or ident == "os"  # os.getenv


def _read_keys(tree: ast.Module):
    """The key node of every read of an environment in ``tree`` (not of other mappings, such
    as a dict of URLs keyed by variable name)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in READS and _envish(node.func.value):
                yield node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if _envish(node.value):
                yield node.slice
        elif isinstance(node, ast.Compare) and any(
            isinstance(o, (ast.In, ast.NotIn)) for o in node.ops
        ):
            if any(_envish(c) for c in node.comparators):
                yield node.left


def _reads() -> list[tuple[str, str]]:
    every = _every_constant()
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        local = _constants(tree)
        for key in _read_keys(tree):
            name = _name(key, local, every)
            if name:
                found.append((str(path.relative_to(ROOT)), name))
    return found


def test_no_module_but_the_registry_reads_fleets_own_variables():
    stray = [
        (where, name)
        for where, name in _reads()
        if where not in ALLOWED
        and name in registry.BY_NAME
        and registry.BY_NAME[name].scope is Scope.FLEET
    ]
    assert not stray, f"read these through core.registry.value: {stray}"


def test_every_fleet_variable_read_anywhere_is_declared_in_the_registry():
    undeclared = sorted({(where, name) for where, name in _reads() if name not in registry.BY_NAME})
    assert not undeclared, f"declare these in core/registry.py: {undeclared}"


def test_the_check_sees_a_direct_read():
    tree = ast.parse(
        'NAME = "FLEET_YIELD"\nos.environ.get(NAME)\nos.environ["FLEET_X"]\n'
        '"FLEET_Y" in env\nos.getenv("FLEET_Z")\nurls["FLEET_BROKER_URL"]\n'
    )
    local = _constants(tree)
    assert [_name(k, local, {}) for k in _read_keys(tree)] == [
        "FLEET_YIELD",
        "FLEET_X",
        "FLEET_Y",
        "FLEET_Z",
    ]


BELOW_CELERYCONFIG = ("core", "routing", "manifest", "state", "artifacts", "trainers")


def test_nothing_below_celeryconfig_imports_it():
    importers = []
    for pkg in BELOW_CELERYCONFIG:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                named = isinstance(node, ast.Constant) and node.value == "celeryconfig"
                if "celeryconfig" in names or named:
                    importers.append(str(path.relative_to(ROOT)))
    assert not importers, (
        f"pass celeryconfig in from tasks/ or fleet/, never import it: {importers}"
    )
