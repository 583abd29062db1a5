"""A PBT search's views on a real Redis holding what the core writes: the population published,
its members claimed, their metric lines, boundaries recorded and an exploit applied through
``lua/search_pbt.lua`` (``PbtStore``) with the entry the worker builds (``tasks/pbt.py``);
then `fleet results` (its lineage, --json), `fleet why`, `fleet plot`, both exports and
Flower's search page (its data, and its script drawn in headless Chromium)."""

import http.server
import json
import shutil
import subprocess
import threading

import pytest

from fleet import flower_view, optuna_export
from fleet.manifests import loads
from fleet.publish import publish
from fleet.query import results as R
from fleet.query import searchpage
from manifest.search.pbt import Decision, Kind
from manifest.search.spec import trial_job_id
from state import history
from state.records import Records
from state.search.pbt import PbtStore, member_job, member_list
from state.search.store import RunToken, SearchStore
from state.search.view import read_search
from tests.harness.pbt import population_manifest
from tests.needs import missing

pytestmark = pytest.mark.integration

LOSS = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}  # member 3 is the worst at step 10: it exploits 0


@pytest.fixture
def pop(app, redis_client):
    """Four members that trained to step 12; member 3 took member 0's checkpoint at 10."""
    m = loads(population_manifest(), "m.toml")
    publish(app, redis_client, m)
    sid = m.searches[0].search_id
    config, tpl = SearchStore(redis_client).template(sid)
    store, records = PbtStore(redis_client, sid), Records(redis_client)
    first = {t.number: dict(t.params) for t in read_search(redis_client, sid).trials}
    runs = {}
    for n in range(4):
        jid = trial_job_id(sid, n)
        assert records.claim(jid, "w", f"tok-{n}", {}, "cpu").run
        runs[n] = RunToken(jid, f"tok-{n}")
        assert store.start(runs[n], n, first[n]) is None
        lines = [
            {"step": s, "t": 1e3 + s, "run": 1, "loss": LOSS[n] - s / 100} for s in range(1, 13)
        ]
        history.append(redis_client, jid, lines)
    for n in range(3):
        d = Decision(n, 10, Kind.CONTINUE, judged=n + 1, at=1010.0)
        store.boundary(runs[n], n, LOSS[n] - 0.1, d, first[n])
    new = {"lr": min(0.1, first[0]["lr"] * 1.2)}
    d = Decision(
        3, 10, Kind.EXPLOIT, judged=4, donor=0, donor_value=0.9, donor_checkpoint_step=12,
        old=first[3], new=new, at=1010.0,
    )  # fmt: skip
    assert store.boundary(runs[3], 3, LOSS[3] - 0.1, d, first[3]) == d
    ckpt = {"key": "checkpoints/m3/ab.tar.zst", "sha256": "ab", "step": 12, "donor": 0}
    entry = {
        "member": 3, "step": 10, "donor": 0,
        "checkpoint": {"sha256": "ab", "step": 12, "key": ckpt["key"], "donor_key": "checkpoints/m0/ab.tar.zst"},  # noqa: E501
        "old": first[3], "new": new, "resampled": [], "member_value": LOSS[3] - 0.1,
        "donor_value": 0.9, "decided_at": 1010.0,
    }  # fmt: skip
    where = member_list(tpl.list_key, ckpt["step"], config.pbt.interval)  # as tasks/pbt.py
    store.apply(runs[3], d, member_job(sid, 3, config, tpl, new), ckpt, entry, where)
    return sid, first, new


def test_results_shows_the_exploited_members_lineage_and_json_carries_it(
    pop, fleet_cli, capsys, monkeypatch
):
    sid, first, new = pop
    monkeypatch.setenv("COLUMNS", "80")
    assert fleet_cli(["results", "pop"]) == 0
    text = capsys.readouterr().out
    flat = " ".join(ln.strip() for ln in text.splitlines())
    assert all(len(ln) <= 80 for ln in text.splitlines()), text
    assert "lineage: 1 exploit, each member's in order" in text
    lr = f"lr {first[3]['lr']:.4g} -> {new['lr']:.4g}"
    assert f"step 10: took member 0's checkpoint (step 12), {lr}" in flat
    assert fleet_cli(["results", "pop", "--json"]) == 0
    rows = {r["trial"]: r for r in json.loads(capsys.readouterr().out)}
    three = rows[3]["member"]
    assert three["phase"] == "waiting" and three["exploits"] == 1
    assert three["lineage"][0]["checkpoint_step"] == 12 and three["lineage"][0]["donor"] == 0
    assert [s["values"] for s in three["schedule"]] == [first[3], new]
    assert rows[0]["member"]["lineage"] == [] and rows[0]["member"]["bounds"] == {"10": 0.9}


def test_why_counts_the_exploit_and_says_what_each_member_does(pop, fleet_cli, capsys):
    assert fleet_cli(["why", "pop"]) == 0
    text = capsys.readouterr().out
    assert "  exploits: 1 applied (judged every 10 steps to 30)" in text
    assert "  population: 4 members (3 training, 1 waiting)" in text
    assert "  member 0: training toward step 20 (at step 10: loss=0.9)" in text
    assert "  member 3: queued to resume at step 12 from member 0's checkpoint" in text
    assert fleet_cli(["why", "pop", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["population"]
    assert got["exploits"] == 1 and got["members"][3]["phase"] == "waiting"


def test_plot_draws_the_population(pop, fleet_cli, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    assert fleet_cli(["plot", "pop", "-o", str(tmp_path / "pop.png")]) == 0
    assert (tmp_path / "pop.png").read_bytes()[:4] == b"\x89PNG"


def test_optuna_export_writes_one_trial_per_member_segment(pop, redis_client, tmp_path):
    optuna = pytest.importorskip("optuna")
    sid, first, new = pop
    board = R.leaderboard(redis_client, "pop")
    url = f"sqlite:///{tmp_path / 'o.db'}"
    view = read_search(redis_client, sid, trials=False)
    assert optuna_export.write(board, view.config.space, "minimize", "pop", url).trials == 5
    trials = optuna.load_study(study_name="pop", storage=url).get_trials(deepcopy=False)
    three = sorted(
        (t for t in trials if t.user_attrs.get("fleet_pbt_member") == 3), key=lambda t: t.number
    )
    assert [t.params["lr"] for t in three] == [first[3]["lr"], new["lr"]]
    assert three[0].state.name == "PRUNED" and three[1].user_attrs["fleet_pbt_donor"] == 0


def test_mlflow_export_logs_each_members_values_per_step(pop, redis_client, tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from fleet.mlflow_export import MlflowExport

    sid, first, new = pop
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    board = R.leaderboard(redis_client, "pop")
    MlflowExport(uri).write(board)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("pop")
    runs = {r.data.tags["fleet.pbt.member"]: r for r in client.search_runs([exp.experiment_id])}
    run = runs["3"]
    lr = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "pbt/lr"))
    assert lr == [(0, first[3]["lr"]), (10, new["lr"])]
    assert float(run.data.params["lr"]) == first[3]["lr"]  # a param is its first value
    assert "took member 0's checkpoint" in run.data.tags["fleet.pbt.lineage"]
    MlflowExport(uri).write(board)  # again: nothing doubled
    again = client.get_metric_history(run.info.run_id, "pbt/lr")
    assert len(again) == 2


def test_the_live_page_has_the_population(pop, redis_client):
    d = json.loads(flower_view.json_text(searchpage.read(redis_client, "pop")))
    assert d["pbt"]["exploits"] == 1
    assert d["pbt"]["members"][3]["lineage"][0]["text"].startswith("step 10: took member 0's")
    assert d["pbt"]["marks"] == [{"trial": 3, "step": 10, "value": 3.9, "donor": 0}]


def test_the_live_page_draws_the_population_in_a_browser(pop, redis_client, tmp_path):
    """The page's own script, run by Chromium against the page's data from these records."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        missing("chromium is not installed (Debian: apt-get install chromium)")
    data = flower_view.json_text(searchpage.read(redis_client, "pop")).encode()
    html = flower_view.search_page("pop", "").encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body, kind = (data, "application/json") if "/api/" in self.path else (html, "text/html")
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dom = subprocess.run(
            [
                browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                "--dump-dom", f"http://127.0.0.1:{server.server_port}/fleet/search/pop",
            ],
            capture_output=True, text=True, timeout=120, start_new_session=True,
        ).stdout  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert 'class="fleet-mark"' in dom and 'data-member="3"' in dom
    assert "population: 4 members, 1 exploit" in dom
    assert "took member 0's checkpoint" in dom
    assert 'data-value="lr"' in dom  # lr over the steps, per member
