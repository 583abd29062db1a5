"""`fleet trainers` reads the schema that validates manifests, and docs/manifest.md's table is
its markdown: change a hyperparameter and this test says the page must follow."""

import json
import re
from pathlib import Path

from fleet import cli
from fleet.query import trainers as T
from manifest.hyper import TRAINERS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "manifest.md"


def test_every_hyperparameter_of_the_schema_is_listed_with_type_default_and_range(capsys):
    assert cli.main(["trainers", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["trainer"], r["name"]) for r in rows} == {
        (t, n) for t, ps in TRAINERS.items() for n in ps
    }
    lr = next(r for r in rows if (r["trainer"], r["name"]) == ("gbt", "learning_rate"))
    assert (lr["type"], lr["default"], lr["range"]) == ("float", 0.1, "(0, 1]")


def test_bounds_read_as_written():
    p = TRAINERS["mlp"]
    assert [T.bounds(p[n]) for n in ("epochs", "weight_decay", "optimizer", "hidden_sizes")] == [
        "[1, 10000]",
        ">= 0",
        "adam | adamw | sgd",
        "",
    ]


def test_the_manifest_pages_table_is_the_schema_as_fleet_trainers_prints_it():
    text = PAGE.read_text()
    table = re.search(r"<!-- trainers:begin -->\n(.*?)<!-- trainers:end -->", text, re.S)
    assert table, "docs/manifest.md lost its trainers table markers"
    assert table.group(1) == T.markdown(), (
        "docs/manifest.md's trainers table drifted: paste `fleet trainers --markdown`"
    )


def test_an_unknown_trainer_is_named_with_the_choices(capsys):
    assert cli.main(["trainers", "xgb"]) == 2  # a usage error
    assert "no built-in trainer 'xgb'; choose from gbt, mlp" in capsys.readouterr().err
