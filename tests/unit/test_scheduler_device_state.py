"""A pod's device holders come from the targets' index and are kept per pod (SPEC §7.6), deciding as the walk did.

The Filter used to walk every target each cycle (`device_state.holders_by_pod`) and to
derive each pod's usage afresh. Now the targets index the device-holding ones by the pod
their assignment names, a log says which pods changed, and `device_state.pod_devices`
keeps each pod's inventory, holders and usage key until then. These tests hold the new
path to the walk: the same holders for every pod after any sequence of target and pod
changes, and, through whole planner cycles with reservations, the same outcomes,
devices, steps and reasons as the Filter that walked.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, Sequence

import pytest

from kruntimes.devices import allocation, cel_engine, inventory_codec
from kruntimes.scheduler import device_cycle, device_state
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.metrics import SchedulerMetrics
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.plugins.device_allocation import DeviceAllocation, DeviceCycle
from kruntimes.scheduler.projection import PodInfo, RunInfo
from kruntimes.scheduler.registry import REGISTRY
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.targets import NamespaceTargets, Target
from kruntimes.scheduler.views import PodView
from tests.builders import NOW

DRIVER = "gpu.example.com"
A = f'device.attributes["{DRIVER}"]'


def results(*devices: str, consumed: bool = False) -> str:
    entries: list[dict[str, Any]] = [{"request": "gpu", "device": d} for d in devices]
    if consumed:
        entries = [dict(e, consumedCapacity={f"{DRIVER}/memory": "1Gi"}) for e in entries]
    return inventory_codec.canonical_text({"inventoryDigest": "d", "results": entries})


def inventory(n: int, numa: int = 2, multi: bool = False) -> str:
    devices = []
    for i in range(n):
        device: dict[str, Any] = {"name": f"gpu-{i}", "attributes": {"model": {"string": "a100" if i % 3 else "t4"},
                                                                      "numa": {"int": i * numa // n}},
                                  "capacity": {"memory": {"value": "8Gi"}}}
        if multi and i == 0:
            device["allowMultipleAllocations"] = True
        devices.append(device)
    return inventory_codec.canonical_text({"driver": DRIVER, "devices": devices})


class WalkingDeviceAllocation(DeviceAllocation):
    """The Filter as it was: every target walked in PreFilter, every pod's usage derived afresh."""

    def pre_filter(self, snapshot: Snapshot, run: RunInfo) -> DeviceCycle | None:
        cycle = super().pre_filter(snapshot, run)
        if cycle is not None:
            cycle.walked = device_state.holders_by_pod(snapshot.targets, run.uid)  # type: ignore[attr-defined]
        return cycle

    def filter(self, state: CycleState, pods: Sequence[PodView]) -> list[str | None]:
        cycle: DeviceCycle | None = state.of(self.name)
        if cycle is None:
            return [None] * len(pods)
        verdicts: list[str | None] = []
        for view in pods:
            text = view.info.devices
            inv = None if text is None else device_state.inventory_of(text)
            if text is None or inv is None or isinstance(cycle.prepared, allocation.Rejection):
                verdicts.append(allocation.NO_INVENTORY if text is None else allocation.INVALID_INVENTORY
                                if inv is None else cycle.prepared.reason)  # type: ignore[union-attr]
                continue
            outcome = allocation.on_pod(cycle.prepared, inv, cycle.walked.get(view.info.uid, []),  # type: ignore[attr-defined]
                                        cel_engine.shared(), cycle.budget, self.memo)
            if isinstance(outcome, allocation.Rejection):
                verdicts.append(outcome.reason)
            else:
                cycle.found[view.info.name] = (inv.digest, outcome)
                verdicts.append(None)
        return verdicts


def random_target(rng: random.Random, uid: str, names: list[str]) -> Target:
    name = rng.choice(names)
    pod_uid = rng.choice([None, f"uid-{name}", f"uid-{name}-2", f"uid-{rng.choice(names)}"])
    held = rng.sample([f"gpu-{i}" for i in range(6)], rng.randint(0, 2))
    text = rng.choice([results(*held), results(*held, consumed=True), "{}", None])
    return Target(uid=uid, name=uid, labels={}, pod_name=name, pod_uid=pod_uid, required_anti=(), workspace=None,
                  assumed=rng.random() < 0.5, device_results=text)


@pytest.mark.parametrize("seed", range(12))
def test_every_pods_holders_are_those_the_walk_over_every_target_finds(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"p{i}" for i in range(5)]
    targets = NamespaceTargets()
    texts = [inventory(4), inventory(6), inventory(6, multi=True), "{"]
    for step in range(300):
        roll = rng.random()
        if roll < 0.15:
            name = rng.choice(names)
            targets.pod_seen(name, rng.choice([f"uid-{name}", f"uid-{name}-2"]))
        elif roll < 0.2:
            targets.pod_gone(rng.choice(names))
        elif roll < 0.7:
            uid = f"run-{rng.randrange(12)}"
            targets.put(random_target(rng, uid, names))
        else:
            targets.remove(f"run-{rng.randrange(12)}")
        if step % 3:
            continue
        kept = device_state.kept_for(targets)  # one cycle
        exclude = rng.choice(["nobody", f"run-{rng.randrange(12)}"])
        use_kept = not device_state.careful(targets, exclude)
        for name in names:
            for uid in (f"uid-{name}", f"uid-{name}-2"):
                pod = PodInfo("ns", name, uid, "rt", devices=rng.choice(texts[:3] if step % 2 else texts))
                got = device_state.pod_devices(targets, kept, pod, exclude, use_kept)
                inv = device_state.inventory_of(pod.devices)  # type: ignore[arg-type]
                if inv is None:
                    assert got is None
                    continue
                walked = tuple(device_state.holders_by_pod(targets, exclude).get(uid, []))
                assert got is not None and got.holders == walked, (step, name, uid)
                assert got.inventory is inv
                assert device_state.holders_on(targets, name, uid, exclude) == list(walked)


CLAIMS = [
    {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu",
                                              "selectors": [{"cel": {"expression": f'{A}.model == "a100"'}}]}}]},
    {"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu"}},
                  {"name": "b", "exactly": {"deviceClassName": "gpu"}}],
     "constraints": [{"matchAttribute": f"{DRIVER}/numa"}]},
    {"requests": [{"name": "g", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu", "count": 3},
        {"name": "one", "deviceClassName": "gpu", "capacity": {"requests": {"memory": "2Gi"}}}]}]},
    {"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu", "count": 3}},
                  {"name": "b", "exactly": {"deviceClassName": "gpu", "count": 3}}],
     "constraints": [{"matchAttribute": f"{DRIVER}/numa"}]},
    {"requests": [{"name": "x", "exactly": {"deviceClassName": "missing"}}]},
]


def decide(planner: Planner, metrics: SchedulerMetrics, cache: ClusterCache, run: RunInfo) -> tuple[Any, ...]:
    with cache.lock:
        outcome = planner.plan(cache.snapshot(run, NOW))
        devices = device_cycle.allocated(planner, metrics, run, outcome)
    steps = next(f for f in planner.filters if f.name == "DeviceAllocation").last  # type: ignore[attr-defined]
    charged = None if steps is None else sorted((repr(k), v) for k, v in steps.budget.seen.items())
    return (outcome.status, outcome.chosen, outcome.rejections, outcome.totals, outcome.scores, outcome.message,
            devices, charged)


@pytest.mark.parametrize("seed", range(8))
def test_planner_cycles_decide_as_the_filter_that_walked_every_target(seed: int) -> None:
    rng = random.Random(f"device-state-{seed}")
    config = SchedulerConfig()
    cache = ClusterCache(config)
    cache.device_classes.upsert("gpu", 1, {"selectors": [{"cel": {"expression": f"has({A}.model)"}}]})
    new = Planner(config)
    walking = Planner(config, registry={**REGISTRY, "DeviceAllocation": WalkingDeviceAllocation})
    metrics = SchedulerMetrics()
    texts = [inventory(4), inventory(6), inventory(6, numa=3, multi=True), "{", None]
    names = [f"pod-{i}" for i in range(rng.randint(3, 12))]
    generation: dict[str, int] = {}

    def add_pod(name: str) -> None:
        generation[name] = generation.get(name, 0) + 1
        cache.upsert_pod(PodInfo("ns", name, f"uid-{name}-{generation[name]}", "rt", ready=True, heartbeat=NOW,
                                 capacity=(("runs", 1000),), devices=rng.choice(texts)))

    for name in names:
        add_pod(name)
    placed: list[RunInfo] = []
    for i in range(120):
        roll = rng.random()
        if roll < 0.08:
            add_pod(rng.choice(names))  # a new inventory, or the pod replaced under a new UID
        elif roll < 0.12 and placed:
            cache.delete_run("ns", placed.pop(rng.randrange(len(placed))).name)
        elif roll < 0.19:  # the class changes: a new view, so no Filter may keep what it prepared
            selectors = rng.choice([f"has({A}.model)", f'{A}.model == "a100"', f"{A}.numa == 0"])
            cache.device_classes.upsert("gpu", i, {"selectors": [{"cel": {"expression": selectors}}]})
        elif roll < 0.22 and placed:  # an assumption observed as Running, by UID or by name only
            done = placed.pop(rng.randrange(len(placed)))
            a = cache.assumed.get(("ns", done.uid))
            if a is not None:
                cache.upsert_run(replace(done, phase="Running", pod_name=a.pod_name,
                                         pod_uid=a.pod_uid if rng.random() < 0.7 else None,
                                         device_results=a.device_results))
        claim = rng.choice(CLAIMS + [None])
        run = RunInfo("ns", f"r-{i}", f"uid-r-{i}", "rt", requests=(("runs", 1),),
                      devices=None if claim is None else inventory_codec.canonical_text(claim))
        cache.upsert_run(run)
        got, want = decide(new, metrics, cache, run), decide(walking, metrics, cache, run)
        assert got == want, i
        if got[0] == "scheduled" and cache.reserve_waking(run, got[1], None, **(
                {"device_results": got[6]} if got[6] is not None else {})) is not None:
            placed.append(run)


def test_a_holder_that_changes_without_any_view_changing_is_seen_by_the_next_cycle() -> None:
    config = SchedulerConfig()
    cache = ClusterCache(config)
    cache.device_classes.upsert("gpu", 1, {"selectors": []})
    text = inventory(2)
    for name in ("a", "b"):
        cache.upsert_pod(PodInfo("ns", name, f"uid-{name}", "rt", ready=True, heartbeat=NOW,
                                 capacity=(("runs", 10),), devices=text))
    # One target, so that the snapshot carries the cache's own targets (which know the pods).
    cache.upsert_run(RunInfo("ns", "plain", "uid-plain", "rt", phase="Running", requests=(("runs", 1),),
                             pod_name="a", pod_uid="uid-a"))
    claim = inventory_codec.canonical_text({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu",
                                                                                     "count": 2}}]})
    first, second = (RunInfo("ns", n, f"uid-{n}", "rt", requests=(("runs", 1),), devices=claim) for n in ("r1", "r2"))
    new, walking = Planner(config), Planner(config, registry={**REGISTRY, "DeviceAllocation": WalkingDeviceAllocation})
    with cache.lock:
        snapshot = cache.snapshot(first, NOW)
    assert new.plan(snapshot).feasible == ("a", "b")
    snapshot.targets.put(Target(uid="holder", name="holder", labels={}, pod_name="b", pod_uid=None, required_anti=(),
                                workspace=None, assumed=False, device_results=results("gpu-1")))
    again = replace(snapshot, run=second)  # the very same views: only the targets' log says b changed
    got, want = new.plan(again), walking.plan(again)
    assert got.feasible == want.feasible == ("a",)
    assert got.rejections == want.rejections
    # A pod's view replaced by one with another inventory, the targets' log silent: the view decides.
    # An altered copy of the pods drops the group's change log (it speaks of the cache's own views).
    a, b = again.pods
    grown = replace(b, info=replace(b.info, devices=inventory(4)))
    third = replace(again, run=replace(second, name="r3", uid="uid-r3"), pods=(a, grown), changes=None)
    got, want = new.plan(third), walking.plan(third)
    assert got.feasible == want.feasible == ("a", "b")
    assert got.rejections == want.rejections


def test_a_reservation_gives_its_pod_the_devices_its_holders_now_give_and_only_its_own_change_is_read() -> None:
    cache = ClusterCache(SchedulerConfig())
    cache.device_classes.upsert("gpu", 1, {"selectors": []})
    text = inventory(4)
    digest = inventory_codec.parse_annotation(text).digest

    def held(device: str) -> str:
        return inventory_codec.canonical_text({"inventoryDigest": digest, "results": [{"request": "gpu", "device": device}]})

    for name in ("a", "b"):
        cache.upsert_pod(PodInfo("ns", name, f"uid-{name}", "rt", ready=True, heartbeat=NOW,
                                 capacity=(("runs", 10),), devices=text))
    claim = inventory_codec.canonical_text({"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]})
    cache.upsert_run(RunInfo("ns", "held", "uid-m", "rt", phase="Running", requests=(("runs", 1),), pod_name="a",
                             pod_uid="uid-a", devices=claim, device_results=held("gpu-2")))
    runs = [RunInfo("ns", f"r{i}", uid, "rt", requests=(("runs", 1),), devices=claim)
            for i, uid in enumerate(("uid-z", "uid-b"))]
    for run in runs:
        cache.upsert_run(run)
    with cache.lock:
        targets = cache.snapshot(runs[0], NOW).targets
        pod = cache.snapshot(runs[0], NOW).pods[0].info
    kept = device_state.kept_for(targets)
    device_state.pod_devices(targets, kept, pod, "nobody")  # kept for pod a, as a cycle leaves it
    assert cache.reserve_waking(runs[0], "a", None, device_results=held("gpu-0")) is not None
    assert kept.seen == device_state.log_end(targets)  # derived: the reservation's change read
    fresh = device_state.pod_devices(targets, device_state.KeptPods(), pod, "nobody", use_kept=False)
    assert kept.by_uid["uid-a"][2] == fresh and kept.by_uid["uid-a"][3] == ("uid-m", "uid-z")
    assert cache.reserve_waking(runs[1], "a", None, device_results=held("gpu-1")) is not None  # sorts first
    assert kept.seen == device_state.log_end(targets) and kept.by_uid["uid-a"][3] == ("uid-b", "uid-m", "uid-z")
    assert kept.by_uid["uid-a"][2] == device_state.pod_devices(targets, device_state.KeptPods(), pod, "nobody",
                                                               use_kept=False)
    # Another change since the reservation's mark: left to the log, which drops the pod's entry.
    end = device_state.log_end(targets)
    targets.put(Target(uid="other", name="other", labels={}, pod_name="a", pod_uid="uid-a", required_anti=(),
                       workspace=None, assumed=False, device_results=held("gpu-3")))
    targets.put(Target(uid="uid-b", name="r1", labels={}, pod_name="a", pod_uid="uid-a", required_anti=(),
                       workspace=None, assumed=True, device_results=held("gpu-1")))
    device_state.reserved(targets, pod, "uid-b", end)
    assert kept.seen == end
    assert device_state.pod_devices(targets, device_state.kept_for(targets), pod, "nobody") == \
        device_state.pod_devices(targets, device_state.KeptPods(), pod, "nobody", use_kept=False)
    assert kept.by_uid["uid-a"][3] == ("other", "uid-b", "uid-m", "uid-z")
