"""Device allocation on every pod of a cycle: the pure allocator alone (SPEC §7.5, §7.9).

What the Filter `DeviceAllocation` will cost per cycle before any framework caching:
`allocation.prepare` once, then `allocation.on_pod` on every pod in pod-name order with
one cycle budget and the pod's usage fingerprint kept from before. Pods of one
Runtime share one inventory (same devices, same digest); each pod holds 0–3 of its
devices (seeded), so most pods have a usage of their own. Two claims: one device by
class and selector; two requests with `matchAttribute` on the NUMA node.

- cold: a fresh engine (every selector compiled, every verdict evaluated once);
- steady: a warm engine, a fresh cycle budget, no memo across cycles;
- memo: as steady, with a `SearchMemo` kept across cycles (every key seen before).

    python bench/device_allocation.py                  # 1,000 x 8 and 5,000 x 16
    python bench/device_allocation.py --cells 1000x8

A benchmark, not a test: it asserts nothing and prints a table (median of --repeat).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from kruntimes.devices import allocation, cel_engine, claims, inventory_codec, usage

G = "gpu.example.com"
A = f'device.attributes["{G}"]'


def pods(count: int, per_pod: int, seed: int = 26) -> list[tuple]:
    rng = random.Random(seed)
    devices = [{"name": f"gpu-{i}", "attributes": {"model": {"string": "a100"}, "numa": {"int": i * 2 // per_pod}},
                "capacity": {"memory": {"value": "40Gi"}}} for i in range(per_pod)]
    inv = inventory_codec.parse_document({"driver": G, "devices": devices})
    out = []
    for p in range(count):
        held = [usage.Holder(f"gpu-{i}") for i in sorted(rng.sample(range(per_pod), rng.randint(0, 3)))]
        # The fingerprint a framework keeps per pod, recomputed only when the pod's usage changes.
        out.append((f"pod-{p:05d}", inv, held, usage.fingerprint(inv, held)))
    return out


CLASSES = {"gpu": claims.parse_class("gpu", 1, {"selectors": [{"cel": {"expression": f"has({A}.model)"}}]})}
CLAIMS = {
    "1 device": claims.parse_claim({"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu", "selectors": [{"cel": {"expression": f'{A}.model == "a100"'}}]}}]}),
    "2 requests, matchAttribute": claims.parse_claim({"requests": [
        {"name": "a", "exactly": {"deviceClassName": "gpu"}}, {"name": "b", "exactly": {"deviceClassName": "gpu"}}],
        "constraints": [{"matchAttribute": f"{G}/numa"}]}),
}


def cycle(cells: list[tuple], claim: claims.DeviceClaim, engine: cel_engine.Engine,
          memo: allocation.SearchMemo | None) -> tuple[float, int]:
    budget = allocation.CycleBudget()
    start = time.perf_counter()
    prepared = allocation.prepare(claim, CLASSES, engine)  # once per cycle (PreFilter)
    assert isinstance(prepared, allocation.Prepared)
    allocated = 0
    for _name, inv, held, fingerprint in cells:
        allocated += isinstance(allocation.on_pod(prepared, inv, held, engine, budget, memo, fingerprint),
                                allocation.Allocation)
    return time.perf_counter() - start, allocated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="1000x8,5000x16")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, engine {'=='.join(cel_engine.ENGINE)}")
    print(f"{'pods x devices':>14}  {'claim':28} {'cold ms':>8} {'steady ms':>10} {'memo ms':>8} "
          f"{'µs/pod':>7} {'evals':>6} {'feasible':>8}")
    for cell in args.cells.split(","):
        count, per_pod = (int(x) for x in cell.split("x"))
        cells = pods(count, per_pod)
        for label, claim in CLAIMS.items():
            engine = cel_engine.Engine()
            cold, feasible = cycle(cells, claim, engine, None)
            evals = engine.evaluations
            steady = statistics.median(cycle(cells, claim, engine, None)[0] for _ in range(args.repeat))
            memo = allocation.SearchMemo()
            cycle(cells, claim, engine, memo)
            memoised = statistics.median(cycle(cells, claim, engine, memo)[0] for _ in range(args.repeat))
            print(f"{count:>6,} x {per_pod:<5}  {label:28} {cold * 1e3:8.1f} {steady * 1e3:10.1f} "
                  f"{memoised * 1e3:8.1f} {steady / count * 1e6:7.1f} {evals:6d} {feasible:8,}")


if __name__ == "__main__":
    main()
