"""`fleet why` as typed values: the report a query builds (fleet.query.why), its JSON
(`--json`), and its lines at 80 columns, with no Redis."""

import io

import pytest
from rich.console import Console

from fleet.cli import hosts as cli_hosts
from fleet.query.why import Busy, Capable, Position, QueueReport, SearchNote, WhyReport
from manifest.schema import Needs, TierSpec
from routing.explain import QueueFacts, Verdict
from routing.tiers import Constraint
from state.jobrecord import JobState

NEEDS = Needs(require_cuda=True, min_vram_gib=24, gpus=2)
QUEUE = QueueReport(
    QueueFacts("cuda.vram24", "cuda", NEEDS, Constraint(None, frozenset({"laptop"}))),
    TierSpec("cuda", Needs(require_cuda=True)),
    (
        Verdict("big4", True, ()),
        Verdict("b[1]", False, ("[hosts.b[1]] tiers = ['cpu'] leaves out cuda",), 1.0),
    ),
    (Capable("big4", 4, (Busy("d" * 64, "d[1]", "cuda"),), 3, None),),
    position=Position("cuda.vram24", True, 2, 5, "alice used 3.0 GPU-h, bob 0.0"),
)
REPORT = WhyReport(
    "a" * 64,
    "tune[trial=3]",
    JobState.QUEUED,
    "",
    1,
    "exit 1: ValueError: boom\nmore",
    (QUEUE,),
    SearchNote("5" * 64, "tune: search 3/16 ended", ""),
)


def test_the_json_keeps_the_keys_scripts_read():
    d = REPORT.to_dict()
    assert (d["state"], d["attempts"], d["search"]["search_id"]) == ("queued", 1, "5" * 64)
    q = d["queues"][0]
    assert q["queue"] == "cuda.vram24" and q["needs"]["gpus"] == 2
    assert q["floor"]["name"] == "cuda" and q["denied_hosts"] == ["laptop"]
    assert q["hosts"][1] == {
        "host": "b[1]",
        "could_run": False,
        "reasons": ["[hosts.b[1]] tiers = ['cpu'] leaves out cuda"],
    }
    assert q["capable"][0]["waiting_in_queues_it_serves_first"] == 3
    assert q["capable"][0]["busy_with"][0]["name"] == "d[1]"
    assert q["position"]["ahead"] == 2 and q["position"]["fair_share"].startswith("alice")


@pytest.fixture
def screen(monkeypatch):
    # as fleet.cli.common makes its consoles: text as written, never read as markup
    out = Console(
        width=80, record=True, file=io.StringIO(), color_system=None, markup=False, highlight=False
    )
    monkeypatch.setattr(cli_hosts, "console", out)
    return out


def test_why_prints_names_and_reasons_as_written_within_80_columns(screen):
    cli_hosts.print_why(REPORT)
    text = screen.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.splitlines()[0] == f"tune[trial=3] ({'a' * 12}): queued, attempts 1"
    for said in (
        "  last error: exit 1: ValueError: boom",
        "  search: tune: search 3/16 ended",
        "queue cuda.vram24 (tier cuda): a host needs CUDA, 2 GPUs, VRAM >= 24 GiB each",
        "  allowed hosts: any; denied: ['laptop']",
        "  position: 2 message(s) ahead of it, 5 waiting in cuda.vram24",
        "  fair share: alice used 3.0 GPU-h, bob 0.0",
        "  big4: could run it",
        "  b[1]: cannot: [hosts.b[1]] tiers = ['cpu'] leaves out cuda",
        "  big4 is busy with: d[1] (cuda); 3 message(s) wait in queues it serves first",
    ):
        assert said in text, said


def test_why_of_a_failed_job_prints_its_end_reason_not_the_line_that_introduces_its_output(
    screen,
):
    from dataclasses import replace

    error = "job tune[trial=3] (aaaa) exited with status 1; last output:\nTraceback\nValueError: x"
    failed = replace(REPORT, last_error=error, reason="exit 1: ValueError: x")
    cli_hosts.print_why(failed)
    text = screen.export_text()
    assert "  last error: exit 1: ValueError: x" in text.splitlines()
    assert "last output:" not in text
    assert failed.to_dict()["reason"] == "exit 1: ValueError: x"


@pytest.mark.parametrize("state", [s for s in JobState if s.terminal])
def test_why_of_an_ended_job_says_it_ended_and_what_to_do_not_which_hosts_could_run_it(
    screen, state
):
    from dataclasses import replace

    cli_hosts.print_why(replace(REPORT, state=state))
    text = screen.export_text()
    assert f"): {state.value}, attempts 1" in text.splitlines()[0]
    assert f"to run it again: fleet requeue {'a' * 12}" in text
    assert "could run it" not in text and "position:" not in text and "big4" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
