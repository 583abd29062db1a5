"""``nodes = N``: one job on N distinct hosts (a gang), its needs per host, checked at publish."""

from __future__ import annotations

import pytest

from core.errors import ManifestError
from fleet.feasibility import infeasible, messages
from fleet.manifests import loads
from fleet.publish import offline_plan, plan
from manifest.schema import JobSpec
from routing.capability import Capability
from routing.explain import HostFacts
from state.search.advance import trial_spec

JOB = '[[jobs]]\nname = "g"\ncommand = ["true"]\n'


def test_a_gang_carries_its_nodes_and_its_needs_per_node():
    job = loads(JOB + "nodes = 2\nmin_cores = 2\n", "m.toml").jobs[0]
    assert (job.nodes, job.gang, job.needs.min_cores) == (2, True, 2)


def test_a_job_without_nodes_keeps_its_spec_and_id():
    plain = loads(JOB, "m.toml").jobs[0]
    assert not plain.gang and "nodes" not in plain.to_dict()
    assert JobSpec.from_dict(plain.to_dict()) == plain


def test_nodes_is_part_of_the_job_id_and_round_trips():
    plain, two, three = (
        loads(JOB + extra, "m.toml").jobs[0] for extra in ("", "nodes = 2\n", "nodes = 3\n")
    )
    assert len({plain.job_id, two.job_id, three.job_id}) == 3
    assert JobSpec.from_dict(two.to_dict()) == two


@pytest.mark.parametrize(
    ("extra", "where", "said", "fix"),
    [
        ("nodes = 1\n", "jobs[0].nodes", "must be 2..64, got 1", "leave nodes out"),
        ("nodes = 0\n", "jobs[0].nodes", "must be 2..64, got 0", "leave nodes out"),
        ("nodes = 65\n", "jobs[0].nodes", "must be 2..64, got 65", "leave nodes out"),
        ('nodes = "2"\n', "jobs[0].nodes", "", ""),
        (
            "nodes = 2\nrequire_cuda = true\nshare_gpu = true\nmin_vram_gib = 4\n",
            "jobs[0].share_gpu",
            "share_gpu does not go with nodes",
            "drop share_gpu",
        ),
        (
            "nodes = 2\nprefer_cuda = true\n",
            "jobs[0].prefer_cuda",
            "prefer_cuda does not go with nodes",
            "set require_cuda = true",
        ),
    ],
)
def test_a_gang_that_makes_no_sense_is_refused_at_its_line_with_the_fix(extra, where, said, fix):
    with pytest.raises(ManifestError) as e:
        loads(JOB + extra, "m.toml")
    text = str(e.value)
    # the job's keys start at line 2; the bad one is on line 4 or later
    assert f"m.toml:4: {where}" in text or f"m.toml:5: {where}" in text or where in text
    assert said in text and fix in text


def test_a_gang_may_be_preemptible_it_is_handed_back_as_a_whole():
    job = loads(JOB + "nodes = 2\npreemptible = true\n", "m.toml").jobs[0]
    assert job.gang and job.preemptible


def test_a_bad_nodes_value_is_named_at_its_own_line():
    with pytest.raises(ManifestError) as e:
        loads(JOB + "seed = 1\nnodes = 1\n", "m.toml")
    assert "m.toml:5: jobs[0].nodes" in str(e.value)


def cpu_host(name):
    return HostFacts(Capability(name, 8, 32.0, 32.0, ()), None, ())


def test_a_gang_with_fewer_qualifying_live_hosts_than_nodes_is_warned_about():
    m = loads(JOB + "nodes = 3\n", "m.toml")
    [w] = infeasible(plan(m, {}), m, [cpu_host("a"), cpu_host("b")])
    assert w.gang and w.jobs == ("g",)
    assert messages([w]) == [
        "gang g in queue cpu cannot start yet: only 2 live host(s) qualify (a, b), and "
        "nodes = 3 needs that many distinct hosts. Queued anyway: it starts when that many "
        "hosts are live"
    ]


def test_a_gang_enough_live_hosts_qualify_for_is_not_warned_about():
    m = loads(JOB + "nodes = 2\n", "m.toml")
    assert infeasible(plan(m, {}), m, [cpu_host("a"), cpu_host("b")]) == []


def test_every_point_of_a_sweep_may_be_a_gang():
    jobs = loads(JOB + "nodes = 2\n[jobs.sweep]\nseed = [0, 1, 2]\n", "m.toml").jobs
    assert [j.nodes for j in jobs] == [2, 2, 2] and len({j.job_id for j in jobs}) == 3


def test_every_trial_of_a_search_may_be_a_gang():
    text = (
        JOB + 'nodes = 2\n[jobs.search]\nmetric = "loss"\ntrials = 4\n'
        "[jobs.search.space]\nlr = { low = 0.001, high = 0.1 }\n"
    )
    [search] = loads(text, "m.toml").searches
    assert search.base.nodes == 2
    spec = trial_spec(search.search_id, 3, search.base.to_dict(), {"lr": 0.01})
    trial = JobSpec.from_dict(spec)
    assert (trial.nodes, trial.gang, trial.trial) == (2, True, 3)


def test_a_search_of_gangs_is_a_search_of_its_own_not_the_one_host_searchs():
    search = (
        '[jobs.search]\nmetric = "loss"\ntrials = 4\n'
        "[jobs.search.space]\nlr = { choices = [1, 2] }\n"
    )
    one, two = (loads(JOB + n + search, "m.toml").searches[0] for n in ("", "nodes = 2\n"))
    assert one.search_id != two.search_id


def test_a_search_of_gangs_with_fewer_qualifying_live_hosts_than_nodes_is_warned_about():
    m = loads(
        JOB + 'nodes = 3\n[jobs.search]\nmetric = "loss"\ntrials = 4\n'
        "[jobs.search.space]\nlr = { low = 0.001, high = 0.1 }\n",
        "m.toml",
    )
    [w] = infeasible(offline_plan(m, frozenset()), m, [cpu_host("a"), cpu_host("b")])
    assert w.gang and w.jobs == ("g",)
