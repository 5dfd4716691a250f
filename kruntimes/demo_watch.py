"""What `kruntimes demo` watches while it runs: Runs by phase over time, peak use, over-commit.

A sampler thread reads the stores (as `kubectl get runs` would, never the
scheduler's cache) every `period` seconds and keeps:
- `timeline`: (seconds since start, Runs by phase), for the summary's table and sparklines;
- `peak`: per `namespace/runtime` and resource, the most that Running Runs held at
  once against the capacity of its Ready pods;
- `overcommitted`: how many times a pod was seen with Running Runs requesting more
  than its capacity. runtimed's admission guard must keep this at 0.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

from kruntimes.api import models
from kruntimes.memory.api import MemoryApi
from kruntimes.memory.pods import MemoryPods
from kruntimes.runtimed.reading import pod_capacity

PHASES = ("Pending", "Scheduled", "Running", "Succeeded", "Failed")
BARS = " ▁▂▃▄▅▆▇█"


class Watch:
    def __init__(self, runs: MemoryApi, pods: MemoryPods, default_runs_capacity: int, period: float = 0.25) -> None:
        self._runs, self._pods, self._default, self._period = runs, pods, default_runs_capacity, period
        self.timeline: list[tuple[float, Counter[str]]] = []
        self.peak: dict[str, dict[str, tuple[int, int]]] = {}
        self.overcommitted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kruntimes-demo-watch", daemon=True)
        self._started = 0.0

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(5)
            self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self.sample()

    def sample(self) -> None:
        runs = self._runs.runs()
        self.timeline.append((time.monotonic() - self._started, Counter(r.phase for r in runs)))
        used: dict[str, Counter[str]] = defaultdict(Counter)  # pod UID -> requests of its Running Runs
        for run in runs:
            if run.phase == "Running" and run.pod_uid:
                used[run.pod_uid].update(dict(run.requests))
        totals: dict[str, Counter[str]] = defaultdict(Counter)
        capacities: dict[str, Counter[str]] = defaultdict(Counter)
        for pod in self._pods.list():
            meta = pod["metadata"]
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (pod.get("status") or {}).get("conditions") or [])
            capacity = dict(pod_capacity(pod, self._default).amounts)
            held = used.get(meta["uid"], Counter())
            if any(amount > capacity.get(resource, 0) for resource, amount in held.items()):
                self.overcommitted += 1
            if ready:
                runtime = f"{meta['namespace']}/{meta['labels'].get(models.RUNTIME_LABEL)}"
                totals[runtime].update(held)
                capacities[runtime].update(capacity)
        for runtime, capacity in capacities.items():
            per = self.peak.setdefault(runtime, {})
            for resource, total in capacity.items():
                most = max(per.get(resource, (0, 0))[0], totals[runtime][resource])
                per[resource] = (most, total)


def rows(timeline: list[tuple[float, Counter[str]]], count: int = 10) -> list[tuple[float, Counter[str]]]:
    """About `count` samples, evenly spread over the run, always with the first and the last."""
    if len(timeline) <= count:
        return list(timeline)
    step = (len(timeline) - 1) / (count - 1)
    return [timeline[round(i * step)] for i in range(count)]


def sparkline(values: list[int], width: int = 40) -> str:
    """One character per sample bucket, its height the bucket's largest value against the overall largest."""
    if not values:
        return ""
    buckets = [values[i * len(values) // width:(i + 1) * len(values) // width] or [values[-1]]
               for i in range(min(width, len(values)))]
    top = max(values) or 1
    return "".join(BARS[round(max(b) * (len(BARS) - 1) / top)] for b in buckets)
