"""What an operator's job reference names, decided without Redis: IDs, prefixes, names,
sweeps, globs, and the reason when it names none or several."""

import pytest

from core.errors import AmbiguousJob, JobNotFound, StoreError
from fleet.cli.artifacts import file_stem
from fleet.query.artifacts import locate
from fleet.query.refs import decide, one

A, B, C = "abcd1234" + "0" * 56, "abcd9999" + "0" * 56, "ffff0000" + "0" * 56
NAMES = {"gbt-wine[seed=1]": A, "gbt-wine[seed=2]": B, "report": C}


@pytest.mark.parametrize(
    "ref, prefix_hits, exists, how, ids",
    [
        (A, [A], True, "id", [A]),
        ("report", None, False, "name", [C]),
        ("gbt-wine[seed=2]", None, False, "name", [B]),
        ("ffff", [C], False, "prefix", [C]),  # 4 characters are enough when unique
        ("abcd", [A, B], False, "prefix", [A, B]),
        ("gbt-wine", None, False, "sweep", [A, B]),
        ("gbt-*[seed=1]", None, False, "glob", [A]),
        ("nothing", None, False, "none", []),
    ],
)
def test_a_reference_resolves_by_id_name_prefix_sweep_or_glob(ref, prefix_hits, exists, how, ids):
    res = decide(ref, NAMES, prefix_hits, exists)
    assert res.how == how and [h.job_id for h in res.hits] == ids


def test_a_unique_four_character_prefix_names_one_job():
    assert one(decide("ffff", NAMES, [C])) == C


def test_an_ambiguous_prefix_lists_its_candidates():
    with pytest.raises(
        AmbiguousJob,
        match=r"ID prefix 'abcd' matches 2 jobs: abcd12340000 gbt-wine\[seed=1\], "
        r"abcd99990000 gbt-wine\[seed=2\]; give a longer prefix",
    ):
        one(decide("abcd", NAMES, [A, B]))


def test_a_sweep_name_where_one_job_is_wanted_says_to_name_one():
    with pytest.raises(
        AmbiguousJob,
        match=r"'gbt-wine' names a sweep of 2 jobs: .*name one job, e.g. "
        r"'gbt-wine\[seed=1\]'",
    ):
        one(decide("gbt-wine", NAMES, None))


def test_a_too_short_prefix_says_how_long_it_must_be():
    with pytest.raises(
        JobNotFound, match=r"'abc' is too short for an ID prefix \(give at least 4 characters\)"
    ):
        one(decide("abc", NAMES, None))


def test_an_unknown_name_points_at_fleet_status():
    with pytest.raises(JobNotFound, match=r"no job named 'nope'; see `fleet status`"):
        one(decide("nope", NAMES, None))


def test_a_glob_that_matches_nothing_says_it_was_read_as_a_glob():
    res = decide("mlp-*", NAMES, None)
    assert res.how == "none" and res.note.startswith("no job name matches the glob 'mlp-*'")


@pytest.mark.parametrize(
    "uri, store, kind, sha",
    [
        ("s3://bkt/runs/gbt/" + A + "/bundle.tar.zst", "s3://bkt/runs", "gbt", A),
        ("s3://bkt/gbt/" + A + "/bundle.tar.zst", "s3://bkt", "gbt", A),
        ("file:///srv/store/command/" + A + "/bundle.tar.zst", "file:///srv/store", "command", A),
    ],
)
def test_a_bundle_uri_splits_into_its_store_kind_and_digest(uri, store, kind, sha):
    loc = locate(uri)
    assert (loc.store_url, loc.kind, loc.sha256) == (store, kind, sha)


@pytest.mark.parametrize(
    "uri", ["http://x/gbt/a/bundle.tar.zst", "s3://bkt/bundle.tar.zst", "s3://b/k/s/other"]
)
def test_a_uri_that_is_not_a_bundle_is_refused_naming_the_form(uri):
    with pytest.raises(StoreError, match="expected <store>/<kind>/<sha256>/bundle.tar.zst"):
        locate(uri)


@pytest.mark.parametrize(
    "name, stem",
    [
        ("report", "report"),
        ("gbt[seed=1]", "gbt.seed=1"),
        ('m[opt="adam",lr=0.1]', "m.opt=_adam_,lr=0.1"),
        ("a/../b", "a_.._b"),
        ("..", "job"),
    ],
)
def test_job_names_become_safe_file_names(name, stem):
    assert file_stem(name) == stem
