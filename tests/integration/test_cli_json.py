"""Every verb's ``--json`` is standard JSON that a strict parser reads, over records holding
NaN and infinities (a diverged loss, a failed trial's value, a host's usage): the verbs are
found in the parser, so a new verb with ``--json`` fails here until it is given arguments."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from artifacts.bundle import bundle
from artifacts.stores import FileStore
from core import constants as C
from fleet.cli import build_parser
from state import history
from state.search.store import key as search_key

pytestmark = pytest.mark.integration

SEARCH = """
[[jobs]]
name = "tune-nan"
command = ["true"]
[jobs.search]
trials = 3
parallel = 2
metric = "loss"
direction = "minimize"
[jobs.search.space]
lr = { low = 0.001, high = 0.1, log = true }

[[jobs]]
name = "plain"
command = ["true"]
"""
NON_FINITE = (math.nan, math.inf, -math.inf)


def json_verbs(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> set[tuple]:
    """Every verb (a verb's sub-verb too: `share list`) that takes ``--json``."""
    found = set()
    for action in parser._actions:
        if "--json" in action.option_strings:
            found.add(path)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= json_verbs(sub, (*path, name))
    return found


def strict(text: str):
    """``json.loads`` that refuses NaN and infinities, as jq and most parsers do."""

    def refuse(constant: str):
        raise ValueError(f"{constant} is not standard JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def nan_fleet(fleet_cli, redis_client, tmp_path, capsys, monkeypatch):
    """A search and a plain job whose records, histories and artifact hold NaN and infinities;
    the manifest's path, the plain job's ID and the store's URL."""
    store_url = f"file://{tmp_path / 'store'}"
    monkeypatch.setenv("FLEET_STORE_URL", store_url)
    manifest = tmp_path / "m.toml"
    manifest.write_text(SEARCH)
    assert fleet_cli(["publish", str(manifest), "--json"]) == 0
    rows = strict(capsys.readouterr().out)
    plain = next(r["job_id"] for r in rows if r["name"] == "plain")
    search = next(r["search_id"] for r in rows if r["name"] == "tune-nan")
    trials = [redis_client.hget(C.NAMES_INDEX, f"tune-nan[trial={n}]") for n in (0, 1)]
    nan = json.dumps({"metrics": {"loss": math.nan, "acc": math.inf, "low": -math.inf}})
    for i, jid in enumerate([plain, *trials]):
        assert jid, f"no record of trial {i - 1}: {redis_client.hgetall(C.NAMES_INDEX)}"
        redis_client.hset(
            C.JOB_KEY + jid,
            mapping={"state": "running", "worker": "w1", "started_at": 1.0, "progress": nan},
        )
        history.append(
            redis_client, jid, [{"step": s, "run": 1, "loss": v} for s, v in enumerate(NON_FINITE)]
        )
    made = bundle([], {"job_id": plain, "name": "plain", "loss": math.nan}, tmp_path / "b.tar.zst")
    art = FileStore(tmp_path / "store").put_bundle("command", made.path, made.sha256, {})
    redis_client.hset(
        C.JOB_KEY + plain,
        mapping={
            "state": "succeeded",
            "finished_at": 2.0,
            "result": nan,
            "gpu_s": "inf",
            "core_s": "nan",
            "owner": "ana",
            "artifact": json.dumps({"uri": art.uri, "sha256": art.sha256, "size": art.size}),
        },
    )
    redis_client.hset(C.JOB_KEY + trials[0], mapping={"state": "failed", "result": nan})
    redis_client.hset(
        search_key(search, "trial", 0),
        mapping={"state": "failed", "value": "nan", "reason": "ended with loss=nan"},
    )
    return manifest, plain, store_url


def argv_for(path: tuple[str, ...], manifest, plain: str, store_url: str, tmp_path) -> list[str]:
    """The arguments each ``--json`` verb runs with; a verb missing here fails the test."""
    return {
        ("publish",): [str(manifest), "--dry-run"],
        ("status",): ["--all"],
        ("show",): [plain],
        ("cancel",): ["tune-nan*", "--dry-run", "--yes"],
        ("requeue",): ["plain", "--dry-run"],
        ("logs",): [plain],
        ("capability",): [],
        ("hosts",): ["--all"],
        ("why",): ["tune-nan"],
        ("artifacts",): ["--store", store_url],
        ("get",): [plain, "-o", str(tmp_path / "got")],
        ("dead-letter",): [],
        ("trainers",): [],
        ("usage",): [],
        ("share", "list"): [],
        ("settings",): [],
        ("results",): ["tune-nan"],
        ("export", "mlflow"): ["plain", "--tracking-uri", f"sqlite:///{tmp_path / 'ml.db'}"],
    }[path]


def test_every_verbs_json_parses_strictly_over_nan_and_infinities(
    nan_fleet, fleet_cli, capsys, tmp_path
):
    manifest, plain, store_url = nan_fleet
    verbs = json_verbs(build_parser())
    assert ("status",) in verbs and ("share", "list") in verbs  # the walk finds sub-verbs too
    refused = {}
    for path in sorted(verbs):
        try:
            args = argv_for(path, manifest, plain, store_url, tmp_path)
        except KeyError:
            refused[path] = "no arguments for it in argv_for: add them"
            continue
        code = fleet_cli([*path, *args, "--json"])
        out = capsys.readouterr()
        if code != 0:
            refused[path] = f"exit {code}: {out.err[-500:]}"
            continue
        try:  # `logs` writes one object per line
            for doc in out.out.splitlines() if path == ("logs",) else [out.out]:
                strict(doc)
        except ValueError as e:
            refused[path] = f"{e}: {out.out[:300]}"
    assert not refused, refused


def test_results_json_gives_null_for_a_nan_value_and_says_why(nan_fleet, fleet_cli, capsys):
    assert fleet_cli(["results", "tune-nan", "--json"]) == 0
    trial = next(t for t in strict(capsys.readouterr().out) if t["trial"] == 0)
    assert trial["value"] is None and "nan" in trial["reason"]
