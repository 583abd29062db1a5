"""tests/waiting.py's wait_until: returns as soon as the condition holds, or says what never
happened."""

import pytest

from tests.waiting import wait_until


def test_wait_until_returns_the_first_truthy_value_as_soon_as_it_comes():
    seen = iter([0, None, "", "there", "later"])
    assert wait_until("a value", lambda: next(seen), 5, every_s=0.001) == "there"


def test_wait_until_names_what_never_happened_its_last_value_and_the_detail():
    with pytest.raises(AssertionError, match=r"the sky falls: not within 0.05 s \(last: 0\)\nlogs"):
        wait_until("the sky falls", lambda: 0, 0.05, lambda: "logs", every_s=0.01)


def test_an_ignored_error_counts_as_not_yet_and_any_other_is_raised():
    calls = iter([ConnectionError("restarting"), ConnectionError("restarting"), "up"])

    def check():
        got = next(calls)
        if isinstance(got, Exception):
            raise got
        return got

    assert wait_until("up", check, 5, every_s=0.001, ignoring=(ConnectionError,)) == "up"
    with pytest.raises(ValueError):
        wait_until("up", lambda: int("x"), 5, ignoring=(ConnectionError,))
