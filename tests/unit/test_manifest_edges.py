"""A manifest's pipeline edges (manifest.edges): names resolved to jobs, sweeps and searches of
the manifest or already published, every wrong edge reported at its line with a fix, and the
followers' IDs covering their upstreams'."""

from __future__ import annotations

import pytest

from core.errors import ManifestError
from manifest.loader import loads
from manifest.pipeline import Input, Kind, Upstream

PREP = '[[jobs]]\nname = "prep"\ncommand = ["python", "prep.py"]\n'
SEARCH = (
    '[[jobs]]\nname = "tune"\ncommand = ["python", "train.py"]\n'
    '[jobs.search]\ntrials = 4\nmetric = "loss"\n[jobs.search.space]\nwidth = {choices = [8, 16]}\n'
)


def job(name: str, *lines: str, command: str = '["true"]') -> str:
    return f'[[jobs]]\nname = "{name}"\ncommand = {command}\n' + "".join(f"{x}\n" for x in lines)


class Names:
    """Names already published: a fixed table, as the names index would answer."""

    def __init__(self, **known: Upstream):
        self.known = known

    def lookup(self, name: str) -> Upstream | None:
        return self.known.get(name)


def problems(text: str) -> list[tuple[int | None, str, str, str]]:
    with pytest.raises(ManifestError) as e:
        loads(text)
    return [(p.line, p.field, p.message, p.fix) for p in e.value.problems]


def by_name(text: str, published=None) -> dict:
    m = loads(text, published=published)
    return {j.name: j for j in m.jobs} | {s.name: s for s in m.searches}


@pytest.mark.parametrize(
    "text, line, field, message, fix",
    [
        (
            PREP + job("final", 'after = ["perp"]'),
            7,
            "jobs[1].after",
            "unknown job, sweep or search 'perp'",
            "did you mean 'prep'?",
        ),
        (
            PREP + job("final", 'inputs = ["nothing-like-it"]'),
            7,
            "jobs[1].inputs",
            "unknown job, sweep or search 'nothing-like-it'",
            "one already published",
        ),
        (job("a", 'after = ["a"]'), 4, "jobs[0].after", "'a' cannot start after itself", "remove"),
        (
            job("a", 'after = ["b"]') + job("b", 'inputs = ["a"]'),
            8,
            "jobs[1].inputs",
            "the pipeline has a cycle: a -> b -> a",
            "remove one of these edges",
        ),
        (
            PREP + job("final", 'params_from = "prep"'),
            7,
            "jobs[1].params_from",
            "'prep' is not a search",
            "[jobs.search]",
        ),
        (
            PREP + SEARCH.replace('name = "tune"\n', 'name = "tune"\nparams_from = "prep"\n'),
            6,
            "jobs[1].params_from",
            "params_from is for a job that trains with a search's best values, not a search",
            "remove params_from",
        ),
        (
            SEARCH
            + '[[jobs]]\nname = "final"\nmodel = "mlp"\ndata = "d.csv"\nparams_from = "tune"\n',
            13,
            "jobs[1].params_from",
            "'tune' searches width, which model 'mlp' does not take",
            "search only mlp's hyperparameters",
        ),
    ],
)
def test_a_wrong_edge_is_reported_at_its_line_with_a_fix(text, line, field, message, fix):
    (found,) = [p for p in problems(text) if p[1] == field]
    assert found[0] == line and found[2] == message and fix in found[3]


def test_after_inputs_and_params_from_are_each_upstream_once_in_manifest_order():
    jobs = by_name(
        PREP
        + SEARCH
        + job("final", 'after = ["tune", "prep"]', 'inputs = ["prep"]', 'params_from = "tune"')
    )
    final, tune, prep = jobs["final"], jobs["tune"], jobs["prep"]
    assert final.after == (
        Upstream(Kind.SEARCH, tune.search_id, "tune"),
        Upstream(Kind.JOB, prep.job_id, "prep"),
    )
    assert final.inputs == (Input("prep", "prep", Kind.JOB, prep.job_id),)
    assert final.params_from == tune.search_id


def test_inputs_of_a_sweep_are_each_point_under_its_own_name():
    sweep = job("prep", "[jobs.sweep]", "lr = [0.1, 0.2]")
    jobs = by_name(sweep + job("final", 'inputs = ["prep"]'))
    final = jobs["final"]
    assert [i.dir for i in final.inputs] == ["prep[lr=0.1]", "prep[lr=0.2]"]
    assert {u.id for u in final.after} == {jobs["prep[lr=0.1]"].job_id, jobs["prep[lr=0.2]"].job_id}


def test_a_search_after_a_job_waits_for_it_and_its_id_covers_the_jobs():
    alone = by_name(SEARCH)["tune"]
    after = by_name(PREP + SEARCH.replace('name = "tune"\n', 'name = "tune"\ninputs = ["prep"]\n'))
    assert after["tune"].base.after == (Upstream(Kind.JOB, after["prep"].job_id, "prep"),)
    assert after["tune"].search_id != alone.search_id


def test_a_followers_id_covers_its_upstreams_and_a_job_without_edges_keeps_its_own():
    text = PREP + job("final", 'after = ["prep"]')
    once, again = by_name(text), by_name(text)
    assert once["final"].job_id == again["final"].job_id  # published again: nothing new
    assert once["prep"].job_id == by_name(PREP)["prep"].job_id
    changed = by_name(text.replace("prep.py", "prep2.py"))
    assert changed["final"].job_id != once["final"].job_id
    # the same content after nothing is another job
    assert by_name(job("final"))["final"].job_id != once["final"].job_id


def test_two_tables_alike_but_for_their_upstreams_are_two_jobs():
    text = PREP + job("b", command='["true", "b"]') + job("x", 'after = ["prep"]')
    text += job("y", 'after = ["b"]')
    jobs = by_name(text)
    assert jobs["x"].job_id != jobs["y"].job_id


def test_a_name_already_published_resolves_through_the_names_index():
    prep = Upstream(Kind.JOB, "a" * 64, "prep")
    tune = Upstream(Kind.SEARCH, "b" * 64, "tune")
    final = by_name(
        job("final", 'inputs = ["prep"]', 'params_from = "tune"'), Names(prep=prep, tune=tune)
    )["final"]
    assert final.after == (prep, tune)
    assert final.inputs == (Input("prep", "prep", Kind.JOB, "a" * 64),)
    assert final.params_from == "b" * 64


def test_the_spec_carries_the_edges_and_reads_them_back():
    from manifest.schema import JobSpec

    final = by_name(PREP + SEARCH + job("final", 'inputs = ["prep"]', 'params_from = "tune"'))[
        "final"
    ]
    d = final.to_dict()
    assert d["after"][0]["name"] == "prep" and d["inputs"][0]["dir"] == "prep"
    assert JobSpec.from_dict(d) == final
    assert "after" not in by_name(PREP)["prep"].to_dict()


def test_a_follower_taking_more_bundles_than_a_job_may_fetch_is_refused(monkeypatch):
    from manifest import edges

    monkeypatch.setattr(edges, "MAX_INPUTS", 2)
    sweep = job("prep", "[jobs.sweep]", "lr = [0.1, 0.2, 0.3]")
    ((line, field, message, fix),) = problems(sweep + job("final", 'inputs = ["prep"]'))
    assert (line, field) == (9, "jobs[1].inputs")
    assert (
        message
        == "takes 3 bundles as inputs (a sweep gives one per point); a job may take at most 2"
    )
    assert "after" in fix
    assert by_name(sweep + job("final", 'after = ["prep"]'))["final"].after  # after: no bound


def test_a_dry_runs_plan_row_names_the_upstreams_a_follower_waits_on_once_each():
    from manifest.pipeline import waits_note

    def up(name: str, i: int) -> Upstream:
        return Upstream(Kind.JOB, f"id{i}", name)

    assert waits_note(()) == ""  # a job without edges: its row is as before
    points = tuple(up(f"prep[lr={v}]", i) for i, v in enumerate((0.1, 0.2)))
    assert waits_note(points + (up("tune", 9),)) == "; waits on prep, tune"  # a sweep is one name
    many = tuple(up(n, i) for i, n in enumerate("abcde"))
    assert waits_note(many) == "; waits on a, b, c and 2 more"
