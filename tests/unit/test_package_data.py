"""Every file the code reads beside its modules goes into the wheel: the Docker image installs
fleet with `pip install .`, and a file left out (state's Lua scripts, Flower's page extras)
is missing only there."""

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_beside_the_modules_is_named_by_package_data():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = conf.get("package-data", {})
    packages = [p.rstrip("*") for p in conf["packages"]["find"]["include"]]
    missing = []
    for package in packages:
        for path in (ROOT / package).rglob("*"):
            if path.is_dir() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT / package).as_posix()
            if not any(fnmatch.fnmatch(rel, pat) for pat in patterns.get(package, ())):
                missing.append(f"{package}/{rel}")
    assert missing == [], "add these to [tool.setuptools.package-data] in pyproject.toml"
