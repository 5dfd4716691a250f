"""runtimed's device check before it claims a Run, and the process's device variables (SPEC §7.7)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kruntimes.devices import admission, claims, inventory_codec, usage

G = "gpu.example.com"
INV = inventory_codec.parse_document({"driver": G, "sharedCounters": [{"name": "board", "counters": {"slots": "2"}}],
                                      "devices": [
    {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-a"}, "numa": {"int": 0}},
     "consumesCounters": [{"counterSet": "board", "counters": {"slots": "1"}}]},
    {"name": "gpu-1", "attributes": {"uuid": {"string": "GPU-b"}, "numa": {"int": 1}},
     "consumesCounters": [{"counterSet": "board", "counters": {"slots": "1"}}]},
    {"name": "gpu-2", "attributes": {"uuid": {"string": "GPU-c"}},
     "consumesCounters": [{"counterSet": "board", "counters": {"slots": "1"}}]},
    {"name": "nic-0", "allowMultipleAllocations": True, "attributes": {"numa": {"int": 0}},
     "capacity": {"bw": {"value": "10"}}},
]})
CLAIM = claims.parse_claim({"requests": [
    {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 2}},
    {"name": "nic", "firstAvailable": [{"name": "fast", "deviceClassName": "nic"}, {"name": "any", "deviceClassName": "nic"}]},
]})


def status(*entries: tuple) -> dict:
    out = []
    for request, device, *bw in entries:
        entry: dict = {"request": request, "device": device}
        if bw:
            entry["consumedCapacity"] = {f"{G}/bw": bw[0]}
        out.append(entry)
    return {"inventoryDigest": INV.digest, "results": out}


GOOD = status(("gpu", "gpu-0"), ("gpu", "gpu-1"), ("nic/fast", "nic-0", "4"))

CASES: list[tuple[str, object, list, object, str]] = [
    ("free devices are admitted", INV, [], GOOD, admission.ADMIT),
    ("an exclusive device an admitted Run holds keeps the Run waiting", INV, [usage.Holder("gpu-1")], GOOD, admission.BUSY),
    ("shared capacity within its value is admitted", INV, [usage.Holder("nic-0", ((f"{G}/bw", 6),))], GOOD, admission.ADMIT),
    ("shared capacity beyond its value keeps the Run waiting", INV, [usage.Holder("nic-0", ((f"{G}/bw", 7),))], GOOD,
     admission.BUSY),
    ("a spent counter keeps the Run waiting", INV, [usage.Holder("gpu-2")], GOOD, admission.BUSY),
    ("a malformed inventory admits nothing new", None, [], GOOD, admission.BUSY),
    ("no results fail the Run", INV, [], None, admission.DEVICE_ALLOCATION_MISSING),
    ("too few devices for a count fail the Run", INV, [], status(("gpu", "gpu-0"), ("nic/fast", "nic-0", "1")),
     admission.DEVICE_ALLOCATION_MISSING),
    ("two alternatives of one request fail the Run", INV, [],
     status(("gpu", "gpu-0"), ("gpu", "gpu-1"), ("nic/fast", "nic-0", "1"), ("nic/any", "nic-0", "1")),
     admission.DEVICE_ALLOCATION_MISSING),
    ("a result for no request fails the Run", INV, [], status(*[("gpu", "gpu-0"), ("gpu", "gpu-1"),
                                                               ("nic/fast", "nic-0", "1"), ("tpu", "gpu-2")]),
     admission.DEVICE_ALLOCATION_MISSING),
    ("a device gone from the inventory fails the Run", INV, [],
     status(("gpu", "gpu-0"), ("gpu", "gpu-9"), ("nic/fast", "nic-0", "1")), admission.ALLOCATED_DEVICE_MISSING),
]


@pytest.mark.parametrize("inv,admitted,devices,verdict", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_runtimed_admits_by_device_name_against_the_current_inventory(inv, admitted, devices, verdict) -> None:  # type: ignore[no-untyped-def]
    malformed = inv is None and devices is GOOD
    assert admission.admit(inv, malformed, admitted, CLAIM, devices) == verdict


def test_the_process_learns_its_devices_and_the_env_mapping() -> None:
    env = admission.process_env(INV, GOOD, ((("CUDA_VISIBLE_DEVICES", f"{G}/uuid"), ("NUMA", f"{G}/numa"))))
    assert json.loads(env["KRUNTIMES_DEVICES"]) == {"gpu": ["gpu-0", "gpu-1"], "nic": ["nic-0"]}
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-a,GPU-b" and env["NUMA"] == "0,1,0"


def test_runtimed_admission_loads_no_cel_engine() -> None:
    code = "import sys, kruntimes.devices.admission; print('\\n'.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert not [m for m in loaded if m.startswith(("cel_expr_python", "kruntimes.devices.cel_engine", "kubernetes"))]
