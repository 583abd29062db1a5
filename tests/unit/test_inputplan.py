"""A pipeline follower's start, decided without Redis or a store (tasks.inputplan,
artifacts.inputs.folder): params_from's values under the job's own hyper, the lines its log
says, the folder each input gets under $FLEET_INPUTS, and which bundles it fetches or why not."""

import pytest

from artifacts.inputs import folder
from core.errors import InputUnavailable
from manifest.pipeline import Kind, Upstream
from tasks import inputplan
from tests.harness.records import job_record

SHA = "ab" * 32
URI = f"s3://bucket/fleet/command/{SHA}/bundle.tar.zst"


def upstream(job_id: str = "p" * 64, name: str = "prep", state: str = "succeeded", **art):
    artifact = {"uri": URI, "sha256": SHA, "size": 10, **art}
    return job_record(job_id=job_id, name=name, state=state, artifact=artifact)


@pytest.mark.parametrize(
    "own, params, hyper",
    [
        ({}, {"lr": 0.1}, {"lr": 0.1}),
        ({"epochs": 200}, {"lr": 0.1, "epochs": 150}, {"lr": 0.1, "epochs": 200}),
        ({"lr": 0.5}, {"lr": 0.1}, {"lr": 0.5}),
        ({"epochs": 200}, {}, {"epochs": 200}),
    ],
)
def test_params_from_values_go_under_the_jobs_own_hyper(own, params, hyper):
    assert inputplan.merge_params(own, params, "search tune").hyper == hyper


def test_the_log_says_which_values_came_from_the_search_and_which_are_the_jobs_own():
    merged = inputplan.merge_params(
        {"epochs": 200}, {"lr": 0.01, "opt": "adam", "epochs": 150}, "search tune"
    )
    assert merged.lines == (
        'params_from search tune: lr=0.01, opt="adam" (its best trial\'s)',
        "params_from search tune: the job's own epochs=200 (not 150)",
    )


def test_the_search_is_named_as_the_manifest_calls_it_or_by_its_short_id():
    after = (Upstream(Kind.JOB, "p" * 64, "prep"), Upstream(Kind.SEARCH, "s" * 64, "tune"))
    assert inputplan.source_name(after, "s" * 64) == "search tune"
    assert inputplan.source_name((), "s" * 64) == "search " + "s" * 12


@pytest.mark.parametrize(
    "name, got",
    [
        ("prep", "prep"),
        ("prep[lr=0.1]", "prep[lr=0.1]"),
        ('prep[opt="adam"]', 'prep[opt="adam"]'),
        ('prep[path="a/b"]', 'prep[path="a%2Fb"]'),
        ('prep[path="a%2Fb"]', 'prep[path="a%252Fb"]'),  # one-to-one: '%' escaped first
        ("..", "%2E."),
        (".hidden", "%2Ehidden"),
    ],
)
def test_each_input_gets_one_folder_named_as_written_with_what_a_file_name_cannot_hold_escaped(
    name, got
):
    assert folder(name) == got


def test_a_job_upstream_gives_its_recorded_bundle_under_its_name():
    (w,) = inputplan.plan(
        "final", ["prep"], [{"dir": "prep", "job_id": "p" * 64}], {"p" * 64: upstream()}
    )
    assert (w.dir, w.upstream, w.job_id, w.kind, w.sha256) == (
        "prep",
        "prep",
        "p" * 64,
        "command",
        SHA,
    )


def test_a_sweep_gives_one_input_per_point_and_a_search_its_best_trials_bundle():
    ups = {
        "a" * 64: upstream("a" * 64, "prep[lr=0.1]"),
        "b" * 64: upstream("b" * 64, "prep[lr=0.2]"),
        "t" * 64: upstream("t" * 64, "tune[trial=3]", state="pruned"),
    }
    resolved = [
        {"dir": "prep[lr=0.1]", "job_id": "a" * 64},
        {"dir": "prep[lr=0.2]", "job_id": "b" * 64},
        {"dir": "tune", "job_id": "t" * 64},
    ]
    wanted = inputplan.plan("final", [r["dir"] for r in resolved], resolved, ups)
    assert [(w.folder, w.upstream) for w in wanted] == [
        ("prep[lr=0.1]", "prep[lr=0.1]"),
        ("prep[lr=0.2]", "prep[lr=0.2]"),
        ("tune", "tune[trial=3]"),
    ]


@pytest.mark.parametrize(
    "ups, says",
    [
        ({}, "upstream job pppppppppppp has no record"),
        ({"p" * 64: upstream(state="running")}, "upstream prep (pppppppppppp) is running"),
        (
            {"p" * 64: job_record(job_id="p" * 64, name="prep", state="succeeded")},
            "is recorded without a bundle",
        ),
        ({"p" * 64: upstream(uri="s3://b/x.tar")}, "the record was changed by hand"),
    ],
)
def test_an_upstream_that_cannot_give_its_bundle_is_an_error_naming_it_and_the_fix(ups, says):
    with pytest.raises(InputUnavailable) as e:
        inputplan.plan("final", ["prep"], [{"dir": "prep", "job_id": "p" * 64}], ups)
    assert str(e.value).startswith("input prep: ") and says in str(e.value)
    assert "fleet requeue final" in str(e.value) or "run the upstream again" in str(e.value)


def test_a_declared_input_the_release_resolved_no_job_for_is_an_error():
    with pytest.raises(InputUnavailable, match="input tune: the job's record names no upstream"):
        inputplan.plan(
            "final",
            ["prep", "tune"],
            [{"dir": "prep", "job_id": "p" * 64}],
            {"p" * 64: upstream()},
        )
