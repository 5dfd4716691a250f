"""A Lease time survives the client's round trip through its model (issue 13: the emulator checks MicroTimes).

The API server parses ``acquireTime``/``renewTime`` with exactly six fractional digits;
the client re-serialises a parsed time with ``isoformat()``, which drops a zero fraction.
"""

from __future__ import annotations

from datetime import datetime, timezone

import kubernetes.client

from kruntimes.cluster.leader import micro_time


def test_a_whole_second_still_goes_out_with_six_fractional_digits() -> None:
    sent = micro_time(datetime(2026, 12, 1, 15, 4, 5, tzinfo=timezone.utc))
    lease = kubernetes.client.V1Lease.from_dict({"metadata": {"name": "l"}, "spec": {"renewTime": sent}})
    wire = kubernetes.client.ApiClient().sanitize_for_serialization(lease)["spec"]["renewTime"]
    assert wire == "2026-12-01T15:04:05.000001+00:00"
