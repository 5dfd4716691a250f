"""`kruntimes simulate` against the model (`tests/model/planner.py`) on random workloads.

Every eligible Pending Run's outcome must be one the SPEC allows given the model's
(`tests/model/compare.py` says exactly what is compared). The workloads are drawn
by `tests/model/workloads.py`; CI runs a fixed, derandomised set of 200.

This test is meant to pass once issue 12's fixes are in. On a branch without them
it fails, and the first difference it shrinks to names the defect: a crash on a
`kruntimes.io/capacity._x` annotation (#1), the JSON `kruntimes.io/capacity`
annotation not read (§2.1 amended), Runs on an earlier pod UID attracting,
repelling or binding workspaces (#2), an old active Run's anti-affinity lost with
a malformed request (#3), order by timestamp text (#4), `weight: "10"` or `true`
accepted (#5), the multi-term affinity rule (§3.3 amended). Do not xfail it: run
`python -m tests.model.campaign` to classify what it finds.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests.model import compare, workloads


@settings(max_examples=200, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_simulate_decides_every_pending_run_as_the_spec_model_does(rng: random.Random) -> None:
    text = workloads.to_yaml(workloads.workload(rng))
    note(f"--now {workloads.NOW.isoformat()}\n{text}")
    report = compare.compare(text, workloads.NOW)
    assert report.differences == []
