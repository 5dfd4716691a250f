"""`Run.status.devices` written by Bind and read back as holders, entry by entry (SPEC §7.6)."""

from __future__ import annotations

import pytest

from kruntimes.devices import allocation, results, usage

G = "gpu.example.com"
OUTCOME = allocation.Allocation((allocation.Result("gpu", "gpu-0", None),
                                 allocation.Result("nic/fast", "nic-1", ((f"{G}/bw", 10**9),))), steps=3, preference=0)


def test_bind_writes_the_digest_and_the_results_in_order() -> None:
    assert results.encode("abc", OUTCOME) == {"inventoryDigest": "abc", "results": [
        {"request": "gpu", "device": "gpu-0"},
        {"request": "nic/fast", "device": "nic-1", "consumedCapacity": {f"{G}/bw": "1000000000"}}]}


def test_what_bind_writes_reads_back_as_the_same_holders() -> None:
    assert results.holders(results.encode("abc", OUTCOME)) == [
        usage.Holder("gpu-0"), usage.Holder("nic-1", ((f"{G}/bw", 10**9),))]


ENTRIES: list[tuple[str, object, list[usage.Holder]]] = [
    ("no status.devices holds nothing", None, []),
    ("status.devices that is not an object holds nothing", "gpu-0", []),
    ("results that are not a list hold nothing", {"results": {"device": "gpu-0"}}, []),
    ("an entry naming no device holds nothing", {"results": [{"request": "gpu"}, 7]}, []),
    ("a malformed consumedCapacity holds the whole named device",
     {"results": [{"request": "r", "device": "d", "consumedCapacity": {f"{G}/bw": "1.5"}}]}, [usage.Holder("d")]),
    ("a consumedCapacity name without a domain holds the whole device",
     {"results": [{"request": "r", "device": "d", "consumedCapacity": {"bw": "1"}}]}, [usage.Holder("d")]),
    ("an entry without a request holds the whole device", {"results": [{"device": "d", "consumedCapacity": {}}]},
     [usage.Holder("d")]),
    ("an unknown field makes the entry malformed",
     {"results": [{"request": "r", "device": "d", "consumedCapacity": {}, "extra": 1}]}, [usage.Holder("d")]),
    ("entries are judged one by one", {"results": [{"device": 3}, {"request": "r", "device": "a"},
                                                   {"request": "r", "device": "b", "consumedCapacity": {f"{G}/m": "2"}}]},
     [usage.Holder("a"), usage.Holder("b", ((f"{G}/m", 2),))]),
]


@pytest.mark.parametrize("status,expected", [e[1:] for e in ENTRIES], ids=[e[0] for e in ENTRIES])
def test_an_old_active_runs_devices_are_judged_entry_by_entry(status: object, expected: list) -> None:
    assert results.holders(status) == expected


@pytest.mark.parametrize("raws,scores", [
    ([], []), ([0, 0, 0], [0, 0, 0]), ([0, -1, -2], [100, 50, 0]), ([-1, -4, -2], [100, 0, 66]),
], ids=["no pods", "all equal", "first alternative everywhere wins", "integer division"])
def test_device_preference_is_normalised_across_the_feasible_pods(raws: list[int], scores: list[int]) -> None:
    assert allocation.preference_scores(raws) == scores
