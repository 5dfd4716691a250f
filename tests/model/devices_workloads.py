"""Random device workloads for the §7.5 differential campaign (any `random.Random`).

A workload is one cycle for one Run: 1–4 Runtime Pods (sometimes two alike, so the
per-cycle memo is exercised), each with a random device inventory (typed attributes,
capacities with request policies, shared counters) and random holders (some of devices
the pod lacks), one random claim (exactly / firstAvailable, ExactCount / All, capacity
requests, match/distinct constraints), the classes it may name (one missing, one
invalid), and small step budgets so that search limits happen.
"""

from __future__ import annotations

import copy
import random

G = "gpu.example.com"
A = f'device.attributes["{G}"]'
GI = 2**30

CLASSES = {
    "gpu": {"selectors": [{"cel": {"expression": f"has({A}.model)"}}]},
    "any": {},
    "numa": {"selectors": [{"cel": {"expression": f"{A}.numa >= 0"}}]},  # errs where numa is missing
    "bad": {"selectors": [{"cel": {"expression": '["a"].exists(x, x == "a")'}}]},
}
SELECTORS = [f'{A}.model == "a100"', f'{A}.model != "t4"', f"{A}.numa == 0", f"{A}.numa == 1",
             f'{A}.model.startsWith("a")', f'has(device.capacity["{G}"].memory) && device.capacity["{G}"].memory >= quantity("20Gi")',
             f"{A}.nvlink",  # errs where nvlink is missing
             f"has({A}.nvlink) && {A}.nvlink", f"{A}.numa < 2 || {A}.model == \"h100\""]


def _policy(rng: random.Random, value: int) -> dict | None:
    choice = rng.random()
    if choice < 0.4:
        return None
    if choice < 0.7:
        values = sorted(v for v in rng.sample([4, 8, 16, 40], rng.randint(1, 3)) if v * GI <= value) or [value // GI]
        return {"default": f"{values[0]}Gi", "validValues": [f"{v}Gi" for v in values]}
    rng_ = {"min": "4Gi"}
    if rng.random() < 0.6:
        rng_["step"] = rng.choice(["4Gi", "6Gi"])
    if rng.random() < 0.5:
        rng_["max"] = f"{value // GI}Gi"
    return {"default": "4Gi", "validRange": rng_}


def device(rng: random.Random, i: int, counters: bool) -> dict:
    attributes: dict = {}
    if rng.random() < 0.95:
        attributes["model"] = {"string": rng.choice(["a100", "h100", "t4"])}
    if rng.random() < 0.95:
        attributes["numa"] = {"int": rng.randint(0, 2)}
    if rng.random() < 0.5:
        attributes["nvlink"] = {"bool": rng.random() < 0.5}
    if rng.random() < 0.2:
        attributes["numa2"] = {"string": str(rng.randint(0, 1))}
    entry: dict = {"name": f"dev-{i}", "attributes": attributes}
    if rng.random() < 0.6:
        value = rng.choice([16, 40, 80]) * GI
        cap: dict = {"value": f"{value // GI}Gi"}
        if rng.random() < 0.4:
            entry["allowMultipleAllocations"] = True
            policy = _policy(rng, value)
            if policy is not None:
                cap["requestPolicy"] = policy
        entry["capacity"] = {"memory": cap}
    if counters and rng.random() < 0.5:
        entry["consumesCounters"] = [{"counterSet": "board", "counters": {"mem": str(rng.randint(1, 2))}}]
    return entry


def pod(rng: random.Random, name: str) -> dict:
    counters = rng.random() < 0.3
    devices = [device(rng, i, counters) for i in range(rng.randint(1, 8))]
    inventory: dict = {"driver": G, "devices": devices}
    if counters:
        inventory["sharedCounters"] = [{"name": "board", "counters": {"mem": str(rng.randint(1, 4))}}]
    holders = []
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        target = rng.choice(devices + [{"name": "gone"}])
        holder: dict = {"device": target["name"]}
        if target.get("allowMultipleAllocations") and rng.random() < 0.7:
            holder["consumed"] = {f"{G}/memory": rng.choice([4, 8, 12, 20]) * GI}
        holders.append(holder)
    return {"name": name, "inventory": inventory, "holders": holders}


def alternative(rng: random.Random) -> dict:
    alt: dict = {"deviceClassName": rng.choices(["gpu", "any", "numa", "bad", "missing"], [50, 40, 8, 1, 1])[0]}
    if rng.random() < 0.1:
        alt["allocationMode"] = "All"
    else:
        alt["count"] = rng.choice([1, 1, 1, 2, 2, 3])
    if rng.random() < 0.6:
        alt["selectors"] = [{"cel": {"expression": s}} for s in rng.sample(SELECTORS, rng.randint(1, 2))]
    if rng.random() < 0.2:
        alt["capacity"] = {"requests": {"memory": rng.choice(["4Gi", "10Gi", "20Gi"])}}
    return alt


def claim(rng: random.Random) -> dict:
    requests = []
    for r in range(rng.randint(1, 3)):
        if rng.random() < 0.7:
            requests.append({"name": f"r{r}", "exactly": alternative(rng)})
        else:
            requests.append({"name": f"r{r}", "firstAvailable": [dict(alternative(rng), name=f"a{a}")
                                                                 for a in range(rng.randint(1, 3))]})
    spec: dict = {"requests": requests}
    if rng.random() < 0.4:
        names = [r["name"] for r in requests] + [f"{r['name']}/{a['name']}" for r in requests
                                                 for a in r.get("firstAvailable", [])]
        spec["constraints"] = []
        for _ in range(rng.randint(1, 2)):
            kind = rng.choice(["matchAttribute", "distinctAttribute"])
            listed = [] if rng.random() < 0.4 else sorted(rng.sample(names, rng.randint(1, min(2, len(names)))))
            spec["constraints"].append({"requests": listed, kind: f"{G}/{rng.choice(['numa', 'numa', 'model', 'nvlink', 'numa2'])}"})
    return spec


def workload(rng: random.Random) -> dict:
    pods = [pod(rng, f"pod-{i}") for i in range(rng.randint(1, 3))]
    if rng.random() < 0.3:  # a pod alike another: one search key, charged once
        twin = copy.deepcopy(rng.choice(pods))
        twin["name"] = f"pod-{len(pods)}"
        pods.append(twin)
    return {"pods": sorted(pods, key=lambda p: p["name"]), "claim": claim(rng),
            "classes": {k: v for k, v in CLASSES.items()},
            "search_steps": rng.choice([3, 6, 20, 10_000, 10_000]), "cycle_steps": rng.choice([8, 40, 50_000, 50_000])}
