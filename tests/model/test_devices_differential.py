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

from kruntimes.devices import allocation, claims, inventory_codec, usage
from tests.model import devices_compare, devices_workloads


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_device_allocation_decides_every_pod_as_the_spec_model_does(rng: random.Random) -> None:
    workload = devices_workloads.workload(rng)
    note(json.dumps(workload))
    assert devices_compare.differences(workload) == []


@settings(max_examples=150, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_every_allocation_passes_the_reserve_recheck_on_the_usage_it_saw(rng: random.Random) -> None:
    workload = devices_workloads.workload(rng)
    note(json.dumps(workload))
    claim = claims.parse_claim(workload["claim"])
    classes = {n: claims.parse_class(n, 1, s) for n, s in workload["classes"].items() if n != "bad"}
    for pod in workload["pods"]:
        inv = inventory_codec.parse_document(pod["inventory"])
        holders = [usage.Holder(h["device"], None if h.get("consumed") is None
                                     else tuple(sorted(h["consumed"].items()))) for h in pod["holders"]]
        outcome = allocation.allocate(inv, holders, claim, classes, devices_compare.ENGINE, allocation.CycleBudget())
        if isinstance(outcome, allocation.Allocation):
            assert allocation.recheck(inv, holders, claim, outcome.results)


@settings(max_examples=200, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.lists(st.tuples(st.sampled_from([0, 1, 2, 3, 5, 8, 13, 10_000]),
                                                            st.sampled_from([0, 4, 9, 40, 50_000])), min_size=2, max_size=4))
def test_a_search_memo_across_cycles_changes_no_outcome_and_no_charge(rng: random.Random, cycles: list) -> None:
    """SPEC §7.5 step 4: memos across cycles are allowed, a hit charged its recorded steps: replay-identical."""
    workload = devices_workloads.workload(rng)
    note(json.dumps(workload))
    memo = allocation.SearchMemo()
    for search_steps, cycle_steps in cycles:
        cycle = dict(workload, search_steps=search_steps, cycle_steps=cycle_steps)
        assert devices_compare.product(cycle, memo) == devices_compare.product(cycle)
