"""What the sweep does with a staged bundle (artifacts.strays.verdict): a pure table."""

import pytest

from artifacts.stores import StagedBundle
from artifacts.strays import Verdict, verdict

GRACE_S, NOW = 100.0, 1_000.0


def staged(sha256: str = "aa", age_s: float | None = 10.0) -> StagedBundle:
    return StagedBundle("tok", "command", sha256, "job1", None if age_s is None else NOW - age_s)


@pytest.mark.parametrize(
    "bundle, recorded, expected",
    [
        (staged("aa"), "aa", Verdict.PROMOTE),  # recorded; its run died before promoting
        (staged("aa", age_s=500), "aa", Verdict.PROMOTE),  # however old
        (staged("aa"), None, Verdict.KEEP),  # its run may still be recorded
        (staged("aa"), "bb", Verdict.KEEP),  # ... even while another bundle is
        (staged("aa", age_s=100), "bb", Verdict.DISCARD),  # superseded; its run had its grace
        (staged("aa", age_s=500), None, Verdict.DISCARD),  # never recorded
        (staged("aa", age_s=None), None, Verdict.DISCARD),  # no readable meta: whose, unknown
    ],
)
def test_a_staged_bundle_is_promoted_when_recorded_and_discarded_once_its_grace_is_over(
    bundle, recorded, expected
):
    assert verdict(bundle, recorded, NOW, GRACE_S) is expected
