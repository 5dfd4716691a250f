"""Planner throughput: the incremental cluster cache against the model it replaced.

One cycle is what a scheduler worker does for one dequeued Pending Run, without the
binder: snapshot (under the cache lock), plan, reserve. The workload is one Runtime
in one namespace: `pods` Runtime Pods and `active` Runs already Running on them,
spread round-robin, with mixed resources (every 4th pod also offers
`example.com/gpu`; every 8th active Run and every 4th measured Run requests one).
Pods get enough capacity that every measured Run places, so every cycle scores.

The NAIVE BASELINE is the design the cache replaced: every cycle rebuilds usage by
walking the full list of active Runs (and the assumptions), builds fresh `PodView`s
with `views.make_view`, and runs the very same `Planner` on them. It makes exactly
the real planner's decisions (tests/unit/test_bench_smoke.py checks that), so the
ratio measures the design, not different plugins. The POD-BY-POD column is the
real cache with `Planner(columns=False)`: each plugin evaluated on the pods it is
handed, as before the planner kept pod tables (`kruntimes.scheduler.columns`).

    python bench/planner.py                    # 100/1,000/5,000 pods x 1k/10k/100k Runs
    python bench/planner.py --quick            # a small subset, for smoke runs
    python bench/planner.py --cells 1000x10000,5000x100000 --budget 1
    python bench/planner.py --cells 1000x10000 --profile   # cProfile the real cycle
    python bench/planner.py --devices --before /tmp/main   # SPEC §7.9 table, two checkouts side by side

Each figure is the median rate of about twenty batches of cycles timed within
`--budget` seconds per planner (after a short untimed warm-up); the Pending Runs of
a batch are created untimed just before it. Real and naive batches alternate, so
both see the same background load; the median keeps figures honest on a shared
machine, a note flags cells whose batches spread widely, and the load average is
printed with the table.
A benchmark, not a test: it asserts nothing and prints a table.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Sequence

from kruntimes.scheduler import outcome as out
from kruntimes.scheduler import views
from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.projection import Amounts, PodInfo, RunInfo
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.targets import NamespaceTargets

NAMESPACE, RUNTIME, GPU = "bench", "rt", "example.com/gpu"
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
RUNS_ONLY: Amounts = (("runs", 1),)
WITH_GPU: Amounts = ((GPU, 1), ("runs", 1))

DEFAULT_CELLS = [(p, a) for p in (100, 1_000, 5_000) for a in (1_000, 10_000, 100_000)]
QUICK_CELLS = [(100, 1_000), (1_000, 10_000)]
GROWTH_PODS, GROWTH_LOW, GROWTH_HIGH = 1_000, 1_000, 100_000
# Targets at 10k active Runs, one core: cycles/s by pod count, and the cost of one more pod.
TARGETS = ((1_000, 10_000, 4_000.0), (5_000, 10_000, 1_000.0))
PER_POD_TARGET_US = 0.15


# -- the workload ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """Pods and active Runs of one cell; capacity leaves room for `headroom` more Runs per pod."""

    pods: tuple[PodInfo, ...]
    active: tuple[RunInfo, ...]

    @classmethod
    def build(cls, n_pods: int, n_active: int, headroom: int) -> Workload:
        gpu_pods = [i for i in range(n_pods) if i % 4 == 0]
        runs_on, gpus_on = [0] * n_pods, [0] * n_pods
        placement = []
        for j in range(n_active):
            if j % 8 == 0:  # a GPU Run, on a pod that offers GPUs
                p = gpu_pods[(j // 8) % len(gpu_pods)]
                gpus_on[p] += 1
            else:
                p = j % n_pods
            runs_on[p] += 1
            placement.append(p)
        pods = tuple(
            PodInfo(NAMESPACE, _pod_name(i), f"pod-uid-{i}", RUNTIME, ready=True, heartbeat=NOW,
                    capacity=(((GPU, gpus_on[i] + headroom),) if i % 4 == 0 else ())
                    + (("runs", runs_on[i] + headroom),))
            for i in range(n_pods))
        active = tuple(
            RunInfo(NAMESPACE, f"active-{j:06d}", f"active-uid-{j}", RUNTIME, phase="Running",
                    requests=WITH_GPU if j % 8 == 0 else RUNS_ONLY,
                    pod_name=pods[p].name, pod_uid=pods[p].uid)
            for j, p in enumerate(placement))
        return cls(pods, active)


def _pod_name(i: int) -> str:
    return f"pod-{i:05d}"


def pending_runs(start: int = 0) -> Iterator[RunInfo]:
    """The measured Runs, in the same order for both planners; every 4th asks for a GPU."""
    j = start
    while True:
        yield RunInfo(NAMESPACE, f"pending-{j:07d}", f"pending-uid-{j}", RUNTIME,
                      requests=WITH_GPU if j % 4 == 3 else RUNS_ONLY)
        j += 1


# -- the real planner: incremental cluster cache -------------------------------------------
class RealCycle:
    """The loop's cycle without the binder: snapshot + plan under the lock, then reserve."""

    def __init__(self, workload: Workload, config: SchedulerConfig, columns: bool = True) -> None:
        self.cache = ClusterCache(config)
        self.planner = Planner(config, columns=columns)
        for pod in workload.pods:
            self.cache.upsert_pod(pod)
        for run in workload.active:
            self.cache.upsert_run(run)

    def admit(self, runs: Sequence[RunInfo]) -> None:
        """Make Runs Pending in the cache (the informer's job; untimed)."""
        for run in runs:
            self.cache.upsert_run(run)

    def __call__(self, run: RunInfo) -> out.CycleOutcome:
        cache = self.cache
        with cache.lock:
            snapshot = cache.snapshot(run, NOW)
            outcome = self.planner.plan(snapshot)
        if outcome.chosen is not None and not cache.reserve(run, outcome.chosen):
            raise RuntimeError(f"reserve refused {run.name} on {outcome.chosen}")
        return outcome


# -- the naive baseline: rebuild usage from the Run list every cycle ------------------------
class NaiveCycle:
    """The replaced model: walk every active Run (and assumption) each cycle, then plan.

    Affinity targets are an empty index: the workload has no affinity terms, so
    the real index (which also holds every active Run) decides nothing either.
    """

    def __init__(self, workload: Workload, config: SchedulerConfig) -> None:
        self.config = config
        self.planner = Planner(config)
        self.pods = tuple(sorted(workload.pods, key=lambda p: p.name))
        self.active = list(workload.active)
        self.assumed: list[tuple[str, str, Amounts]] = []  # (namespace, pod name, requests)
        self.targets = NamespaceTargets()

    def admit(self, runs: Sequence[RunInfo]) -> None:
        pass  # the naive model reads the Run it is handed

    def __call__(self, run: RunInfo) -> out.CycleOutcome:
        ns = run.namespace
        # 1. Usage from scratch: sum the requests of every active Run per pod.
        actual: dict[tuple[str, str | None], dict[str, int]] = {}
        for r in self.active:
            if r.namespace == ns and r.active:
                _charge(actual.setdefault((r.pod_name or "", r.pod_uid), {}), r.requests)
        assumed: dict[str, dict[str, int]] = {}
        for a_ns, pod_name, requests in self.assumed:
            if a_ns == ns:
                _charge(assumed.setdefault(pod_name, {}), requests)
        # 2. Fresh views of the Runtime's pods, then the same planner.
        pods = []
        for info in self.pods:
            if info.namespace == ns and info.runtime == run.runtime:
                used = dict(actual.get((info.name, info.uid), {}))
                _charge(used, tuple(actual.get((info.name, None), {}).items()))
                pods.append(views.make_view(info, used, assumed.get(info.name, {}),
                                            self.config.default_runs_capacity))
        snapshot = Snapshot(run=run, pods=tuple(pods), targets=self.targets, now=NOW, lsn=0,
                            config=self.config)
        outcome = self.planner.plan(snapshot)
        # 3. Reserve: re-check the fit on the chosen pod, then assume.
        if outcome.chosen is not None:
            free = next(p.free for p in pods if p.info.name == outcome.chosen)
            if any(free.get(r, -1) < q for r, q in run.requests):
                raise RuntimeError(f"naive reserve refused {run.name} on {outcome.chosen}")
            self.assumed.append((ns, outcome.chosen, run.requests))
        return outcome


def _charge(into: dict[str, int], requests: Amounts) -> None:
    for resource, amount in requests:
        into[resource] = into.get(resource, 0) + amount


# -- measuring -----------------------------------------------------------------------------------
@dataclass
class Measure:
    cycles: int = 0
    seconds: float = 0.0
    batch_rates: list[float] = field(default_factory=list)
    placed: int = 0

    @property
    def rate(self) -> float:
        """The median batch rate: robust to other processes taking the core for a moment."""
        return statistics.median(self.batch_rates) if self.batch_rates else 0.0

    @property
    def spread(self) -> float:
        """Interquartile range of the batch rates relative to the median: a stability hint."""
        if len(self.batch_rates) < 4 or not self.rate:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.batch_rates, n=4)
        return (q3 - q1) / self.rate


class Trial:
    """One planner under measurement: its own stream of Pending Runs and its batches."""

    def __init__(self, planner: RealCycle | NaiveCycle, runs: Iterator[RunInfo], warmup: int = 20) -> None:
        self.planner, self.runs, self.result = planner, runs, Measure()
        self.batch = 8
        self.run_batch(warmup, timed=False)  # views built, memos filled: the steady state

    def run_batch(self, n: int, timed: bool = True) -> float:
        todo = [next(self.runs) for _ in range(n)]
        self.planner.admit(todo)  # the informer's work, untimed
        planner, placed = self.planner, 0
        start = time.perf_counter()
        for run in todo:  # outcomes are dropped at once, as the loop does after journaling
            placed += planner(run).chosen is not None
        elapsed = time.perf_counter() - start
        if timed:
            m = self.result
            m.cycles += n
            m.seconds += elapsed
            m.placed += placed
            m.batch_rates.append(n / elapsed)
        return elapsed


def measure_interleaved(trials: Sequence[Trial], budget: float, max_cycles: int) -> list[Measure]:
    """Alternate batches of each trial until each has used `budget` seconds (or `max_cycles`).

    Alternating exposes both planners to the same background load, so the ratio
    stays fair on a shared machine; batches are sized for about twenty per budget.
    """
    gc.collect()
    while True:
        active = [t for t in trials if t.result.seconds < budget and t.result.cycles < max_cycles]
        if not active:
            return [t.result for t in trials]
        for t in active:
            n = min(t.batch, max_cycles - t.result.cycles)
            elapsed = t.run_batch(n)
            t.batch = max(1, min(20_000, int(n / elapsed * budget / 20)))


def measure(planner: RealCycle | NaiveCycle, runs: Iterator[RunInfo], budget: float,
            max_cycles: int, warmup: int = 20) -> Measure:
    """Warm up, then time batches of cycles until `budget` seconds or `max_cycles`."""
    return measure_interleaved([Trial(planner, runs, warmup)], budget, max_cycles)[0]


@dataclass
class Cell:
    pods: int
    active: int
    real: Measure | None = None
    naive: Measure | None = None
    pod_by_pod: Measure | None = None
    setup_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.real and self.naive and self.naive.rate:
            return self.real.rate / self.naive.rate
        return None


def run_cell(pods: int, active: int, budget: float, max_cycles: int, setup_budget: float,
             config: SchedulerConfig | None = None) -> Cell:
    config = config or SchedulerConfig()
    cell = Cell(pods, active)
    headroom = max_cycles + 100  # every measured Run fits, on whichever pod it lands
    workload = Workload.build(pods, active, headroom)
    estimate = _estimate_setup(workload, config)
    if estimate > setup_budget:
        cell.notes.append(f"skipped: cache setup ~{estimate:.0f}s > --setup-budget {setup_budget:.0f}s")
        return cell
    start = time.perf_counter()
    real = RealCycle(workload, config)
    cell.setup_seconds = time.perf_counter() - start
    trials = [Trial(real, pending_runs()), Trial(RealCycle(workload, config, columns=False), pending_runs()),
              Trial(NaiveCycle(workload, config), pending_runs())]
    cell.real, cell.pod_by_pod, cell.naive = measure_interleaved(trials, budget, max_cycles)
    for label, m in (("real", cell.real), ("pod-by-pod", cell.pod_by_pod), ("naive", cell.naive)):
        if m.cycles >= max_cycles:
            cell.notes.append(f"{label} capped at {max_cycles} cycles")
        if m.placed != m.cycles:
            cell.notes.append(f"{label}: {m.cycles - m.placed} Runs did not place")
        if m.spread > 0.10:
            cell.notes.append(f"{label} IQR {m.spread:.0%}")
    return cell


def _estimate_setup(workload: Workload, config: SchedulerConfig) -> float:
    """Extrapolate the cache's setup time from loading a sample of the active Runs."""
    sample = min(len(workload.active), 2_000)
    if sample == 0:
        return 0.0
    start = time.perf_counter()
    RealCycle(Workload(workload.pods, workload.active[:sample]), config)
    return (time.perf_counter() - start) * len(workload.active) / sample


def compare_choices(pods: int, active: int, n_runs: int) -> tuple[list[out.CycleOutcome], list[out.CycleOutcome]]:
    """Run the same Pending Runs through both planners, in lockstep; returns both outcome lists."""
    config = SchedulerConfig()
    workload = Workload.build(pods, active, headroom=n_runs)
    real, naive = RealCycle(workload, config), NaiveCycle(workload, config)
    runs = [r for r, _ in zip(pending_runs(), range(n_runs))]
    real.admit(runs)
    return [real(r) for r in runs], [naive(r) for r in runs]


# -- output ----------------------------------------------------------------------------------------
HEADERS = ("pods", "active Runs", "real cycles/s", "pod-by-pod cycles/s", "naive cycles/s", "ratio real/naive",
           "real µs/cycle", "pod-by-pod µs/cycle", "naive µs/cycle", "cache setup s", "notes")
SHORT_HEADERS = ("pods", "active\nRuns", "real\ncyc/s", "pod-by-\npod cyc/s", "naive\ncyc/s", "real/\nnaive",
                 "real\nµs/cyc", "pod-by-\npod µs", "naive\nµs/cyc", "setup\ns", "notes")


def rows(cells: Sequence[Cell]) -> list[tuple[str, ...]]:
    def rate(m: Measure | None) -> str:
        return f"{m.rate:,.0f}" if m else "-"

    def micros(m: Measure | None) -> str:
        return f"{1e6 / m.rate:,.0f}" if m and m.rate else "-"

    return [(f"{c.pods:,}", f"{c.active:,}", rate(c.real), rate(c.pod_by_pod), rate(c.naive),
             f"{c.ratio:,.1f}x" if c.ratio else "-", micros(c.real), micros(c.pod_by_pod), micros(c.naive),
             f"{c.setup_seconds:.1f}" if c.real else "-", "; ".join(c.notes))
            for c in cells]


def print_table(cells: Sequence[Cell], title: str, stream=None) -> None:  # type: ignore[no-untyped-def]
    stream = stream or sys.stdout
    if stream.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for h in SHORT_HEADERS:  # short two-line headers keep the numbers whole in 80 columns
            table.add_column(h, justify="left" if h == "notes" else "right", no_wrap=h != "notes")
        for row in rows(cells):
            table.add_row(*row)
        Console(file=stream).print(table)
        return
    body = [HEADERS, *rows(cells)]
    widths = [max(len(r[i]) for r in body) for i in range(len(HEADERS))]
    print(title, file=stream)
    for r in body:
        print("  ".join(v.ljust(w) if i == len(HEADERS) - 1 else v.rjust(w)
                        for i, (v, w) in enumerate(zip(r, widths))).rstrip(), file=stream)


def summary(cells: Sequence[Cell]) -> list[str]:
    by = {(c.pods, c.active): c for c in cells}
    lines = []
    low, high = by.get((GROWTH_PODS, GROWTH_LOW)), by.get((GROWTH_PODS, GROWTH_HIGH))
    if low and high and low.real and high.real and low.naive and high.naive:
        lines.append(f"Per-cycle cost growth at {GROWTH_PODS:,} pods, {GROWTH_LOW:,} -> {GROWTH_HIGH:,} active Runs"
                     f" (cycles/s ratio, 1.00 = flat): real {low.real.rate / high.real.rate:.2f}x,"
                     f" naive {low.naive.rate / high.naive.rate:.2f}x")
    else:
        lines.append(f"Per-cycle cost growth: needs cells {GROWTH_PODS}x{GROWTH_LOW} and {GROWTH_PODS}x{GROWTH_HIGH}")
    for pods, active, goal in TARGETS:
        target = by.get((pods, active))
        if target and target.real:
            verdict = "met" if target.real.rate >= goal else "NOT met"
            beside = f"; pod by pod {target.pod_by_pod.rate:,.0f}" if target.pod_by_pod else ""
            lines.append(f"Target >= {goal:,.0f} cycles/s at {pods:,} pods x {active:,} Runs: {verdict}"
                         f" ({target.real.rate:,.0f} cycles/s{beside})")
    lines.extend(per_pod_cost(cells))
    return lines


def per_pod_cost(cells: Sequence[Cell], active: int = 10_000) -> list[str]:
    """Least-squares fit of µs/cycle against pods at `active` Runs: fixed cost + cost per pod."""
    lines = []
    for label in ("real", "pod_by_pod"):
        points = [(c.pods, 1e6 / m.rate) for c in cells if c.active == active
                  for m in (getattr(c, label),) if m is not None and m.rate]
        if len(points) < 2 or len({p for p, _ in points}) < 2:
            continue
        slope, intercept = statistics.linear_regression([p for p, _ in points], [u for _, u in points])
        verdict = ("met" if slope <= PER_POD_TARGET_US else "NOT met") if label == "real" else "for comparison"
        lines.append(f"Per-pod cost, {label.replace('_', '-')}, {active:,} Runs: {intercept:,.0f} µs"
                     f" + {slope:.3f} µs per pod (target <= {PER_POD_TARGET_US} µs: {verdict})")
    return lines


def profile_real(pods: int, active: int, cycles: int, top: int = 25) -> str:
    """cProfile `cycles` real cycles (after warm-up) and return the top functions by own time."""
    config = SchedulerConfig()
    real = RealCycle(Workload.build(pods, active, headroom=cycles + 100), config)
    runs = pending_runs()
    Trial(real, runs)  # warm up
    todo = [next(runs) for _ in range(cycles)]
    real.admit(todo)
    profiler = cProfile.Profile()
    profiler.enable()
    for run in todo:
        real(run)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    return f"cProfile, {cycles} real cycles at {pods:,} pods x {active:,} active Runs\n" + text.getvalue()


def device_targets(before: Path | None, rounds: int, budget: float, quick: bool) -> int:
    """Print the §7.9 table: each target, its figure per checkout (before first), met or not."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: `bench` is a package
    from bench import planner_devices
    roots = ([("before", before.resolve())] if before is not None else []) + [("after", planner_devices.ROOT)]
    results = planner_devices.compare(roots, rounds, budget, quick,
                                      progress=lambda m: print(f"  {m}", file=sys.stderr) if sys.stderr.isatty() else None)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"SPEC §7.9 device targets: whole cycles (snapshot + plan + reserve), medians of {rounds} alternating"
          f" rounds, budget {budget:g}s, {os.cpu_count()} CPUs, load avg {load:.1f}")
    for line in planner_devices.table(results):
        print(line)
    return 0


# -- command line ---------------------------------------------------------------------------------
def parse_cells(text: str) -> list[tuple[int, int]]:
    cells = []
    for part in text.split(","):
        pods, _, active = part.strip().lower().partition("x")
        try:
            cells.append((int(pods.replace("_", "")), int(active.replace("_", ""))))
        except ValueError:
            raise argparse.ArgumentTypeError(f"cell {part!r}: write PODSxACTIVE, e.g. 1000x10000") from None
    return cells


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK_CELLS}, short budget")
    parser.add_argument("--cells", type=parse_cells, help="comma-separated PODSxACTIVE, e.g. 1000x10000,100x1000")
    parser.add_argument("--budget", type=float, help="seconds of measuring per planner per cell (default 2, quick 0.3)")
    parser.add_argument("--max-cycles", type=int, default=50_000, help="cap on measured cycles per planner per cell")
    parser.add_argument("--setup-budget", type=float, default=30.0,
                        help="skip a cell whose cache setup would take longer (seconds)")
    parser.add_argument("--profile", action="store_true", help="cProfile the real cycle of the first cell")
    parser.add_argument("--devices", action="store_true",
                        help="the SPEC §7.9 device targets (bench/planner_devices.py) instead of the cells")
    parser.add_argument("--before", type=Path, help="with --devices: another checkout, measured alternately beside this one")
    parser.add_argument("--rounds", type=int, default=3, help="with --devices: alternating processes per checkout")
    args = parser.parse_args(argv)
    if args.devices:
        return device_targets(args.before, args.rounds, args.budget if args.budget is not None else 1.0, args.quick)
    cells = args.cells or (QUICK_CELLS if args.quick else DEFAULT_CELLS)
    budget = args.budget if args.budget is not None else (0.3 if args.quick else 2.0)

    if args.profile:
        pods, active = cells[0]
        print(profile_real(pods, active, cycles=2_000))
        return 0
    results = []
    for pods, active in cells:
        results.append(run_cell(pods, active, budget, args.max_cycles, args.setup_budget))
        if sys.stderr.isatty():
            print(f"  measured {pods:,} pods x {active:,} Runs", file=sys.stderr)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    title = (f"Planner cycles/s: snapshot + plan + reserve, one worker, Python {sys.version.split()[0]}, "
             f"budget {budget:g}s per planner per cell, {os.cpu_count()} CPUs, load avg {load:.1f}")
    print_table(results, title)
    for line in summary(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
