"""The `kruntimes.io/devices` annotation: parsed, bounded and digested (SPEC §7.1)."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.api import quantity as api_quantity
from kruntimes.devices import inventory, inventory_codec, quantities, semver

G = "gpu.example.com"


def doc(*devices: dict, **top: object) -> dict:
    return {"driver": G, "devices": list(devices), **top}


def test_a_device_gets_typed_attributes_qualified_by_its_driver() -> None:
    inv = inventory_codec.parse_document(doc({"name": "gpu-0", "attributes": {
        "model": {"string": "a100"}, "numa": {"int": -1}, "nvlink": {"bool": False},
        "driverVersion": {"version": "1.2.3-rc.1+b7"}, "pci.example.com/slot": {"string": "3b"}}}))
    (device,) = inv.devices
    assert device.driver == G and device.attributes == (
        (f"{G}/driverVersion", semver.Version(1, 2, 3, ("rc", 1))), (f"{G}/model", "a100"),
        (f"{G}/numa", -1), (f"{G}/nvlink", False), ("pci.example.com/slot", "3b"))


def test_a_device_with_its_own_driver_qualifies_short_names_with_it() -> None:
    (device,) = inventory_codec.parse_document(doc({"name": "nic-0", "driver": "nic.example.com",
                                                    "attributes": {"speed": {"int": 100}}})).devices
    assert device.attributes == (("nic.example.com/speed", 100),)


def test_the_digest_is_the_sha256_of_the_canonical_text_whatever_the_spacing() -> None:
    document = doc({"name": "b"}, {"name": "a", "capacity": {"memory": {"value": "40Gi"}}})
    loose = json.dumps(document, indent=3)
    inv = inventory_codec.parse_annotation(loose)
    assert inv.text == json.dumps(document, sort_keys=True, separators=(",", ":"))
    assert inv.digest == hashlib.sha256(inv.text.encode()).hexdigest()
    assert [d.name for d in inv.devices] == ["b", "a"]  # device order kept


def test_capacity_and_counters_are_exact_integers() -> None:
    inv = inventory_codec.parse_document(doc(
        {"name": "gpu-0", "capacity": {"memory": {"value": "40Gi"}},
         "consumesCounters": [{"counterSet": "board", "counters": {"mem": "40Gi"}}]},
        sharedCounters=[{"name": "board", "counters": {"mem": "80Gi"}}]))
    assert inv.devices[0].capacity == ((f"{G}/memory", inventory.Capacity(40 * 2**30)),)
    assert inv.counters() == {"board": {"mem": 80 * 2**30}}
    assert inv.devices[0].consumes_counters == (inventory.CounterUse("board", (("mem", 40 * 2**30),)),)


def test_content_digests_ignore_the_device_name_and_see_everything_else() -> None:
    a, b, c = inventory_codec.parse_document(doc(
        {"name": "x", "attributes": {"m": {"int": 1}}}, {"name": "y", "attributes": {"m": {"int": 1}}},
        {"name": "z", "attributes": {"m": {"string": "1"}}})).devices
    assert a.content_digest == b.content_digest != c.content_digest


POLICY: list[tuple[str, dict, int | None, int | None]] = [
    ("validValues round a request up to the next value", {"default": "1Gi", "validValues": ["1Gi", "4Gi", "8Gi"]}, 3 * 2**30, 4 * 2**30),
    ("validValues refuse a request above the largest", {"default": "1Gi", "validValues": ["1Gi", "4Gi"]}, 5 * 2**30, None),
    ("a range rounds up to its minimum", {"default": "2", "validRange": {"min": "2", "max": "10"}}, 1, 2),
    ("a range with a step rounds up to min + k·step", {"default": "2", "validRange": {"min": "2", "step": "3"}}, 6, 8),
    ("a request on a step is kept", {"default": "2", "validRange": {"min": "2", "step": "3"}}, 5, 5),
    ("a range refuses above its maximum after rounding", {"default": "2", "validRange": {"min": "2", "max": "7", "step": "3"}}, 6, None),
    ("an unrequested capacity takes the default", {"default": "4Gi", "validValues": ["1Gi", "4Gi"]}, None, 4 * 2**30),
]


@pytest.mark.parametrize("policy,request_,consumed", [p[1:] for p in POLICY], ids=[p[0] for p in POLICY])
def test_a_request_policy_rounds_as_upstream_does(policy: dict, request_: int | None, consumed: int | None) -> None:
    (device,) = inventory_codec.parse_document(doc({"name": "g", "allowMultipleAllocations": True, "capacity": {
        "m": {"value": "16Gi", "requestPolicy": policy}}})).devices
    assert device.capacity[0][1].consumed(request_) == consumed


def test_an_unrequested_capacity_without_a_policy_takes_the_whole_value() -> None:
    assert inventory.Capacity(10).consumed(None) == 10 and inventory.Capacity(10).consumed(3) == 3


def _many(n: int, entry: dict) -> list[dict]:
    return [dict(entry, name=f"d-{i}") for i in range(n)]


MALFORMED: list[tuple[str, object, str]] = [
    ("text that is not JSON", "{", "not JSON"),
    ("a key twice in one object", '{"driver":"a.b","driver":"a.b","devices":[]}', "appears twice"),
    ("NaN", '{"driver":"a.b","devices":[{"name":"x","attributes":{"n":{"int":NaN}}}]}', "not JSON"),
    ("a JSON array", "[]", "must be a JSON object"),
    ("an unknown top-level field", json.dumps(doc(extra=1)), "unknown field 'extra'"),
    ("a driver that is not a DNS subdomain", json.dumps({"driver": "GPU!", "devices": []}), "DNS subdomain"),
    ("a text over 64 KiB", json.dumps(doc(*_many(60, {"attributes": {"s": {"string": "x" * 64}}}))) + " " * 65536,
     "larger than 65,536"),
    ("65 devices", json.dumps(doc(*_many(65, {}))), "at most 64"),
    ("a duplicate device name", json.dumps(doc({"name": "a"}, {"name": "a"})), "used twice"),
    ("a device name that is not a DNS label", json.dumps(doc({"name": "GPU_0"})), "DNS label"),
    ("33 attributes and capacities", json.dumps(doc({"name": "a", "attributes": {f"a{i}": {"int": i} for i in range(20)},
                                                     "capacity": {f"c{i}": {"value": "1"} for i in range(13)}})), "at most 32"),
    ("an attribute with two types", json.dumps(doc({"name": "a", "attributes": {"x": {"int": 1, "bool": True}}})), "one of"),
    ("a string attribute over 64 characters", json.dumps(doc({"name": "a", "attributes": {"x": {"string": "y" * 65}}})),
     "at most 64"),
    ("an int attribute outside int64", json.dumps(doc({"name": "a", "attributes": {"x": {"int": 2**63}}})), "int64"),
    ("a bool given as an int", json.dumps(doc({"name": "a", "attributes": {"x": {"int": True}}})), "JSON integer"),
    ("a version that is not semver", json.dumps(doc({"name": "a", "attributes": {"x": {"version": "1.2"}}})),
     "not a semantic version"),
    ("an attribute name that is not a C identifier", json.dumps(doc({"name": "a", "attributes": {"a-b": {"int": 1}}})),
     "C identifier"),
    ("one name as attribute and capacity", json.dumps(doc({"name": "a", "attributes": {"m": {"int": 1}},
                                                           "capacity": {f"{G}/m": {"value": "1"}}})), "declared twice"),
    ("a fractional capacity", json.dumps(doc({"name": "a", "capacity": {"m": {"value": "500m"}}})), "whole number"),
    ("a capacity given as a JSON number", json.dumps(doc({"name": "a", "capacity": {"m": {"value": 1}}})),
     "quantity string"),
    ("validValues not ascending", json.dumps(doc({"name": "a", "allowMultipleAllocations": True, "capacity": {"m": {"value": "9", "requestPolicy": {
        "default": "1", "validValues": ["4", "1"]}}}})), "ascending"),
    ("eleven validValues", json.dumps(doc({"name": "a", "allowMultipleAllocations": True, "capacity": {"m": {"value": "99", "requestPolicy": {
        "default": "1", "validValues": [str(i) for i in range(1, 12)]}}}})), "1 to 10"),
    ("a default that is no valid value", json.dumps(doc({"name": "a", "allowMultipleAllocations": True, "capacity": {"m": {"value": "9", "requestPolicy": {
        "default": "2", "validValues": ["1", "4"]}}}})), "not a valid amount"),
    ("validValues and validRange at once", json.dumps(doc({"name": "a", "allowMultipleAllocations": True, "capacity": {"m": {"value": "9", "requestPolicy": {
        "default": "1", "validValues": ["1"], "validRange": {"min": "1"}}}}})), "give one"),
    ("a request policy on an exclusive device", json.dumps(doc({"name": "a", "capacity": {"m": {"value": "9",
        "requestPolicy": {"default": "1", "validValues": ["1"]}}}})), "needs allowMultipleAllocations"),
    ("validValues above the value", json.dumps(doc({"name": "a", "allowMultipleAllocations": True, "capacity": {"m": {
        "value": "9", "requestPolicy": {"default": "1", "validValues": ["1", "10"]}}}})), "exceed the capacity value"),
    ("a range whose min + step exceeds the value", json.dumps(doc({"name": "a", "allowMultipleAllocations": True,
        "capacity": {"m": {"value": "9", "requestPolicy": {"default": "4", "validRange": {"min": "4", "step": "6"}}}}})),
     "exceeds the capacity value"),
    ("nine counter sets", json.dumps(doc(sharedCounters=[{"name": f"s{i}", "counters": {}} for i in range(9)])), "at most 8"),
    ("33 counters in a set", json.dumps(doc(sharedCounters=[{"name": "s", "counters": {f"c{i}": "1" for i in range(33)}}])),
     "at most 32"),
    ("an undeclared counter set", json.dumps(doc({"name": "a", "consumesCounters": [{"counterSet": "nope", "counters": {}}]})),
     "not declared"),
    ("an undeclared counter", json.dumps(doc({"name": "a", "consumesCounters": [{"counterSet": "s", "counters": {"x": "1"}}]},
                                             sharedCounters=[{"name": "s", "counters": {"y": "1"}}])), "counter 'x' is not declared"),
    ("three counter uses", json.dumps(doc({"name": "a", "consumesCounters": [{"counterSet": "s", "counters": {}}] * 3},
                                          sharedCounters=[{"name": "s", "counters": {}}])), "at most 2"),
    ("JSON nested 60,000 deep", "[" * 60_000, "not JSON"),
    ("not a string at all", {"driver": G}, "must be a string"),
]


@pytest.mark.parametrize("text,message", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_a_malformed_inventory_is_refused_with_a_bounded_reason(text: object, message: str) -> None:
    with pytest.raises(inventory_codec.InvalidInventory, match=message.replace("(", r"\(")) as caught:
        inventory_codec.parse_annotation(text)
    assert len(str(caught.value)) < 300


@given(st.one_of(st.text(alphabet="0123456789.+-eEkKMGTPinmu", max_size=12), st.from_regex(
    r"[+-]?[0-9]{0,25}(\.[0-9]{0,25})?([eE][+-]?[0-9]{1,3}|[KMGTPE]i|[numkMGTPE])?", fullmatch=True)))
def test_selector_quantities_agree_with_the_api_layers_kubernetes_parser(text: str) -> None:
    try:
        expected: int | None = api_quantity.parse_count(text)
    except api_quantity.InvalidQuantity:
        expected = None
    try:
        got: int | None = quantities.parse_count(text)
    except quantities.InvalidCount:
        got = None
    assert got == expected
