"""When a run cut off from Redis stops itself (tasks.lease.fence_after_s): pure."""

import pytest

from core.constants import LEASE_FENCE_MARGIN_S
from tasks.lease import fence_after_s


@pytest.mark.parametrize(
    "ttl_s, after_s",
    [
        (60.0, 60.0 - LEASE_FENCE_MARGIN_S),  # the default lease: a tick and a kill to spare
        (600.0, 600.0 - LEASE_FENCE_MARGIN_S),
        (20.0, 15.0),  # a short lease keeps three quarters of itself
        (2.0, 1.5),
    ],
)
def test_a_run_stops_a_margin_before_its_lease_can_lapse(ttl_s, after_s):
    assert fence_after_s(ttl_s) == pytest.approx(after_s)
    assert 0 < fence_after_s(ttl_s) < ttl_s
