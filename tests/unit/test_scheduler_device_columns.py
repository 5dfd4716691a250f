"""A Run with a device claim planned on the pod tables decides as when planned pod by pod (SPEC §7.5, §7.6).

The DeviceAllocation column is handed only the positions earlier Filters accepted,
keeps each pod's usage id between cycles and each usage's full-limit outcome while
the prepared claim, engine and memo stay; the pod-by-pod path searches pod by pod in
name order. Both must give the same outcomes, devices, step charges (the keys charged,
in order), memo hits and DeviceWork, cycle after cycle, through reservations,
completions, pods replaced or turned unready, class changes, budgets running out and
a memo that forgets.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from kruntimes.devices import allocation, inventory_codec
from kruntimes.scheduler import device_cycle, device_outcome
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.metrics import SchedulerMetrics
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.projection import PodInfo, RunInfo
from tests.builders import NOW
from tests.unit.test_scheduler_device_state import A, CLAIMS, DRIVER, inventory

EXHAUSTING = {"requests": [{"name": n, "exactly": {"deviceClassName": "gpu", "count": 3}} for n in "abc"],
              "constraints": [{"matchAttribute": f"{DRIVER}/numa"}]}
ALL_CLAIMS = CLAIMS + [EXHAUSTING, EXHAUSTING, EXHAUSTING, None]


def decide(planner: Planner, metrics: SchedulerMetrics, cache: ClusterCache, run: RunInfo) -> tuple[Any, ...]:
    plugin = next(f for f in planner.filters if f.name == "DeviceAllocation")
    with cache.lock:
        outcome = device_outcome.attach(planner, run, planner.plan(cache.snapshot(run, NOW)))
        devices = device_cycle.allocated(planner, metrics, run, outcome)
    cycle = plugin.last  # type: ignore[attr-defined]
    charged = None if cycle is None else (cycle.budget.seen, cycle.budget.remaining,
                                          plugin.memo.hits - cycle.memo_hits)  # type: ignore[attr-defined]
    return outcome, devices, charged


@pytest.mark.parametrize("seed", range(10))
def test_claims_on_the_pod_tables_decide_as_pod_by_pod(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(f"device-columns-{seed}")
    if seed % 3 == 2:
        monkeypatch.setattr(allocation.SearchMemo, "LIMIT", 3)  # the memo forgets mid-cycle, often
    config = SchedulerConfig()
    cache = ClusterCache(config)
    cache.device_classes.upsert("gpu", 1, {"selectors": [{"cel": {"expression": f"has({A}.model)"}}]})
    tables, by_pod = Planner(config), Planner(config, columns=False)
    assert tables.columnar
    metrics = SchedulerMetrics()
    texts = [inventory(16), inventory(16), inventory(8), inventory(6, numa=3, multi=True), inventory(4), "{", None]
    names = [f"pod-{i:02d}" for i in range(rng.randint(4, 24))]
    generation: dict[str, int] = {}

    def add_pod(name: str) -> None:
        generation[name] = generation.get(name, 0) + 1
        stale = rng.random() < 0.15  # RuntimePodAvailability rejects it: the column must not charge for it
        cache.upsert_pod(PodInfo("ns", name, f"uid-{name}-{generation[name]}", "rt", ready=rng.random() > 0.1,
                                 heartbeat=NOW - timedelta(hours=1) if stale else NOW,
                                 capacity=(("runs", 1000),), devices=rng.choice(texts)))

    for name in names:
        add_pod(name)
    placed: list[RunInfo] = []
    for i in range(150):
        roll = rng.random()
        if roll < 0.08:
            add_pod(rng.choice(names))
        elif roll < 0.16 and placed:
            cache.delete_run("ns", placed.pop(rng.randrange(len(placed))).name)
        elif roll < 0.2:
            selectors = rng.choice([f"has({A}.model)", f'{A}.model == "a100"', f"{A}.numa == 0"])
            cache.device_classes.upsert("gpu", i, {"selectors": [{"cel": {"expression": selectors}}]})
        elif roll < 0.24 and placed:
            done = placed.pop(rng.randrange(len(placed)))
            a = cache.assumed.get(("ns", done.uid))
            if a is not None:
                cache.upsert_run(replace(done, phase="Running", pod_name=a.pod_name,
                                         pod_uid=a.pod_uid if rng.random() < 0.7 else None,
                                         device_results=a.device_results))
        claim = rng.choice(ALL_CLAIMS)
        for retry in range(rng.choice([1, 1, 2])):  # the same Run again: kept answers must hold
            run = RunInfo("ns", f"r-{i}", f"uid-r-{i}", "rt", requests=(("runs", 1),),
                          devices=None if claim is None else inventory_codec.canonical_text(claim))
            cache.upsert_run(run)
            got, want = decide(tables, metrics, cache, run), decide(by_pod, metrics, cache, run)
            assert got == want, (i, retry)
        outcome, devices, _ = got
        if outcome.status == "scheduled" and cache.reserve_waking(run, outcome.chosen, outcome.chosen_uid, **(
                {"device_results": devices} if devices is not None else {})) is not None:
            placed.append(run)
