"""`fleet` answers at once: the table of verbs (fleet.cli.verbs) matches what each verb's
module registers, `fleet --help` is built from it alone, and `fleet --version`, `fleet --help`
and a verb's own help import none of the heavy libraries."""

from __future__ import annotations

import argparse
import os
from importlib import import_module, metadata

import pytest

from fleet import cli
from fleet.cli.verbs import VERBS
from tests.harness.cli import imported

# what no answer that reads nothing may load: Celery and kombu (a third of a second), the Redis
# client (redis-py imports its asyncio half and, when installed, OpenTelemetry's SDK), the
# tables, the search view, the results query, the exporters
HEAVY = (
    "celery",
    "kombu",
    "redis",
    "rich",
    "optuna",
    "mlflow",
    "matplotlib",
    "opentelemetry",
    "state.search.view",
    "fleet.query.results",
    "fleet.mlflow_export",
    "fleet.optuna_export",
)


def _verbs(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The ``modules`` that are one of ``names`` or inside one."""
    return sorted(m for m in modules for n in names if m == n or m.startswith(f"{n}."))


def test_the_verb_table_matches_what_each_module_registers_in_order():
    registered = []
    for module in dict.fromkeys(v.module for v in VERBS):
        sub = _verbs_of_one(module)
        helps = {a.dest: a.help for a in sub._choices_actions}
        registered += [(name, module, helps[name]) for name in sub.choices]
    table = [tuple(v) for v in VERBS]
    assert table == registered, (
        "fleet/cli/verbs.py's VERBS and the verbs the modules register differ; the table should "
        "read:\n" + "\n".join(f"    Verb{row!r}," for row in registered)
    )


def _verbs_of_one(module: str) -> argparse._SubParsersAction:
    parser = argparse.ArgumentParser(prog="fleet")
    sub = parser.add_subparsers()
    import_module(f"fleet.cli.{module}").register(sub)
    return sub


def test_every_verb_module_is_in_the_table():
    from pathlib import Path

    helpers = {
        "__init__",
        "__main__",
        "common",
        "tables",
        "verbs",
        "show",
        "tree",
    }  # no register()
    modules = {p.stem for p in Path(cli.__file__).parent.glob("*.py")} - helpers
    assert modules == {v.module for v in VERBS}, (
        "a module of fleet/cli/ that registers verbs is missing from fleet/cli/verbs.py (or one "
        "that registers none belongs in this test's helpers)"
    )


def test_fleet_help_from_the_table_is_the_full_parsers_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.build_parser(None).format_help() == cli.build_parser().format_help()


@pytest.mark.parametrize("verb", [v.name for v in VERBS])
def test_a_verb_run_alone_gets_the_parser_its_module_builds(verb, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    alone, full = _verbs(cli.build_parser(verb)), _verbs(cli.build_parser())
    assert alone.choices[verb].format_help() == full.choices[verb].format_help()


@pytest.mark.parametrize(
    "argv, verb",
    [
        (["status", "--json"], "status"),
        (["--version"], None),
        (["-h"], None),
        (["dead-letter", "--limit", "3"], "dead-letter"),
        (["stat"], None),  # not a verb: argparse names the choices
        ([], None),
    ],
)
def test_the_verb_of_a_command_line_is_its_first_word_that_is_not_an_option(argv, verb):
    assert cli.verb_in(argv) == verb


def test_the_version_printed_is_the_installed_packages():
    from fleet import __version__

    assert __version__ == metadata.version("fleet")


@pytest.mark.parametrize("argv", [["--version"], ["--help"]], ids=" ".join)
def test_version_and_help_import_none_of_the_heavy_modules(argv):
    modules, out = imported(dict(os.environ), *argv)
    assert out.startswith("fleet " if argv == ["--version"] else "usage: fleet")
    # nor any of fleet's own layers below the command line
    assert not _loaded(
        modules, HEAVY + ("state", "manifest", "routing", "artifacts", "fleet.query")
    )


def test_a_verbs_own_help_loads_its_module_only_and_neither_celery_nor_redis():
    modules, out = imported(dict(os.environ), "status", "--help")
    assert "--watch" in out and "fleet.cli.jobs" in modules
    assert not modules & ({f"fleet.cli.{v.module}" for v in VERBS} - {"fleet.cli.jobs"})
    assert not _loaded(modules, tuple(h for h in HEAVY if h != "rich"))
