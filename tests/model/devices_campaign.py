"""`python -m tests.model.devices_campaign --workloads N --seed S [--out DIR]`: §7.5, product against model.

Runs N random device workloads (workload i is drawn from `random.Random(f"{S}:{i}")`,
so any one can be regenerated alone) through `kruntimes.devices.allocation` and the
plain model (`tests/model/devices_model.py`), prints how many are identical (every
pod's outcome, results, steps and preference, and the cycle's steps left) and what the
pods' outcomes were, groups the differing workloads by (product outcome, model outcome)
so each group can be read against the SPEC text, and writes the first ones as JSON.

`--mutant NAME` runs the campaign against a product with one rule knocked out, to show
the campaign would see it (the figure is how many workloads then differ).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
import contextlib
from collections import Counter
from typing import Callable, Iterator
from unittest import mock

from kruntimes.devices import allocation, inventory, search, usage
from tests.model import devices_compare, devices_workloads

# One rule of §7.5 knocked out each: what the campaign must notice.
MUTANTS: dict[str, Callable[[], contextlib.AbstractContextManager[object]]] = {
    "no-pre-check": lambda: mock.patch.object(search, "enough_alone", lambda state, alt, cands: True),
    "no-constraints": lambda: mock.patch.object(search.Search, "accepts", lambda self, device, r, a: True),
    "no-policy-rounding": lambda: mock.patch.object(
        inventory.Capacity, "consumed", lambda self, request: self.value if request is None else request),
    "no-counters": lambda: mock.patch.object(usage, "charge", lambda counters, device, sign=1: None),
    "no-prune": lambda: mock.patch.object(search.Search, "slots", _slots_without_prune),
}


def _slots_without_prune(self, r, a, j, start, candidates):  # type: ignore[no-untyped-def]
    request, alt = self.claim.requests[r], self.claim.requests[r].alternatives[a]
    if alt.mode == "All" or j == alt.count:
        return _ORIGINAL_SLOTS(self, r, a, j, start, candidates)
    for p in range(start, len(candidates[r][a])):
        device = candidates[r][a][p]
        if self.tries(device, request, alt):
            if self.slots(r, a, j + 1, p + 1, candidates):
                return True
            self.undo(device, request, alt)
        if self.exhausted:
            return False
    return False


_ORIGINAL_SLOTS = search.Search.slots


@contextlib.contextmanager
def _no_mutant() -> Iterator[None]:
    yield


def _kind(outcome: tuple) -> str:
    return "allocated" if outcome[0] == "allocated" else outcome[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.model.devices_campaign", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--seed", default="0")
    parser.add_argument("--out", default="device-model-differences")
    parser.add_argument("--keep", type=int, default=10, help="how many differing workloads to write")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="knock one rule out of the product")
    args = parser.parse_args(argv)
    with MUTANTS[args.mutant]() if args.mutant else _no_mutant():
        return _campaign(args)


def _campaign(args: argparse.Namespace) -> int:
    identical = pods = written = 0
    outcomes: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for i in range(args.workloads):
        workload = devices_workloads.workload(random.Random(f"{args.seed}:{i}"))
        (mine, left), (theirs, model_left) = devices_compare.product(workload), devices_compare.model(workload)
        pods += len(mine)
        outcomes.update(_kind(o) for o in mine)
        if mine == theirs and left == model_left:
            identical += 1
            continue
        label = next((f"{_kind(a)} / model {_kind(b)}" for a, b in zip(mine, theirs) if a != b), "cycle steps left")
        groups[label] += 1
        examples.setdefault(label, f"{args.seed}:{i}")
        if written < args.keep:
            out = pathlib.Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"workload-{args.seed}-{i}.json").write_text(json.dumps(
                {"seed": f"{args.seed}:{i}", "differences": devices_compare.differences(workload),
                 "workload": workload}, indent=1))
            written += 1
    n = args.workloads
    print(f"seed {args.seed}: {identical}/{n} workloads identical ({100 * identical / max(n, 1):.2f}%), {pods} pods")
    print("  pod outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
    for label, count in groups.most_common():
        print(f"  {count:6d}  product {label}  (first: {examples[label]})")
    if written:
        print(f"first {written} differing workloads written to {args.out}/")
    return 0 if identical == n else 1


if __name__ == "__main__":
    sys.exit(main())
