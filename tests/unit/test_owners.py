"""Who owns a published job: --owner, else FLEET_OWNER, else user@host; names are short tokens."""

import pytest

from core.errors import ConfigError
from fleet import owners
from fleet.query import jobs as Q
from state.jobrecord import JobRecord, JobState


@pytest.mark.parametrize(
    "flag, env, expected",
    [
        ("alice", {"FLEET_OWNER": "bob"}, "alice"),
        (None, {"FLEET_OWNER": "bob"}, "bob"),
        (None, {"FLEET_OWNER": ""}, owners.default_owner()),
        (None, {}, owners.default_owner()),
    ],
)
def test_the_flag_wins_then_the_environment_then_user_at_host(flag, env, expected):
    assert owners.resolve(flag, env) == expected


def test_the_default_is_user_at_host():
    import getpass
    import socket

    assert owners.default_owner() == f"{getpass.getuser()}@{socket.gethostname()}"


@pytest.mark.parametrize("name", ["alice", "alice@lab3.example.org", "b_o-b+1", "7"])
def test_short_printable_tokens_are_owners(name):
    assert owners.validate(name) == name


@pytest.mark.parametrize("name", ["", "alice smith", "-alice", "a" * 65, "al/ice", "é", "a\tb"])
def test_anything_else_is_an_error_that_says_how_to_fix_it(name):
    with pytest.raises(ConfigError, match="pass --owner NAME or set FLEET_OWNER"):
        owners.validate(name)


def test_a_bad_fleet_owner_is_named_as_such():
    with pytest.raises(ConfigError, match=r"^FLEET_OWNER 'a b'"):
        owners.resolve(None, {"FLEET_OWNER": "a b"})


@pytest.mark.parametrize(
    "owner, kept",
    [("alice", ["a1", "a2"]), ("bob", ["b1"]), ("carol", []), (None, ["a1", "a2", "b1"])],
)
def test_status_filters_by_owner_exactly(owner, kept):
    rows = [
        JobRecord("a1", "a1", JobState.QUEUED, owner="alice"),
        JobRecord("a2", "a2", JobState.FAILED, owner="alice"),
        JobRecord("b1", "b1", JobState.QUEUED, owner="bob"),
    ]
    v = Q.view(rows, Q.JobFilter(owner=owner), now=0.0, limit=None)
    assert sorted(r.job_id for r in v.rows) == kept
    assert ("owner = " + owner in v.summary()) if owner else "match" not in v.summary()


def test_status_json_carries_the_owner():
    row = JobRecord("a1", "a1", JobState.QUEUED, owner="alice")
    assert Q.row_dict(row, 0.0)["owner"] == "alice"


def test_the_owner_column_is_the_first_dropped_when_the_table_does_not_fit():
    from fleet.cli.jobs import STATUS

    assert STATUS.optional[-1] == "owner"
