"""The §7.9 device cycles in instructions (valgrind's callgrind), for a noisy machine.

`planner_devices.DeviceBench`'s cycle (snapshot, plan, `device_cycle.allocated`,
reserve) for Runs without devices, with a one-device claim and with the two-request
matchAttribute claim, each run under callgrind twice: with `--cycles` consecutive
measured cycles after a warm-up of 30, and with none; the difference over `--cycles`
is the cycle's count. The garbage collector is set up as the scheduler sets it up
(`kruntimes.gctuning`) after the warm-up. Unlike `planner.py --devices` the kinds of
cycle are not interleaved (each process measures one), so no batch pays for catching
up with another kind's changes; and instructions are not seconds: the device work is
interpreted Python that retires fewer instructions per ns than the C passes over the
pod tables that most of a device-free cycle is.

    python bench/planner_devices_instructions.py [--active 10000] [--cycles 200]
    python bench/planner_devices_instructions.py --root /path/to/other/checkout
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this checkout's bench/, whatever --root names
import cycle_instructions  # noqa: E402

KINDS = ("free", "one", "match")


def child(kind: str, active: int, cycles: int) -> None:
    import planner_devices as pd
    from kruntimes import gctuning

    claim = {"free": None, "one": pd.ONE_DEVICE, "match": pd.MATCH_ATTRIBUTE}[kind]
    bench = pd.DeviceBench(1000, 8, active)
    bench.batch(30, claim)
    todo = bench.runs(cycles, claim)
    gctuning.tune()
    for run in todo:
        bench.cycle(run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cycle_instructions.add_options(parser, root_help="the checkout whose kruntimes runs")
    args = parser.parse_args(argv)
    if args.child:
        kind, active, cycles = args.child.split(",")
        child(kind, int(active), int(cycles))
        return 0
    print(f"instructions per cycle, 1,000 pods x 8 devices, {args.active:,} active Runs, {args.root}")
    per = {}
    for kind in KINDS:
        per[kind] = cycle_instructions.per_cycle(__file__, args.root, lambda n: f"{kind},{args.active},{n}",
                                                 args.cycles)
        ratio = "" if kind == "free" else f"  {per[kind] / per['free']:.2f}x device-free"
        print(f"{kind:6} {per[kind]:12,.0f}{ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
