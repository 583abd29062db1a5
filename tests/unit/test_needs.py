"""tests.needs: what .ci/run installs skips a test locally and fails it in CI."""

import pytest

from tests.needs import CI_ENV, missing


def test_a_missing_tool_skips_the_test_on_a_developers_machine(monkeypatch):
    monkeypatch.delenv(CI_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium is not installed"):
        missing("chromium is not installed")


def test_a_missing_tool_fails_the_test_in_ci(monkeypatch):
    monkeypatch.setenv(CI_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="chromium is not installed .*FLEET_CI=1"):
        missing("chromium is not installed")
