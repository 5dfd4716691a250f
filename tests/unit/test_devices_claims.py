"""`Run.spec.devices` and RuntimeDeviceClass selectors, validated and bounded (SPEC §7.2, §7.3)."""

from __future__ import annotations

import copy

import pytest

from kruntimes.devices import claims

SEL = {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a100"'}}
EXAMPLE = {
    "requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "a100", "selectors": [SEL], "allocationMode": "ExactCount",
                                    "count": 2, "capacity": {"requests": {"gpu.example.com/memory": "20Gi"}}}},
        {"name": "nic", "firstAvailable": [{"name": "fast", "deviceClassName": "nic", "selectors": [SEL]},
                                           {"name": "any", "deviceClassName": "nic"}]},
    ],
    "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": "gpu.example.com/numa"}],
}


def test_the_spec_example_parses_into_requests_alternatives_and_constraints() -> None:
    claim = claims.parse_claim(EXAMPLE)
    gpu, nic = claim.requests
    assert (gpu.name, gpu.first_available, len(gpu.alternatives)) == ("gpu", False, 1)
    assert gpu.alternatives[0] == claims.Alternative(None, "a100", (SEL["cel"]["expression"],), "ExactCount", 2,
                                                     (("gpu.example.com/memory", 20 * 2**30),))
    assert [a.name for a in nic.alternatives] == ["fast", "any"] and nic.alternatives[1].count == 1
    assert claim.constraints == (claims.Constraint(("gpu", "nic"), "gpu.example.com/numa", "match"),)


def test_all_mode_takes_no_count() -> None:
    claim = claims.parse_claim({"requests": [{"name": "all", "exactly": {"deviceClassName": "c", "allocationMode": "All"}}]})
    assert claim.requests[0].alternatives[0].mode == "All" and claim.requests[0].alternatives[0].smallest_count == 1


def test_a_constraint_may_name_one_alternative() -> None:
    spec = copy.deepcopy(EXAMPLE)
    spec["constraints"] = [{"requests": ["nic/fast"], "distinctAttribute": "gpu.example.com/numa"}]
    (constraint,) = claims.parse_claim(spec).constraints
    assert constraint.covers("nic", "fast") and not constraint.covers("nic", "any") and not constraint.covers("gpu", None)


def test_a_claim_digest_is_stable_and_depends_on_the_content() -> None:
    other = copy.deepcopy(EXAMPLE)
    other["requests"][0]["exactly"]["count"] = 1
    assert claims.parse_claim(EXAMPLE).digest == claims.parse_claim(copy.deepcopy(EXAMPLE)).digest
    assert claims.parse_claim(EXAMPLE).digest != claims.parse_claim(other).digest


def _exactly(**fields: object) -> dict:
    return {"requests": [{"name": "r", "exactly": {"deviceClassName": "c", **fields}}]}


INVALID: list[tuple[str, object, str]] = [
    ("no requests", {"requests": []}, "1 to 8"),
    ("nine requests", {"requests": [{"name": f"r{i}", "exactly": {"deviceClassName": "c"}} for i in range(9)]}, "1 to 8"),
    ("a request name that is not a DNS label", {"requests": [{"name": "R_1", "exactly": {"deviceClassName": "c"}}]},
     "DNS label"),
    ("a request name used twice", {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}] * 2}, "used twice"),
    ("both exactly and firstAvailable", {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"},
                                                       "firstAvailable": []}]}, "exactly one of"),
    ("neither exactly nor firstAvailable", {"requests": [{"name": "r"}]}, "exactly one of"),
    ("no class", {"requests": [{"name": "r", "exactly": {}}]}, "deviceClassName"),
    ("count 0", _exactly(count=0), "1 to 32"),
    ("count 33", _exactly(count=33), "1 to 32"),
    ("count as text", _exactly(count="2"), "1 to 32"),
    ("count with All", _exactly(allocationMode="All", count=2), "absent with allocationMode All"),
    ("an unknown allocation mode", _exactly(allocationMode="Some"), "ExactCount or All"),
    ("nine selectors", _exactly(selectors=[SEL] * 9), "at most 8"),
    ("a selector that breaks a static rule", _exactly(selectors=[{"cel": {"expression": "[1].all(x, x > 0)"}}]),
     "comprehension macros"),
    ("a selector that is not {cel: {expression}}", _exactly(selectors=[{"expression": "true"}]), "cel: "),
    ("adminAccess", _exactly(adminAccess=True), "not supported"),
    ("tolerations", _exactly(tolerations=[]), "not supported"),
    ("config on a request", {"requests": [{"name": "r", "config": [], "exactly": {"deviceClassName": "c"}}]},
     "not supported"),
    ("a bad capacity quantity", _exactly(capacity={"requests": {"m": "1.5"}}), "whole number"),
    ("a bad capacity name", _exactly(capacity={"requests": {"a.b/c-d": "1"}}), "C identifier"),
    ("Σ of smallest counts above 32", {"requests": [{"name": f"r{i}", "exactly": {"deviceClassName": "c", "count": 9}}
                                                    for i in range(4)]}, "at least 36 devices"),
    ("selectors above 32 KiB in one Run", {"requests": [{"name": f"r{i}", "exactly": {"deviceClassName": "c", "selectors": [
        {"cel": {"expression": '"' + "a" * 2040 + '" == "b"'}}] * 2}} for i in range(8)]}, "at most 32,768"),
    ("nine firstAvailable alternatives", {"requests": [{"name": "r", "firstAvailable": [
        {"name": f"a{i}", "deviceClassName": "c"} for i in range(9)]}]}, "1 to 8"),
    ("an alternative name used twice", {"requests": [{"name": "r", "firstAvailable": [
        {"name": "a", "deviceClassName": "c"}] * 2}]}, "used twice"),
    ("nine constraints", {**_exactly(), "constraints": [{"matchAttribute": "a.b/c"}] * 9}, "at most 8"),
    ("a constraint with both kinds", {**_exactly(), "constraints": [{"matchAttribute": "a.b/c", "distinctAttribute": "a.b/c"}]},
     "exactly one of"),
    ("a constraint attribute without a domain", {**_exactly(), "constraints": [{"matchAttribute": "numa"}]},
     "fully qualified"),
    ("a constraint naming no request", {**_exactly(), "constraints": [{"requests": ["x"], "matchAttribute": "a.b/c"}]},
     "which is no request"),
    ("a constraint naming an alternative of an exactly request", {**_exactly(), "constraints": [
        {"requests": ["r/x"], "matchAttribute": "a.b/c"}]}, "which is no request"),
]


@pytest.mark.parametrize("spec,message", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_an_invalid_claim_fails_the_run_with_an_actionable_message(spec: object, message: str) -> None:
    with pytest.raises(claims.InvalidClaim, match=message.replace("(", r"\(")):
        claims.parse_claim(spec)


def test_a_class_keeps_its_selectors_generation_and_a_digest() -> None:
    cls = claims.parse_class("a100", 3, {"selectors": [SEL]})
    assert cls.selectors == (SEL["cel"]["expression"],) and cls.generation == 3
    assert cls.digest != claims.parse_class("a100", 3, {"selectors": []}).digest


@pytest.mark.parametrize("spec,message", [
    ({"selectors": [SEL] * 9}, "at most 8"),
    ({"selectors": [{"cel": {"expression": "x.map(y, y)"}}]}, "comprehension macros"),
    ({"config": []}, "not supported"),
], ids=["nine selectors", "a selector breaking a static rule", "config"])
def test_a_class_breaking_the_rules_is_invalid(spec: dict, message: str) -> None:
    with pytest.raises(claims.InvalidDeviceClass, match=message):
        claims.parse_class("c", 1, spec)
