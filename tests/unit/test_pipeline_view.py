"""A pipeline's views as pure values: what a waiting follower waits on, why a cascade
cancelled one, the tree drawing within 80 columns, and `fleet show`'s follower rows."""

from __future__ import annotations

import pytest

from fleet.cli.jobs import note
from fleet.cli.show import show_rows
from fleet.cli.tree import tree_rows
from fleet.query import jobs as Q
from fleet.query.pipeline import Edge, Graph, Node, cancel_note, tree_lines, wait_note
from state.jobrecord import JobState
from tests.harness.records import job_record

A, B = "a" * 64, "b" * 64


def edge(name, state, awaited, kind="job", reason=""):
    return Edge(kind, name[0] * 64, name, state, reason, awaited)


@pytest.mark.parametrize(
    "edges, said",
    [
        ([edge("prep", "running", True)], "waits on prep (running)"),
        (
            [edge("prep", "succeeded", False), edge("tune", "running", True, "search")],
            "waits on tune (search running)",
        ),
        (
            [edge("prep", "queued", True), edge("other", "failed", True)],
            "waits on other (failed), prep (queued)",  # the failure first: its cancel comes
        ),
        ([edge("prep", "succeeded", False)], "waits on nothing now: its release is on its way"),
    ],
)
def test_a_waiting_followers_note_names_only_the_upstreams_it_still_waits_on(edges, said):
    assert wait_note(edges) == said


@pytest.mark.parametrize(
    "cancelled_by, said",
    [
        (
            {"kind": "job", "id": A, "name": "prep", "state": "failed", "reason": "exit 1: boom"},
            "upstream prep failed: exit 1: boom",
        ),
        (
            {"kind": "job", "id": A, "name": "train", "state": "cancelled", "reason": "by hand"},
            "upstream train was cancelled: by hand",
        ),
        ({"kind": "search", "id": A, "state": "failed"}, f"upstream {A[:12]} failed"),
        (None, ""),
    ],
)
def test_a_cascade_cancel_names_the_upstream_and_its_reason(cancelled_by, said):
    assert cancel_note(cancelled_by) == said


def test_status_orders_waiting_after_queued_and_counts_every_state():
    assert set(Q.STATE_ORDER) == set(JobState)
    rows = [
        job_record(job_id=A, name="w", state="waiting", created_at=1.0),
        job_record(job_id=B, name="q", state="queued", created_at=2.0),
    ]
    v = Q.view(rows, now=10.0)
    assert [r.name for r in v.rows] == ["q", "w"]
    assert v.counts["waiting"] == 1 and "1 waiting" in v.summary()
    assert Q.times(rows[0], 10.0)["queued_for_s"] == 9.0  # waiting since it was published


def test_a_waiting_rows_note_is_what_it_waits_on_not_its_error():
    row = job_record(job_id=A, name="final", state="waiting", last_error="old run's error")
    assert note(row, (edge("tune", "running", True, "search"),)) == "waits on tune (search running)"


def node(name, state, *after, kind="job", reason=""):
    return Node(f"{kind}:{name}", name, state, reason, tuple(f"job:{a}" for a in after))


def graph(*nodes):
    return Graph({n.member: n for n in nodes})


def drawn(g):
    return [(ln.prefix, ln.node.name, ln.again) for ln in tree_lines(g)]


def test_a_chain_draws_each_step_under_the_one_before():
    g = graph(
        node("prep", "succeeded"), node("tune", "running", "prep"), node("fin", "waiting", "tune")
    )
    assert drawn(g) == [("", "prep", False), ("└─ ", "tune", False), ("   └─ ", "fin", False)]


def test_a_fan_out_draws_siblings_and_a_fan_in_is_drawn_once_then_named_again():
    g = graph(
        node("a", "succeeded"),
        node("b", "succeeded"),
        node("x", "queued", "a"),
        node("both", "waiting", "a", "b"),
    )
    assert drawn(g) == [
        ("", "a", False),
        ("├─ ", "x", False),
        ("└─ ", "both", False),
        ("", "b", False),
        ("└─ ", "both", True),
    ]


def test_the_tree_keeps_name_and_state_whole_and_cuts_the_reason_within_the_width():
    g = graph(
        node("prep", "failed", reason="exit 1: " + "ValueError: a very long message " * 4),
        node("train-on-everything", "cancelled", "prep", reason="upstream prep failed"),
    )
    rows = tree_rows(g, 80)
    lines = ["  ".join(r).rstrip() for r in rows]
    assert all(len(ln) <= 80 for ln in lines), lines
    assert lines[0].startswith("prep") and "failed" in lines[0] and lines[0].endswith("…")
    assert "└─ train-on-everything" in lines[1] and "cancelled" in lines[1]


def test_show_gives_a_released_followers_params_and_resolved_inputs():
    v = {
        "state": "queued",
        "after": [
            {"kind": "job", "id": A, "name": "prep"},
            {"kind": "search", "id": B, "name": "tune"},
        ],
        "params_from": B,
        "params": {"lr": 0.01, "depth": 4},
        "input_jobs": [{"dir": "prep", "job_id": A}],
        "released_at": "2026-01-01T00:00:00.000+00:00",
        "released_by": f"search:{B}",
    }
    rows = dict(show_rows(v))
    assert rows["after"] == "prep, tune (search)"
    assert rows["params"] == '{"depth": 4, "lr": 0.01} (best of tune)'
    assert rows["inputs"] == f"prep/ <- {A[:12]}"
    assert rows["released"] == "2026-01-01T00:00:00.000+00:00 by tune"


def test_show_of_a_waiting_follower_names_the_inputs_it_will_get_at_release():
    v = {
        "state": "waiting",
        "after": [{"kind": "job", "id": A, "name": "prep"}],
        "inputs": [{"name": "prep", "dir": "prep", "kind": "job", "id": A}],
    }
    rows = dict(show_rows(v))
    assert rows["inputs"] == "prep/ (at release)"
    assert "params" not in rows and "released" not in rows


def test_flower_shows_a_waiting_follower_as_pending_with_the_upstreams_it_waits_for():
    from fleet import flower_view as view

    rec = job_record(job_id=A, name="final", state="waiting", queue="cpu", created_at=5.0)
    fields = view.task_fields(
        rec, (edge("prep", "succeeded", False), edge("tune", "running", True, "search"))
    )
    assert fields["state"] == "PENDING" and fields["waits"] == "tune (search running)"
    assert "waits" in view.TASKS_COLUMNS.split(",") and "waits" in view.FleetTask._fields
