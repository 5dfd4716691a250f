"""The smallest workloads for each disagreement the differential campaign found.

`findings/*.yaml` each hold one rule of the SPEC that `simulate` broke at the branch
point of issue 12 (01-07 and 10 are issue 12's defects, 08-09 were found by the model),
with the SPEC section in the file's header. The model's outcome is pinned here (so
the model is checked too); `simulate` must agree with it once the fixes land.
"""

from __future__ import annotations

import pathlib

import pytest

from tests.model import compare, planner
from tests.model.workloads import NOW

FINDINGS = pathlib.Path(__file__).parent / "findings"

EXPECTED = {
    "01-capacity-name-not-qualified.yaml": {"r": ("Pending", None)},
    "02-pod-identity-by-uid.yaml": {"r": ("Scheduled", "p")},
    "03-old-run-affinity-judged-alone.yaml": {"r": ("Pending", None)},
    "04-order-by-instant.yaml": {"early": ("Scheduled", "p"), "late": ("Pending", None)},
    "05-weight-is-an-integer.yaml": {"text": ("Failed", None), "boolean": ("Failed", None)},
    "06-capacity-json-annotation.yaml": {"r": ("Scheduled", "p")},
    "07-required-terms-one-target.yaml": {"r": ("Scheduled", "q")},
    "08-new-heartbeat-not-rfc3339.yaml": {"r": ("Pending", None)},
    "09-new-explicit-null-is-omitted.yaml": {"required-null": ("Scheduled", "p"), "preferred-null": ("Scheduled", "p"),
                                             "values-null": ("Scheduled", "p")},
    "10-assignment-uid-decides-over-name.yaml": {"a": ("Scheduled", "x"), "b": ("Pending", None)},
}


def test_every_finding_has_a_pinned_model_outcome() -> None:
    assert sorted(p.name for p in FINDINGS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_model_decides_each_finding_as_its_header_says(name: str) -> None:
    outcomes = planner.simulate(planner.load((FINDINGS / name).read_text()), NOW)
    assert {o.name: (o.phase, o.pod) for o in outcomes} == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_simulate_agrees_with_the_model_on_each_finding(name: str) -> None:
    assert compare.compare((FINDINGS / name).read_text(), NOW).differences == []
