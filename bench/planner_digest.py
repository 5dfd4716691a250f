"""One SHA-256 over many full cycle outcomes: the planner's bit-identity check.

A change that should not change any decision (a faster planner, a cheaper cache)
must leave every pod's verdict, every raw and normalised score, the totals and the
choice of every cycle exactly as they were. This script runs two deterministic
workloads through the real cache and planner and prints one digest per workload
over every `CycleOutcome.digest()`: run it on the code before and after the change,
and compare.

- **mixed**: Runtime Pods of two runtimes that go stale, not ready, terminating,
  get invalid or changed capacity, are deleted and re-added under a new UID; Runs
  of several request shapes, workspaces, required affinity and anti-affinity,
  preferred terms; active Runs that finish; a what-if planner with other weights
  and another default `runs` capacity. The clock moves so heartbeats age.
- **bench**: `planner.py`'s workload (1,000 pods, 10,000 active Runs, a quarter of
  the Runs asking for a GPU).

    python bench/planner_digest.py [--cycles 600] [--seed 16]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.planner, when run as a script

from kruntimes.scheduler.cache import ClusterCache
from kruntimes.scheduler.config import SchedulerConfig
from kruntimes.scheduler.planner import Planner
from kruntimes.scheduler.outcome import CycleOutcome
from kruntimes.scheduler.projection import (Affinity, PodInfo, Requirement, RunInfo, Selector, Term,
                                            WeightedTerm)
from kruntimes.scheduler.snapshot import Snapshot

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
NS = "digest"
RUNTIMES = ("rt-a", "rt-b")
SHAPES = ((("runs", 1),), (("example.com/gpu", 1), ("runs", 1)), (("runs", 2),),
          (("memory", 3), ("runs", 1)), (("example.com/gpu", 2), ("memory", 1), ("runs", 1)))
APPS = ("web", "db", "batch", "cache")


def _pod(rng: random.Random, i: int, generation: int, now: datetime) -> PodInfo:
    capacity: dict[str, int] = {"runs": rng.choice((0, 1, 2, 4, 8, 16))}
    if i % 3 == 0:
        capacity["example.com/gpu"] = rng.choice((1, 2, 4))
    if i % 2 == 0:
        capacity["memory"] = rng.choice((2, 6, 12))
    if i % 11 == 5:
        del capacity["runs"]  # the default `runs` capacity applies
    roll = rng.random()
    return PodInfo(NS, f"pod-{i:04d}", f"pod-{i:04d}-g{generation}", RUNTIMES[i % 2],
                   resource_version=str(generation), ready=roll > 0.05, terminating=0.05 < roll < 0.08,
                   heartbeat=None if 0.08 < roll < 0.09 else now - timedelta(seconds=rng.randrange(0, 34)),
                   capacity=tuple(sorted(capacity.items())),
                   capacity_problem="bad capacity annotation" if 0.1 < roll < 0.12 else None)


def _selector(rng: random.Random) -> Selector:
    if rng.random() < 0.5:
        return Selector(match_labels=(("app", rng.choice(APPS)),))
    return Selector(match_expressions=(Requirement("app", "In", tuple(sorted(rng.sample(APPS, 2)))),))


def _affinity(rng: random.Random) -> Affinity:
    roll = rng.random()
    if roll < 0.6:
        return Affinity()
    if roll < 0.7:
        return Affinity(required=(Term(_selector(rng)),))
    if roll < 0.8:
        return Affinity(required_anti=(Term(_selector(rng)),))
    return Affinity(preferred=(WeightedTerm(rng.randrange(1, 100), Term(_selector(rng))),),
                    preferred_anti=(WeightedTerm(rng.randrange(1, 100), Term(_selector(rng))),)
                    if rng.random() < 0.5 else ())


def _run(rng: random.Random, j: int) -> RunInfo:
    return RunInfo(NS, f"run-{j:05d}", f"run-uid-{j}", rng.choice(RUNTIMES), resource_version="1",
                   labels=(("app", rng.choice(APPS)),), requests=rng.choice(SHAPES), affinity=_affinity(rng),
                   workspace=f"ws-{rng.randrange(4)}" if rng.random() < 0.15 else None)


def mixed(cycles: int, seed: int) -> Iterator[bytes]:
    for _, _, outcome in mixed_cycles(cycles, seed):
        yield outcome.digest().encode()


def mixed_cycles(cycles: int, seed: int) -> Iterator[tuple[Planner, Snapshot, CycleOutcome]]:
    """The mixed workload's cycles: (planner, snapshot, outcome), each before its reservation."""
    rng = random.Random(seed)
    config = SchedulerConfig()
    what_if = replace(config.with_weights({"LeastLoaded": 3}), default_runs_capacity=2)
    cache, planner, other = ClusterCache(config), Planner(config), Planner(what_if)
    now = START
    generation = [0] * 160
    for i in range(len(generation)):
        cache.upsert_pod(_pod(rng, i, 0, now))
    placed: list[RunInfo] = []
    for j in range(cycles):
        now += timedelta(seconds=rng.randrange(0, 2))
        for _ in range(rng.randrange(0, 8)):  # the cluster moves between cycles
            roll, i = rng.random(), rng.randrange(len(generation))
            if roll < 0.5:
                cache.upsert_pod(_pod(rng, i, generation[i], now))
            elif roll < 0.6:
                cache.delete_pod(NS, f"pod-{i:04d}")
            elif roll < 0.7:
                generation[i] += 1  # re-added under a new UID
                cache.upsert_pod(_pod(rng, i, generation[i], now))
            elif placed:
                r = placed.pop(rng.randrange(len(placed)))
                cur = cache.run(r.key)
                if cur is not None:
                    phase = "Running" if roll < 0.85 else "Succeeded"
                    cache.upsert_run(replace(cur, phase=phase, resource_version="2"))
        run = _run(rng, j)
        cache.upsert_run(run)
        with cache.lock:
            snapshot = cache.snapshot(run, now)
            outcome = planner.plan(snapshot)
            yield planner, snapshot, outcome
            if j % 10 == 0:
                snapshot = cache.snapshot(run, now, what_if)
                yield other, snapshot, other.plan(snapshot)
        if outcome.chosen is not None and cache.reserve(run, outcome.chosen, outcome.chosen_uid):
            placed.append(replace(run, pod_name=outcome.chosen, pod_uid=outcome.chosen_uid))


def bench_workload(cycles: int) -> Iterator[bytes]:
    from bench.planner import compare_choices
    real, _ = compare_choices(1_000, 10_000, cycles)
    for outcome in real:
        yield outcome.digest().encode()


def digest(parts: Iterator[bytes]) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    for part in parts:
        h.update(part)
        n += 1
    return h.hexdigest(), n


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=600)
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args(argv)
    for name, parts in (("mixed", mixed(args.cycles, args.seed)), ("bench", bench_workload(args.cycles))):
        value, n = digest(parts)
        print(f"{name:6} {n:5} outcomes  sha256 {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
