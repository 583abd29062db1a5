"""What a PBT search looks like to its user, from its population as the core records it
(``state.search.pbt``'s values): `fleet results`'s lineage lines at 80 columns, `fleet why`'s
count of exploits and what each member is doing, `fleet plot`'s exploit marks and schedules,
the exports' schedule (MLflow's per-step values, Optuna's trial per segment) and Flower's page."""

import io
import json
from dataclasses import replace

import pytest
from rich.console import Console

from fleet import mlflow_export
from fleet import optuna_export as OX
from fleet.cli import results as RC
from fleet.cli.common import to_json
from fleet.query import pbt, plotdata, searchpage, searchwhy
from fleet.query import results as R
from manifest.search.config import Range, SearchConfig
from manifest.search.pbt import PbtConfig
from state.jobrecord import JobState
from state.search.pbt import Exploit, Member, Phase, Segment
from state.search.view import SearchView
from tests.harness.records import job_record

PBT = PbtConfig(population=3, interval=10)
CONFIG = SearchConfig(
    "loss",
    {"lr": Range(0.0001, 0.1, log=True), "momentum": Range(0.0, 0.99)},
    trials=3,
    parallel=3,
    last_step=30,
    pbt=PBT,
)
FIRST = {
    0: {"lr": 0.05, "momentum": 0.9},
    1: {"lr": 0.001, "momentum": 0.5},
    2: {"lr": 0.01, "momentum": 0.1},
}


def exploit(member, step, donor, old, new, ckpt_step, resampled=(), value=2.0) -> Exploit:
    return Exploit(
        member, step, donor, {"sha256": "ab", "step": ckpt_step, "key": "k"}, old, new,
        tuple(resampled), member_value=value, donor_value=0.5, decided_at=100.0 + step,
        applied_at=101.0 + step,
    )  # fmt: skip


EXPLOITS = (
    exploit(1, 10, 0, FIRST[1], {"lr": 0.06, "momentum": 0.72}, 12, ["momentum"], 3.0),
    exploit(1, 20, 2, {"lr": 0.06, "momentum": 0.72}, {"lr": 0.012, "momentum": 0.72}, 20),
)


def population(phases=(Phase.DONE, Phase.TRAINING, Phase.WAITING)) -> pbt.Population:
    schedules = {
        0: (Segment(0, FIRST[0], at=1.0),),
        1: (
            Segment(0, FIRST[1], at=1.0),
            Segment(10, EXPLOITS[0].new, 0, 12, 111.0),
            Segment(20, EXPLOITS[1].new, 2, 20, 121.0),
        ),
        2: (Segment(0, FIRST[2], at=1.0),),
    }
    members = [
        Member(
            n,
            phase=phases[n],
            step={0: 20, 1: 20, 2: 10}[n],
            value={0: 0.5, 1: 0.8, 2: 1.5}[n],
            values=dict(schedules[n][-1].values),
            exploits=len([e for e in EXPLOITS if e.member == n]),
            resume_step=14 if phases[n] is Phase.WAITING else None,
            since=50.0,
            bounds={10: 1.0 + n, 20: 0.5 + n},
            schedule=schedules[n],
        )
        for n in range(3)
    ]
    return pbt.population("s1", CONFIG, members, EXPLOITS)


def board(pop: pbt.Population | None = None) -> R.Leaderboard:
    finals = {0: 0.3, 1: 0.2, 2: None}
    records = [
        job_record(
            job_id=f"j{n}",
            name=f"pop[trial={n}]",
            state="succeeded" if finals[n] is not None else "running",
            search="s1",
            trial=n,
            params=dict(pop.members[n].values) if pop else FIRST[n],
            created_at=n,
            worker="h",
        )
        for n in range(3)
    ]
    histories = {
        f"j{n}": [
            {"step": s, "t": 1.0 + s, "run": 1, "loss": 3.0 - s / 10 - n / 10}
            for s in range(1, 31 if finals[n] is not None else 15)
        ]
        for n in range(3)
    }
    b = R.build("pop", records, histories, search={"metric": "loss", "direction": "minimize"})
    return replace(b, population=pop)


def test_an_exploits_lineage_line_names_the_donor_its_checkpoint_step_and_each_change():
    assert pbt.lineage_line(EXPLOITS[0]) == (
        "step 10: took member 0's checkpoint (step 12), lr 0.001 -> 0.06, "
        "momentum 0.5 -> 0.72 (resampled)"
    )
    # a checkpoint synced at the boundary itself, and a value kept, are not said again
    assert pbt.lineage_line(EXPLOITS[1]) == "step 20: took member 2's checkpoint, lr 0.06 -> 0.012"


@pytest.mark.parametrize(
    "phase, pending, expected",
    [
        (Phase.TRAINING, None, "training toward step 30 (at step 20: loss=0.8)"),
        (
            Phase.EXPLOITING,
            {"step": 20, "donor": 2},
            "stopping to take member 2's checkpoint (step 20, 10 s)",
        ),
        (Phase.WAITING, None, "queued to resume at step 14 from member 2's checkpoint (10 s)"),
        (Phase.DONE, None, "done at step 30"),
    ],
)
def test_what_a_member_is_doing_is_said_from_its_phase(phase, pending, expected):
    pop = population()
    m = replace(pop.members[1], phase=phase, pending=pending, resume_step=14)
    assert pbt.doing(m, pop, now=60.0) == expected


def test_a_member_whose_job_is_queued_says_it_waits_to_train():
    pop = replace(population(), queued=frozenset({1}))
    m = pop.members[1]
    assert pbt.doing(m, pop) == "queued to train toward step 30 (at step 20: loss=0.8)"


def test_a_member_with_no_boundary_yet_trains_toward_its_first():
    pop = population()
    m = replace(pop.members[2], phase=Phase.TRAINING, step=None, value=None)
    assert pbt.doing(m, pop) == "training toward step 10"


def test_fleet_why_counts_the_exploits_and_says_what_each_member_does():
    pop = population()
    view = SearchView(search_id="s1", name="pop", config=CONFIG, issued=3, ended=1, running=2)
    w = searchwhy.explain(view, population=pop, at=60.0)
    text = searchwhy.lines(w)
    assert "  population: 3 members (1 training, 1 waiting, 1 done)" in text
    assert "  exploits: 2 applied (judged every 10 steps to 30)" in text
    assert "  member 1: training toward step 30 (at step 20: loss=0.8); 2 exploits" in text
    assert all(len(ln) <= 80 for ln in text), text
    assert "  member 0: done at step 30" in text
    assert not any("more trial(s) to issue" in ln for ln in text)
    d = json.loads(to_json(w.to_dict()))
    assert d["population"]["exploits"] == 2
    assert [m["phase"] for m in d["population"]["members"]] == ["done", "training", "waiting"]


def test_fleet_why_of_a_search_without_pbt_has_no_population():
    view = SearchView(search_id="s1", name="t", config=SearchConfig("loss", {}, trials=4))
    w = searchwhy.explain(view)
    assert "population" not in w.to_dict()
    assert not any("population" in ln for ln in searchwhy.lines(w))


def rendered(b: R.Leaderboard, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, markup=False, highlight=False).print(RC.render(b, width=width))
    return out.getvalue()


def test_fleet_results_shows_each_exploited_members_lineage_within_80_columns():
    text = rendered(board(population()))
    lines = text.splitlines()
    assert all(len(ln) <= 80 for ln in lines), text
    assert "lineage: 2 exploits, each member's in order" in text
    flat = " ".join(ln.strip() for ln in lines)
    assert "step 0: lr=0.001 momentum=0.5" in flat
    assert "step 10: took member 0's checkpoint (step 12), lr 0.001 -> 0.06," in flat
    assert "step 20: took member 2's checkpoint, lr 0.06 -> 0.012" in flat
    # only the member that exploited has a lineage: the others kept their values
    assert "step 0: lr=0.05" not in flat


def test_fleet_results_of_a_population_that_never_exploited_says_so():
    pop = replace(population(), exploits=())
    assert "lineage: 0 exploits; every member kept its own values" in rendered(board(pop))


def test_fleet_results_json_carries_each_members_schedule_and_lineage_strictly():
    b = board(population())
    rows = json.loads(to_json(b.to_list()))
    one = next(r for r in rows if r["trial"] == 1)
    assert [s["step"] for s in one["member"]["schedule"]] == [0, 10, 20]
    assert one["member"]["lineage"][0]["text"].startswith("step 10: took member 0's")
    assert one["member"]["lineage"][0]["checkpoint_step"] == 12
    assert all("member" not in r for r in json.loads(to_json(board().to_list())))


def test_plot_marks_each_exploit_on_its_members_curve_and_draws_each_value_over_the_steps():
    b = board(population())
    d = plotdata.prepare(b)
    assert [(m.trial, m.step, m.value, m.donor) for m in d.marks] == [
        (1, 10, 3.0, 0),
        (1, 20, 2.0, 2),
    ]
    lr = next(s for s in d.schedules if s.name == "lr")
    assert lr.members[1] == ([0, 10, 20, 20], [0.001, 0.06, 0.012, 0.012])
    assert lr.members[0] == ([0, 30], [0.05, 0.05])  # done: drawn to its last step
    assert lr.best == b.best.trial == 1
    assert plotdata.prepare(board()).schedules == [] and plotdata.prepare(board()).marks == []


def test_plot_writes_a_picture_of_a_population(tmp_path):
    from fleet import plot

    path = plot.save(plotdata.prepare(board(population())), tmp_path / "pop.png")
    assert path.stat().st_size > 10_000


def test_mlflow_gets_each_numeric_value_at_every_boundary_the_values_in_force_there():
    pop = population()
    pts = mlflow_export.schedule_points(pop.members[1], pop)
    lr = [(step, v) for k, v, _, step in pts if k == "pbt/lr"]
    assert lr == [(0, 0.001), (10, 0.06), (20, 0.012)]
    done = [(s, v) for k, v, _, s in mlflow_export.schedule_points(pop.members[0], pop)]
    assert [s for s, _ in done[::2]] == [0, 10, 20, 30]
    tags = mlflow_export.member_tags(pop.members[1], pop)
    assert json.loads(tags["fleet.pbt.schedule"])[2]["donor"] == 2
    assert tags["fleet.pbt.lineage"].splitlines()[1].startswith("step 20: took member 2's")


def test_optuna_gets_one_trial_per_member_segment_each_cut_at_its_exploit():
    b, pop = board(population()), population()
    row = next(t for t in b.trials if t.trial == 1)
    parts = OX.segments(row, pop.members[1], pop)
    assert [(p.start, p.end, p.state) for p in parts] == [
        (0, 10, JobState.PRUNED.value),
        (10, 20, JobState.PRUNED.value),
        (20, None, row.state),
    ]
    assert [p.value for p in parts] == [3.0, 2.0, row.value]
    assert parts[1].params == {"lr": 0.06, "momentum": 0.72}
    assert parts[2].attrs["fleet_pbt_donor"] == 2 and parts[2].attrs["fleet_pbt_to_step"] == 30


def test_optuna_export_writes_a_trial_per_segment(tmp_path):
    from state.search.study import distributions

    b = board(population())
    made = OX.made_trials(b, distributions(CONFIG.space))
    assert len(made) == 5  # members 0 and 2 one segment each, member 1 three
    seg = next(t for t in made if t.user_attrs.get("fleet_pbt_segment") == 1)
    assert seg.params["lr"] == 0.06 and seg.state.name == "PRUNED"
    assert sorted(seg.intermediate_values) == list(range(11, 21))
    url = f"sqlite:///{tmp_path / 'o.db'}"
    got = OX.write(b, CONFIG.space, "minimize", "pop", url)
    assert got.trials == 5


def test_the_live_page_has_the_population_its_marks_and_schedules():
    b, view = board(population()), SearchView(search_id="s1", name="pop", config=CONFIG)
    d = json.loads(to_json(searchpage.page(view, b, now=60.0)))
    assert d["pbt"]["exploits"] == 2 and len(d["pbt"]["members"]) == 3
    assert d["pbt"]["members"][1]["lineage"][1]["text"].startswith("step 20: took member 2's")
    assert d["pbt"]["marks"][0] == {"trial": 1, "step": 10, "value": 3.0, "donor": 0}
    lr = next(s for s in d["pbt"]["schedules"] if s["name"] == "lr")
    assert lr["members"][1]["steps"] == [0, 10, 20, 20]
    assert lr["members"][1]["values"] == [0.001, 0.06, 0.012, 0.012]
    assert searchpage.page(view, board())["pbt"] is None
