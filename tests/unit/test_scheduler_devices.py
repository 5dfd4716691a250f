"""The scheduler allocates devices (SPEC §7.5, §7.6): Filter, Score, Reserve, Bind, wake-ups, metrics.

Through the loop over the in-memory API: a Run with a claim is placed on a pod whose
inventory can serve it, and its `status.devices` is written in the assignment's own
write; the devices it holds then count on that pod for the next Run. A Run without
devices decides exactly as without the device plugins.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from kruntimes.devices import allocation, inventory_codec
from kruntimes.scheduler import device_state
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from tests.builders import NOW, Harness, cache_of, plan, pod, random_scenario, run, verdicts

DRIVER = "gpu.example.com"
INVENTORY = {"driver": DRIVER, "devices": [
    {"name": "gpu-0", "attributes": {"model": {"string": "a100"}, "numa": {"int": 0}}},
    {"name": "gpu-1", "attributes": {"model": {"string": "t4"}, "numa": {"int": 1}}}]}
A100 = {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a100"'}}


def inv(doc: Any = INVENTORY) -> str:
    return inventory_codec.canonical_text(doc)


def claim(count: int = 1, cls: str = "gpu", selectors: list[Any] | None = None) -> str:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if selectors:
        exactly["selectors"] = selectors
    return inventory_codec.canonical_text({"requests": [{"name": "gpu", "exactly": exactly}]})


def gpu_pod(name: str, devices: str | None = None, **kw: Any) -> Any:
    return replace(pod(name, **kw), devices=inv() if devices is None else devices)


def harness(*pods: Any, classes: dict[str, Any] | None = None) -> Harness:
    h = Harness()
    for name, spec in (classes if classes is not None else {"gpu": {"selectors": []}}).items():
        h.scheduler.on_device_class(name, 1, spec)
    h.add_pods(*pods)
    return h


def written_devices(h: Harness, name: str) -> Any:
    return h.api._status[("ns", name)].get("devices")


def test_a_run_with_a_claim_gets_a_device_written_with_its_assignment() -> None:
    h = harness(gpu_pod("a"))
    h.create(replace(run("r"), devices=claim(selectors=[A100])))
    h.drain()
    assert (h.phase("r"), h.placement("r")) == ("Scheduled", "a")
    digest = inventory_codec.parse_annotation(inv()).digest
    assert written_devices(h, "r") == {"inventoryDigest": digest, "results": [{"request": "gpu", "device": "gpu-0"}]}


def test_the_devices_a_run_holds_count_for_the_next_run_on_that_pod() -> None:
    one = inv({"driver": DRIVER, "devices": [{"name": "gpu-0"}]})
    h = harness(gpu_pod("a", one), gpu_pod("b", one))
    h.create(replace(run("r1"), devices=claim()), replace(run("r2"), devices=claim()),
             replace(run("r3"), devices=claim()))
    h.drain()
    placed = {n: h.placement(n) for n in ("r1", "r2", "r3")}
    assert sorted(p for p in placed.values() if p) == ["a", "b"] and h.phase("r3") == "Pending"
    assert "2 insufficient devices" in (h.api.get(("ns", "r3")).pending_message or "")  # type: ignore[union-attr]


REASONS = [
    ("a pod with an empty inventory annotation", gpu_pod("a", devices=""), claim(), allocation.INVALID_INVENTORY),
    ("a pod with a malformed inventory", gpu_pod("a", devices="{"), claim(), allocation.INVALID_INVENTORY),
    ("a pod with no inventory annotation", pod("a"), claim(), allocation.NO_INVENTORY),
    ("a class nobody created", gpu_pod("a"), claim(cls="fpga"), allocation.CLASS_NOT_FOUND),
    ("a class whose selectors break the rules", gpu_pod("a"), claim(cls="bad"), allocation.CLASS_INVALID),
    ("no device the selectors accept", gpu_pod("a"),
     claim(selectors=[{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "h100"'}}]),
     allocation.NO_MATCHING_DEVICE),
    ("more devices than the pod has", gpu_pod("a"), claim(count=3), allocation.INSUFFICIENT),
    ("a selector that errs on the devices", gpu_pod("a"),
     claim(selectors=[{"cel": {"expression": 'device.attributes["gpu.example.com"].missing == 1'}}]),
     allocation.SELECTOR_ERROR),
]


@pytest.mark.parametrize("_, the_pod, the_claim, reason", REASONS, ids=[r[0] for r in REASONS])
def test_each_device_reason_keeps_the_run_pending_with_it(_: str, the_pod: Any, the_claim: str, reason: str) -> None:
    cache = cache_of([the_pod])
    cache.device_classes.upsert("gpu", 1, {"selectors": []})
    cache.device_classes.upsert("bad", 1, {"selectors": [{"cel": {"expression": "device.attributes.all(x, true)"}}]})
    outcome = plan(cache, replace(run("r"), devices=the_claim))
    assert verdicts(outcome) == {"a": reason}


def test_a_selector_that_does_not_compile_fails_the_run() -> None:
    h = harness(gpu_pod("a"))
    h.create(replace(run("r"), devices=claim(selectors=[{"cel": {"expression": "device.driver == "}}])))
    h.drain()
    assert h.phase("r") == "Failed"


def test_a_new_class_wakes_the_runs_waiting_for_it_and_they_are_placed() -> None:
    h = harness(gpu_pod("a"), classes={})
    h.create(replace(run("r"), devices=claim()), run("plain"))
    h.drain()
    assert (h.phase("r"), h.phase("plain")) == ("Pending", "Scheduled")
    h.scheduler.on_device_class("gpu", 1, {"selectors": []})
    assert h.sample("kruntimes_scheduler_pending_run_wakeups_total", source="device_class") == 1
    h.drain()
    assert h.placement("r") == "a"


def test_reserve_refuses_results_whose_device_another_run_took_meanwhile() -> None:
    one = inv({"driver": DRIVER, "devices": [{"name": "gpu-0"}]})
    cache = cache_of([gpu_pod("a", one)])
    digest = inventory_codec.parse_annotation(one).digest
    results = inventory_codec.canonical_text({"inventoryDigest": digest, "results": [{"request": "gpu", "device": "gpu-0"}]})
    first, second = replace(run("r1"), devices=claim()), replace(run("r2"), devices=claim())
    cache.upsert_run(first)
    cache.upsert_run(second)
    assert cache.reserve_waking(first, "a", None, device_results=results) is not None
    assert cache.reserve_waking(second, "a", None, device_results=results) is None
    assert cache.reserve_waking(second, "a", None) is None  # a claim without results is never assumed


def test_device_metrics_count_searches_and_steps() -> None:
    h = harness(gpu_pod("a"))
    h.create(replace(run("r"), devices=claim()))
    h.drain()
    assert h.sample("kruntimes_scheduler_device_searches_total", result="allocated") == 1
    assert h.sample("kruntimes_scheduler_device_search_steps_count") == 1


@pytest.mark.parametrize("seed", range(6))
def test_runs_without_devices_decide_exactly_as_without_the_device_plugins(seed: int) -> None:
    pods, runs = random_scenario(seed)
    without = SchedulerConfig(filters=("RuntimePodAvailability", "RunAffinity"),
                              scores=(("PreferredRunAffinity", 1), ("LeastLoaded", 1)))
    cache = cache_of(pods, [r for r in runs if r.phase != "Pending"])
    for r in runs:
        if r.phase == "Pending":
            with cache.lock:
                snapshot = cache.snapshot(r, NOW)
                new, old = Planner(SchedulerConfig()).plan(snapshot), Planner(without).plan(
                    replace(snapshot, config=without))
            assert (new.status, new.chosen, new.rejections, new.totals, new.message) == \
                (old.status, old.chosen, old.rejections, old.totals, old.message)
            assert new.scores[:2] == old.scores


def test_holders_are_the_active_and_assumed_results_on_each_pod_by_uid() -> None:
    results = inventory_codec.canonical_text({"inventoryDigest": "d", "results": [{"request": "gpu", "device": "gpu-1"}]})
    holder = replace(run("h", phase="Running", on="a", pod_uid="uid-ns-a"), devices=claim(), device_results=results)
    cache = cache_of([gpu_pod("a")], [holder])
    with cache.lock:
        targets = cache.snapshot(run("x"), NOW).targets
    assert {k: [h.device for h in v] for k, v in device_state.holders_by_pod(targets, "uid-x").items()} == \
        {"uid-ns-a": ["gpu-1"]}
    assert device_state.holders_by_pod(targets, holder.uid) == {}


def test_an_inventory_change_wakes_the_runs_parked_on_that_runtime() -> None:
    one = inv({"driver": DRIVER, "devices": [{"name": "gpu-0"}]})
    h = harness(gpu_pod("a", one))
    h.create(replace(run("r"), devices=claim(count=2)))
    h.drain()
    assert h.phase("r") == "Pending"
    before = h.sample("kruntimes_scheduler_pending_run_wakeups_total", source="runtime_pod")
    h.add_pods(gpu_pod("a"))  # the same pod, now with two devices
    assert h.sample("kruntimes_scheduler_pending_run_wakeups_total", source="runtime_pod") == before + 1
    h.drain()
    assert h.placement("r") == "a"


def test_a_run_ending_frees_its_device_for_the_run_waiting_for_it() -> None:
    one = inv({"driver": DRIVER, "devices": [{"name": "gpu-0"}]})
    h = harness(gpu_pod("a", one))
    h.create(replace(run("r1"), devices=claim()), replace(run("r2"), devices=claim()))
    h.drain()
    assert (h.phase("r1"), h.phase("r2")) == ("Scheduled", "Pending")
    h.api.finish(("ns", "r1"), "Succeeded", NOW)
    assert h.sample("kruntimes_scheduler_pending_run_wakeups_total", source="capacity_released") >= 1
    h.drain()
    assert h.placement("r2") == "a"


def test_a_claim_that_breaks_the_rules_fails_the_run_even_if_it_got_past_the_api() -> None:
    bad = inventory_codec.canonical_text({"requests": []})
    outcome = plan(cache_of([gpu_pod("a")]), replace(run("r"), devices=bad))
    assert outcome.status == "invalid" and "spec.devices.requests" in (outcome.message or "")


def test_a_status_devices_too_deep_to_encode_reads_as_holding_nothing() -> None:
    from kruntimes.api import ingest
    deep: dict[str, Any] = {}
    cur = deep
    for _ in range(5000):
        cur["x"] = {}
        cur = cur["x"]
    info = ingest.run_info({"metadata": {"name": "r", "uid": "u"}, "spec": {"runtime": "rt"},
                            "status": {"phase": "Running", "devices": deep}})
    assert (info.phase, info.device_results) == ("Running", None)
