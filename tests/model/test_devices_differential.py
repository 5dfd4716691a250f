"""Device allocation (`kruntimes.devices.allocation`) against the plain model of SPEC §7.5.

Every pod's outcome must be the model's: the same devices in the same order with the
same consumed capacity, the same DevicePreference raw score, the same reason, the same
steps; and the cycle must have the same steps left. 300 derandomised workloads here;
`python -m tests.model.devices_campaign --workloads 20000` runs the full campaign.
"""

from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests.model import devices_compare, devices_workloads


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_device_allocation_decides_every_pod_as_the_spec_model_does(rng: random.Random) -> None:
    workload = devices_workloads.workload(rng)
    note(json.dumps(workload))
    assert devices_compare.differences(workload) == []
