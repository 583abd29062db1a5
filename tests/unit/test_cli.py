"""The fleet CLI where no server is needed: offline plans and broken manifests."""

import json
from pathlib import Path

import pytest

from fleet import cli

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "manifest.toml")
NOWHERE = "redis://127.0.0.1:1/0"  # nothing listens on port 1: refused at once


@pytest.fixture
def unreachable_broker(monkeypatch):
    app = cli.app()
    before = app.conf.broker_url
    monkeypatch.setenv("FLEET_BROKER_URL", NOWHERE)
    app.conf.broker_url = NOWHERE
    yield
    app.conf.broker_url = before
    app.pool.force_close_all()


def test_a_dry_run_with_redis_unreachable_still_prints_the_plan(unreachable_broker, capsys):
    assert cli.main(["publish", EXAMPLE, "--dry-run", "--json"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)
    assert {r["queue"] for r in rows} >= {"cuda-large", "cuda", "cpu"}
    assert all(r["action"] == "publish" for r in rows)
    assert "cannot reach Redis" in out.err


def test_an_offline_dry_run_lists_a_search_as_a_row_beside_its_space(unreachable_broker, capsys):
    tune = str(Path(EXAMPLE).with_name("tune.toml"))
    assert cli.main(["publish", tune, "--dry-run", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["action"]) for r in rows] == [("tune-wine", "publish")]
    assert rows[0]["job_id"] is None and len(rows[0]["search_id"]) == 64  # its own key
    assert cli.main(["publish", tune, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        "new search: 16 trials" in out
        and "learning_rate: log-uniform" in out
        and "1 to publish" in out
    )
    # the pruner with every argument it is built with: the manifest's and the defaults
    assert (
        "  pruner asha(min_resource=5, reduction_factor=3, min_early_stopping_rate=0, "
        "bootstrap_count=0)" in out
    )
    assert "last step 30" in out and "constant_liar=true" in out


def test_a_real_publish_with_redis_unreachable_fails_naming_the_variable(
    unreachable_broker, capsys
):
    assert cli.main(["publish", EXAMPLE]) == 1
    assert "FLEET_BROKER_URL" in capsys.readouterr().err


def test_sweep_names_show_in_tables_as_written_not_as_markup(unreachable_broker, capsys):
    assert cli.main(["publish", EXAMPLE, "--dry-run"]) == 0
    assert "gbt-breast-cancer[seed=0]" in capsys.readouterr().out


def test_a_long_plan_prints_counts_per_queue_and_sweep_and_the_first_rows_only(
    unreachable_broker, capsys, tmp_path
):
    m = tmp_path / "big.toml"
    m.write_text(
        f'[[jobs]]\nname = "many"\ncommand = ["true"]\n[jobs.sweep]\nseed = {list(range(1000))}\n'
    )
    assert cli.main(["publish", str(m), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1,000 jobs, summarised" in out and "per queue" in out and "per sweep" in out
    assert "many[seed=19]" in out and "many[seed=20]" not in out
    assert "... 980 more; --json for all" in out
    assert len(json.loads(_json_plan(m, capsys))) == 1000


def _json_plan(path, capsys) -> str:
    assert cli.main(["publish", str(path), "--dry-run", "--json"]) == 0
    return capsys.readouterr().out


def test_every_option_of_every_verb_has_a_help_text():
    from fleet.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    missing = [
        f"{name} {a.option_strings or a.dest}"
        for name, sp in sub.choices.items()
        for a in sp._actions
        if a.help is None
    ]
    assert not missing


def test_fleet_local_shows_its_store_url_masked(capsys):
    from types import SimpleNamespace

    from fleet.cli.local import ConsoleShow

    fleet = SimpleNamespace(
        server=SimpleNamespace(url="redis://127.0.0.1:6400/0", data_dir="/d/redis"),
        store_url="https://hunter2-token@store.example/runs",
        workers={"local-cpu": None},
        root=Path("/d"),
        notes=(),
        node_host="box-1a2b3c",
    )
    ConsoleShow().started(fleet, SimpleNamespace(took_over=None))
    out = capsys.readouterr().out
    assert "store https://***@store.example/runs" in out and "hunter2" not in out


def test_fleet_version_prints_the_installed_version_and_exits_zero(capsys):
    from importlib import metadata

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"fleet {metadata.version('fleet')} (Python 3.")


def test_a_local_fleet_keeps_its_port_and_says_so_when_another_program_took_it(tmp_path):
    from fleet.localaddr import choose_port

    assert choose_port(tmp_path, None, lambda p: True, lambda: 4242) == (4242, "")
    assert choose_port(tmp_path, 6390, lambda p: True, lambda: 4242) == (6390, "")
    port, note = choose_port(tmp_path, 6390, lambda p: False, lambda: 4242)
    assert port == 4242 and "port 6390" in note and "taken by another program" in note
    assert "stale" in note and str(tmp_path / "redis.port") in note


def test_each_folders_local_workers_carry_a_tag_of_that_folder(tmp_path):
    from fleet.localaddr import folder_tag

    assert folder_tag(tmp_path / "a") != folder_tag(tmp_path / "b")
    assert folder_tag(tmp_path / "a") == folder_tag(tmp_path / "x" / ".." / "a")


def test_fleet_help_fits_80_columns_and_names_verbs_without_listing_them_in_the_usage_line(
    monkeypatch, capsys
):
    from fleet.cli import build_parser

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "usage: fleet [-h] [--version] VERB ..."
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "    publish " in out and "    results " in out


def test_a_force_that_names_no_job_is_a_usage_error_exit_2_and_nothing_is_sent(
    unreachable_broker, capsys
):
    assert cli.main(["publish", EXAMPLE, "--force", "no-such-job"]) == cli.EXIT_USAGE == 2
    assert "--force names no job in" in capsys.readouterr().err


@pytest.mark.parametrize("as_json", [False, True])
def test_a_broken_manifest_exits_2_with_each_problem_named(tmp_path, capsys, as_json):
    path = tmp_path / "m.toml"
    path.write_text('[[jobs]]\nname = "x[1]"\nmodle = "gbt"\n')
    argv = ["publish", str(path), "--dry-run"] + (["--json"] if as_json else [])
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    if as_json:
        problems = json.loads(out.out)["problems"]
        assert any("modle" in json.dumps(p) for p in problems)
    else:
        assert f"{path}: " in out.err and "modle" in out.err and "nothing was published" in out.err


def test_every_verb_declares_json_through_the_one_helper():
    import ast

    root = Path(cli.__file__).parent
    declared = [
        f"{p.name}:{n.lineno}"
        for p in root.glob("*.py")
        if p.name != "common.py"
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.Constant) and n.value == "--json"
    ]
    assert not declared, f"declare --json with fleet.cli.common.json_option, not at {declared}"


def test_one_state_style_colours_each_state_in_every_view():
    from fleet.cli.common import STATE_STYLE, state_cell
    from state.jobrecord import JobState

    assert set(STATE_STYLE) == set(JobState)
    assert state_cell("pruned").style == state_cell(JobState.PRUNED).style == "dim green"
    assert state_cell("odd").plain == "odd"


def test_every_verbs_help_fits_80_columns(monkeypatch):
    import argparse

    from fleet.cli import build_parser

    monkeypatch.setenv("COLUMNS", "80")
    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    wide = {
        f"{name}: {line}"
        for name, parser in verbs.choices.items()
        for line in parser.format_help().splitlines()
        if len(line) > 80
    }
    assert not wide, wide
