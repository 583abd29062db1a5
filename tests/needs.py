"""Tools and servers that .ci/run installs: missing here, their tests skip; missing in CI
(FLEET_CI=1, set by .ci/run), they fail, so a broken install cannot pass as skipped tests."""

from __future__ import annotations

import os

import pytest

CI_ENV = "FLEET_CI"


def in_ci() -> bool:
    return os.environ.get(CI_ENV) == "1"


def missing(what: str) -> None:
    """Stop this test for want of ``what`` (a sentence saying what is missing and how to get
    it): a skip on a developer's machine, a failure in CI."""
    if in_ci():
        pytest.fail(
            f"{what} ({CI_ENV}=1: .ci/run installs it, so its absence fails the run)", pytrace=False
        )
    pytest.skip(what)
