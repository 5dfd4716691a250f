"""The SPEC §7.9 device targets, measured as whole planner cycles, two checkouts side by side.

A cycle is `planner.py`'s (snapshot + plan under the cache lock, then reserve) plus
what the loop adds for a Run with a claim: the results the Filter found on the chosen
pod become `status.devices` (`device_cycle.allocated`), which Reserve re-checks and
assumes. Workload: one Runtime, `pods` Runtime Pods sharing one inventory of
`devices` GPUs (two NUMA nodes, one model, 40Gi each), 10,000 active Runs spread over
them, every 4th holding one device (so pods hold 0 to ~6 devices, most a usage of
their own). After each batch its Runs are deleted (untimed): their devices come back,
as when Runs complete, so the steady state holds for any number of cycles.

- steady: device-free, one-device, two-request matchAttribute cycles at 1,000 x 8,
  batches interleaved within one process (same load for the three); the ratio is the
  device cycle's median µs over the device-free one's;
- allocations/s: one-device cycles at 5,000 x 16 (every one places);
- cold: the first one-device cycle after a fresh engine, planner and device caches,
  at 1,000 x 8, with its CEL evaluations against the distinct (expression, device
  content) pairs the cycle could evaluate;
- worst: a claim whose search runs out (three requests of 3 on one NUMA node of 8
  devices: 10,000 steps per search) at 5,000 x 16 with a fresh search memo each cycle:
  the cycle budget (50,000 steps) spent in full on five usages, every other pod then
  answered `device search limit`; the largest of these and of the cold cycles is the
  "any cycle" figure.

Checkouts are compared by running this file's measuring code (`--child`) with each
checkout's `kruntimes` first on the path, in alternating processes, `--rounds` times;
each figure is the median over rounds of the per-round medians.

    python bench/planner.py --devices --before /tmp/main-checkout     # the §7.9 table, before/after
    python bench/planner.py --devices                                  # this checkout only
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE, RUNTIME, DRIVER = "bench", "rt", "gpu.example.com"
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
ACTIVE = 10_000
A = f'device.attributes["{DRIVER}"]'
CLASS = {"selectors": [{"cel": {"expression": f"has({A}.model)"}}]}
ONE_DEVICE = {"requests": [{"name": "gpu", "exactly": {
    "deviceClassName": "gpu", "selectors": [{"cel": {"expression": f'{A}.model == "a100"'}}]}}]}
MATCH_ATTRIBUTE = {"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu"}},
                                {"name": "b", "exactly": {"deviceClassName": "gpu"}}],
                   "constraints": [{"matchAttribute": f"{DRIVER}/numa"}]}
EXHAUSTING = {"requests": [{"name": n, "exactly": {"deviceClassName": "gpu", "count": 3}} for n in "abc"],
              "constraints": [{"matchAttribute": f"{DRIVER}/numa"}]}

# (label, unit, goal, met?) of each §7.9 target; figures are keyed by label.
TARGETS = (
    ("one-device / device-free, 1,000 x 8", "x", 1.5, lambda v: v <= 1.5),
    ("matchAttribute / device-free, 1,000 x 8", "x", 2.5, lambda v: v <= 2.5),
    ("allocations/s, 5,000 x 16", "/s", 250, lambda v: v >= 250),
    ("cold cycle, 1,000 x 8", "ms", 100, lambda v: v <= 100),
    ("CEL evals / distinct pairs, cold cycle", "x", 1.0, lambda v: v <= 1.0),
    ("any cycle (cold, search limit), ms", "ms", 250, lambda v: v <= 250),
)


# -- the child: measures one checkout ---------------------------------------------------------

def planner_class() -> Any:
    """The planner of the tree being measured: `scheduler.planner` now, `scheduler.framework` in a tree
    from before the framework was split (a before/after run measures both)."""
    try:
        from kruntimes.scheduler.planner import Planner
    except ImportError:
        from kruntimes.scheduler.framework import Planner  # type: ignore[no-redef]
    return Planner

class DeviceBench:
    """A cache and planner over one cell; cycles as the loop runs them, minus the binder."""

    def __init__(self, pods: int, devices: int, active: int = ACTIVE) -> None:
        from kruntimes.devices import inventory_codec
        from kruntimes.scheduler.cache import ClusterCache
        from kruntimes.scheduler.config import SchedulerConfig
        from kruntimes.scheduler.metrics import SchedulerMetrics
        from kruntimes.scheduler.projection import PodInfo, RunInfo

        self.RunInfo, self.canonical = RunInfo, inventory_codec.canonical_text
        self.config = SchedulerConfig()
        self.cache = ClusterCache(self.config)
        self.metrics = SchedulerMetrics()
        self.cache.device_classes.upsert("gpu", 1, CLASS)
        doc = {"driver": DRIVER, "devices": [
            {"name": f"gpu-{i}", "attributes": {"model": {"string": "a100"}, "numa": {"int": i * 2 // devices}},
             "capacity": {"memory": {"value": "40Gi"}}} for i in range(devices)]}
        self.inventory = inventory_codec.canonical_text(doc)
        digest = inventory_codec.parse_annotation(self.inventory).digest
        held: list[list[int]] = [[] for _ in range(pods)]
        placement = []
        for j in range(active):
            p = (j * 7919) % pods
            device = None
            if j % 4 == 0 and len(held[p]) < devices - 2:  # the first free one from a place of its own
                device = next(d % devices for d in range(j // 4, j // 4 + devices) if d % devices not in held[p])
                held[p].append(device)
            placement.append((p, device))
        runs_on = [sum(1 for p, _ in placement if p == i) for i in range(pods)]
        self.pods = [PodInfo(NAMESPACE, f"pod-{i:05d}", f"pod-uid-{i}", RUNTIME, ready=True, heartbeat=NOW,
                             capacity=(("runs", runs_on[i] + 1_000_000),), devices=self.inventory)
                     for i in range(pods)]
        for pod in self.pods:
            self.cache.upsert_pod(pod)
        for j, (p, device) in enumerate(placement):
            results = None if device is None else self.canonical(
                {"inventoryDigest": digest, "results": [{"request": "gpu", "device": f"gpu-{device}"}]})
            self.cache.upsert_run(RunInfo(NAMESPACE, f"active-{j:06d}", f"active-uid-{j}", RUNTIME, phase="Running",
                                          requests=(("runs", 1),), pod_name=self.pods[p].name,
                                          pod_uid=self.pods[p].uid,
                                          devices=None if device is None else self.canonical(ONE_DEVICE),
                                          device_results=results))
        self.planner = self.new_planner()
        self.serial = 0

    def new_planner(self) -> Any:
        return planner_class()(self.config)

    def runs(self, n: int, claim: dict[str, Any] | None) -> list[Any]:
        text = None if claim is None else self.canonical(claim)
        made = []
        for _ in range(n):
            self.serial += 1
            made.append(self.RunInfo(NAMESPACE, f"pending-{self.serial:07d}", f"pending-uid-{self.serial}", RUNTIME,
                                     requests=(("runs", 1),), devices=text))
        for run in made:
            self.cache.upsert_run(run)
        return made

    def cycle(self, run: Any, planner: Any = None) -> bool:
        from kruntimes.scheduler import device_cycle
        from kruntimes.scheduler import outcome as out
        cache, planner = self.cache, planner or self.planner
        with cache.lock:
            snapshot = cache.snapshot(run, NOW)
            outcome = planner.plan(snapshot)
            devices = device_cycle.allocated(planner, self.metrics, run, outcome)
            with_devices = {"device_results": devices} if devices is not None else {}
            if outcome.status == out.SCHEDULED and cache.reserve_waking(
                    run, outcome.chosen or "", outcome.chosen_uid, **with_devices) is None:
                raise RuntimeError(f"reserve refused {run.name} on {outcome.chosen}")
        return outcome.chosen is not None

    def batch(self, n: int, claim: dict[str, Any] | None, planner: Any = None) -> tuple[float, int, list[float]]:
        """Seconds for `n` cycles, how many placed, and each cycle's seconds; the Runs are deleted after.

        ``planner`` "pod-by-pod" plans with `Planner(columns=False)`: what a device-free cycle
        costs on the path every Run with a claim takes (the framework plans those pod by pod).
        """
        if planner == "pod-by-pod":
            planner = self.pod_by_pod = getattr(self, "pod_by_pod", None) or planner_class()(self.config, columns=False)
        todo = self.runs(n, claim)
        placed, each = 0, []
        clock = time.perf_counter
        start = clock()
        for run in todo:
            t = clock()
            placed += self.cycle(run, planner)
            each.append(clock() - t)
        elapsed = clock() - start
        for run in todo:  # untimed: the Runs complete and their devices come back
            self.cache.delete_run(NAMESPACE, run.name)
        return elapsed, placed, each

    def reset_device_caches(self) -> None:
        """What a freshly started scheduler has not computed yet: engine, parsed documents, memos."""
        from kruntimes.devices import cel_engine
        from kruntimes.scheduler import device_state
        cel_engine._SHARED = None
        for name in dir(device_state):
            cached = getattr(device_state, name)
            if callable(getattr(cached, "cache_clear", None)):
                cached.cache_clear()
        reset = getattr(device_state, "reset_caches", None)
        if reset is not None:
            reset()
        self.planner = self.new_planner()


def _steady(bench: DeviceBench, claims: dict[str, Any], budget: float) -> dict[str, float]:
    """Median µs per cycle of each (claim, planner), batches interleaved until each has had `budget` seconds."""
    rates: dict[str, list[float]] = {k: [] for k in claims}
    spent = dict.fromkeys(claims, 0.0)
    size = dict.fromkeys(claims, 4)
    for label, (claim, planner) in claims.items():
        bench.batch(20, claim, planner)  # warm: tables built, verdicts and searches remembered
    gc.collect()
    while any(s < budget for s in spent.values()):
        for label, (claim, planner) in claims.items():
            if spent[label] >= budget:
                continue
            elapsed, placed, _ = bench.batch(size[label], claim, planner)
            if placed != size[label]:
                raise RuntimeError(f"{label}: {size[label] - placed} Runs did not place")
            spent[label] += elapsed
            rates[label].append(elapsed / size[label] * 1e6)
            size[label] = max(1, min(2_000, int(size[label] / elapsed * budget / 15)))
    return {label: statistics.median(v) for label, v in rates.items()}


def _cold(bench: DeviceBench, repeat: int) -> tuple[float, int, int]:
    """Median ms of the first one-device cycle after a reset, its CEL evaluations and the distinct pairs."""
    from kruntimes.devices import cel_engine, inventory_codec
    times, evals = [], []
    for _ in range(repeat):
        bench.reset_device_caches()
        gc.collect()
        elapsed, placed, _ = bench.batch(1, ONE_DEVICE)
        assert placed == 1
        times.append(elapsed * 1e3)
        evals.append(cel_engine.shared().evaluations)
    inv = inventory_codec.parse_annotation(bench.inventory)
    expressions = {s["cel"]["expression"] for s in CLASS["selectors"]} | {
        s["cel"]["expression"] for r in ONE_DEVICE["requests"] for s in r["exactly"].get("selectors", [])}
    pairs = len(expressions) * len({d.content_digest for d in inv.devices})
    return statistics.median(times), max(evals), pairs


def _worst(bench: DeviceBench, cycles: int) -> float:
    """The slowest of `cycles` cycles of a claim whose searches run out, each with a fresh search memo (ms)."""
    from kruntimes.devices import allocation
    worst = 0.0
    bench.batch(1, EXHAUSTING)  # verdicts known; the memo is what is reset
    for _ in range(cycles):
        for plugin in bench.planner.filters:
            if hasattr(plugin, "memo"):
                plugin.memo = allocation.SearchMemo()
        gc.collect()
        _, placed, each = bench.batch(1, EXHAUSTING)
        assert placed == 0
        worst = max(worst, max(each) * 1e3)
    return worst


def child(budget: float, quick: bool) -> dict[str, float]:
    small = DeviceBench(100, 8, 1_000) if quick else DeviceBench(1_000, 8)
    steady = _steady(small, {"free": (None, None), "one": (ONE_DEVICE, None), "match": (MATCH_ATTRIBUTE, None),
                             "floor": (None, "pod-by-pod")}, budget)
    cold_ms, evals, pairs = _cold(small, 3 if quick else 5)
    del small
    gc.collect()
    large = DeviceBench(200, 16, 1_000) if quick else DeviceBench(5_000, 16)
    per_cycle = _steady(large, {"one": (ONE_DEVICE, None)}, budget)["one"]
    worst = _worst(large, 2 if quick else 5)
    large.reset_device_caches()
    _, _, each = large.batch(1, ONE_DEVICE)
    return {"free µs": steady["free"], "one µs": steady["one"], "match µs": steady["match"],
            "free pod-by-pod µs": steady["floor"], "5,000 x 16 one µs": per_cycle,
            TARGETS[0][0]: steady["one"] / steady["free"], TARGETS[1][0]: steady["match"] / steady["free"],
            TARGETS[2][0]: 1e6 / per_cycle, TARGETS[3][0]: cold_ms, "cold evals": evals, "distinct pairs": pairs,
            TARGETS[4][0]: evals / pairs, "worst search-limit ms": worst, "cold 5,000 x 16 ms": each[0] * 1e3,
            TARGETS[5][0]: max(worst, cold_ms, each[0] * 1e3)}


# -- the parent: alternating checkouts, the table -------------------------------------------------
def measure(root: Path, budget: float, quick: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONHASHSEED="0")
    args = [sys.executable, str(Path(__file__).resolve()), "--child", str(budget)] + (["--quick"] if quick else [])
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the child for {root} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def compare(roots: Sequence[tuple[str, Path]], rounds: int, budget: float, quick: bool,
            progress: Callable[[str], None] = lambda _: None) -> dict[str, dict[str, float]]:
    """Per checkout label, each figure's median over `rounds` alternating child processes."""
    seen: dict[str, list[dict[str, float]]] = {label: [] for label, _ in roots}
    for r in range(rounds):
        for label, root in roots:
            seen[label].append(measure(root, budget, quick))
            progress(f"round {r + 1}/{rounds}: {label} measured")
    return {label: {k: statistics.median(f[k] for f in figs) for k in figs[0]} for label, figs in seen.items()}


def _figure(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "/s":
        return f"{value:,.0f}/s"
    return f"{value:,.1f} ms"


def table(results: dict[str, dict[str, float]]) -> list[str]:
    labels = list(results)
    rows = [["§7.9 target", "goal", *(f"{label}" for label in labels), "met?"]]
    for name, unit, goal, met in TARGETS:
        goal_text = ("≤ " if unit != "/s" else "≥ ") + _figure(goal, unit)
        last = results[labels[-1]][name]
        gap = "" if met(last) else f" (off by {last / goal:.1f}x)" if unit != "/s" else f" (off by {goal / last:.1f}x)"
        rows.append([name, goal_text, *(_figure(results[label][name], unit) for label in labels),
                     ("yes" if met(last) else "NO") + gap])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    lines.append("")
    detail = ("free µs", "free pod-by-pod µs", "one µs", "match µs", "5,000 x 16 one µs", "cold evals", "distinct pairs", "worst search-limit ms",
              "cold 5,000 x 16 ms")
    for key in detail:
        lines.append(f"{key:>24}: " + "  ".join(f"{label} {results[label][key]:,.1f}" for label in labels))
    return lines


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "--child":
        sys.path.insert(0, os.environ.get("PYTHONPATH", str(ROOT)))
        print(json.dumps(child(float(argv[1]), "--quick" in argv)))
        return 0
    raise SystemExit("run through bench/planner.py --devices")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
