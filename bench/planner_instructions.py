"""The planner benchmark's cycle in instructions (valgrind's callgrind), for a noisy machine.

`planner.py`'s real cycle (snapshot, plan, reserve; 10,000 active Runs by default)
is run under callgrind twice per cell: with `--cycles` measured cycles after the
warm-up, and with none; the difference over `--cycles` is the cycle's count. It does
not move with the machine's load, so two checkouts compare on a shared machine:
`--root` runs another checkout's code (its `kruntimes` and `bench/planner.py`).
After the warm-up the garbage collector is set up as the scheduler sets it up
(`kruntimes.gctuning`: what exists is frozen, collections are rare), so that whether
a full collection of the 10,000-Run cache happens to fall among the measured cycles
does not decide the count.

    python bench/planner_instructions.py [--pods 100,1000,5000] [--active 10000] [--cycles 200]
    python bench/planner_instructions.py --root /path/to/other/checkout
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this checkout's bench/, whatever --root names
import cycle_instructions  # noqa: E402

ROOT = cycle_instructions.ROOT


def child(pods: int, active: int, cycles: int) -> None:
    from bench.planner import RealCycle, Trial, Workload, pending_runs
    from kruntimes import gctuning
    from kruntimes.scheduler.config import SchedulerConfig

    real = RealCycle(Workload.build(pods, active, headroom=cycles + 200), SchedulerConfig())
    runs = pending_runs()
    Trial(real, runs, warmup=50)
    todo = [next(runs) for _ in range(cycles)]
    real.admit(todo)
    gctuning.tune()
    for run in todo:
        real(run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", default="100,1000,5000")
    cycle_instructions.add_options(parser, root_help="the checkout whose code runs")
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, os.environ.get("PYTHONPATH", str(ROOT)))
        child(*map(int, args.child.split(",")))
        return 0
    print(f"instructions per cycle (snapshot + plan + reserve), {args.active:,} active Runs, {args.root}")
    for pods in map(int, args.pods.split(",")):
        per = cycle_instructions.per_cycle(__file__, args.root, lambda n: f"{pods},{args.active},{n}", args.cycles)
        print(f"{pods:>6,} pods  {per:>12,.0f} instructions/cycle  {per / pods:>8,.1f} per pod", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
