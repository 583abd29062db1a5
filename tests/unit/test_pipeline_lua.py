"""lua/release.lua builds its key names from the job prefix a script has; each is the one
core.constants names, so a renamed constant cannot leave the Lua writing another key."""

from __future__ import annotations

import re

from core import constants as C
from state import scripts


def test_every_key_release_lua_builds_is_the_one_core_constants_names():
    text = scripts.SOURCES["release"]
    built = dict(re.findall(r"(\w+) = root \.\. '([^']+)'", text))
    assert {k: C.KEY_PREFIX + v for k, v in built.items()} == {
        "search": C.SEARCH_KEY,
        "followers": C.FOLLOWERS_KEY,
        "waits": C.WAITS_KEY,
        "releasing": C.RELEASING_KEY,
        "releases": C.RELEASES_KEY,
        "owner_lists": C.OWNER_LISTS_KEY,
        "fallback": C.FALLBACK_ZSET,
        "active": C.ACTIVE_SEARCHES_KEY,
    }
    assert C.JOB_KEY == C.KEY_PREFIX + "job:"  # the prefix it strips to find the root


def test_every_script_that_records_an_end_releases_in_the_same_step():
    for name in ("finish", "claim", "reap", "adopt", "cancel", "search_sync"):
        assert (
            "pipe_job_ended(" in scripts.SOURCES[name] or "pipe_ended(" in scripts.SOURCES[name]
        ), name
        assert "--@@RELEASE@@" in scripts.SOURCES[name], name
