"""A second, plain implementation of SPEC §7.5 (device allocation on one pod), from the SPEC text.

It imports nothing from `kruntimes.devices`: it reads the raw annotation, claim and
class documents itself, judges selectors with the celpy oracle (`devices_oracle`),
parses quantities with the API layer's Kubernetes-client parser, and searches with
copied state (no take/undo), in the order §7.5 states. `allocate_pods` plays one cycle:
the pods in pod-name order sharing one step budget.

Readings of the SPEC text that the product must share (each a sentence of §7.5):
- pre-checks go request by request; within a request "no matching device" first;
- "any selector error on a rejected pod" overrides every other allocation reason;
- a class breaking §7.4's rules (here: a comprehension macro) is `device class invalid`.
"""

from __future__ import annotations

import json
import re

from kruntimes.api import quantity as api_quantity
from tests.model.devices_oracle import oracle_verdict

MACRO = re.compile(r"\.\s*(all|exists|exists_one|map|filter)\s*\(")


def q(text: str) -> int:
    return api_quantity.parse_count(text)


def full_name(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


class Device:
    def __init__(self, entry: dict, driver: str) -> None:
        self.entry = entry
        self.name = entry["name"]
        self.driver = entry.get("driver", driver)
        self.multi = entry.get("allowMultipleAllocations", False)
        self.attributes = {}
        for name, tagged in entry.get("attributes", {}).items():
            (tag, value), = tagged.items()
            if tag == "version":  # equal as semver: build metadata dropped
                value = value.split("+")[0]
            self.attributes[full_name(name, self.driver)] = (tag, value)
        self.capacity = {}  # name -> (value, policy dict or None)
        for name, cap in entry.get("capacity", {}).items():
            self.capacity[full_name(name, self.driver)] = (q(cap["value"]), cap.get("requestPolicy"))
        self.counters = []  # (set, counter, amount)
        for use in entry.get("consumesCounters", []):
            for counter, amount in use["counters"].items():
                self.counters.append((use["counterSet"], counter, q(amount)))


def rounded(amount: int, policy: dict | None) -> int | None:
    """Upstream's rounding of a requested amount by a request policy; None when no valid amount."""
    if policy is None:
        return amount
    if "validValues" in policy:
        for value in [q(v) for v in policy["validValues"]]:
            if value >= amount:
                return value
        return None
    if "validRange" in policy:
        low = q(policy["validRange"]["min"])
        result = max(amount, low)
        if "step" in policy["validRange"]:
            step = q(policy["validRange"]["step"])
            if (result - low) % step:
                result = low + ((result - low) // step + 1) * step
        if "max" in policy["validRange"] and result > q(policy["validRange"]["max"]):
            return None
        return result
    return amount


def takes(device: Device, alt: dict) -> dict | None:
    """What one allocation of ``alt`` consumes of a multi-allocatable device, per capacity key."""
    requested = {full_name(k, device.driver): q(v) for k, v in alt.get("capacity", {}).get("requests", {}).items()}
    result = {}
    for key, (value, policy) in device.capacity.items():
        if key in requested:
            amount = rounded(requested[key], policy)
        elif policy is not None and "default" in policy:
            amount = q(policy["default"])
        else:
            amount = value
        if amount is None or amount > value:
            return None
        result[key] = amount
    return result


def allocate_pods(pods: list[dict], claim: dict, classes: dict, search_steps: int, cycle_steps: int) -> tuple[list, int]:
    """Each pod's outcome, in the order given (pod-name order), and the cycle steps left."""
    remaining = cycle_steps
    seen: dict[str, object] = {}
    outcomes = []
    for pod in pods:
        outcome = class_problem(claim, classes)
        if outcome is None:
            key = search_key(pod, claim, classes)
            if key in seen:
                outcome = seen[key]
            else:
                outcome = allocate(pod, claim, classes, min(search_steps, remaining))
                remaining -= outcome[-1]
                seen[key] = outcome
        outcomes.append(outcome)
    return outcomes, remaining


def class_names(claim: dict) -> list[str]:
    names = []
    for request in claim["requests"]:
        for alt in alternatives(request):
            names.append(alt["deviceClassName"])
    return sorted(set(names))


def alternatives(request: dict) -> list[dict]:
    return [request["exactly"]] if "exactly" in request else request["firstAvailable"]


def class_problem(claim: dict, classes: dict) -> tuple | None:
    for name in class_names(claim):
        if name not in classes:
            return ("rejected", "device class not found", 0)
    for name in class_names(claim):
        for selector in classes[name].get("selectors", []):
            if MACRO.search(selector["cel"]["expression"]):
                return ("rejected", "device class invalid", 0)
    return None


def search_key(pod: dict, claim: dict, classes: dict) -> str:
    names = {d["name"] for d in pod["inventory"]["devices"]}
    holders = sorted(json.dumps([h["device"], None if h.get("consumed") is None else sorted(h["consumed"].items())])
                     for h in pod["holders"] if h["device"] in names)
    used = {n: classes[n] for n in class_names(claim)}
    return json.dumps([pod["inventory"], holders, claim, used], sort_keys=True)


def allocate(pod: dict, claim: dict, classes: dict, limit: int) -> tuple:
    driver = pod["inventory"]["driver"]
    devices = [Device(e, driver) for e in pod["inventory"]["devices"]]
    totals = {}
    for counter_set in pod["inventory"].get("sharedCounters", []):
        for counter, amount in counter_set["counters"].items():
            totals[(counter_set["name"], counter)] = q(amount)
    by_name = {d.name: d for d in devices}

    # Usage: holders of devices the pod has (§7.6).
    held = set()
    used: dict[str, dict[str, int]] = {}
    for holder in pod["holders"]:
        device = by_name.get(holder["device"])
        if device is None:
            continue
        held.add(device.name)
        whole = holder.get("consumed") is None or not device.multi
        used.setdefault(device.name, {})
        for key, (value, _) in device.capacity.items():
            add = value if whole else holder["consumed"].get(key, 0)
            used[device.name][key] = used[device.name].get(key, 0) + add
        if whole:
            used[device.name]["*whole*"] = 1
    counters_used: dict = {}
    for name in held:
        for counter_set, counter, amount in by_name[name].counters:
            counters_used[(counter_set, counter)] = counters_used.get((counter_set, counter), 0) + amount

    # Step 1: candidates.
    error = False
    candidates = []
    for request in claim["requests"]:
        per_alt = []
        for alt in alternatives(request):
            selectors = [s["cel"]["expression"] for s in classes[alt["deviceClassName"]].get("selectors", [])]
            selectors += [s["cel"]["expression"] for s in alt.get("selectors", [])]
            found = []
            for device in devices:
                ok = True
                for expression in selectors:
                    verdict = oracle_verdict(expression, device.entry, driver)
                    if verdict == "error":
                        error = True
                    if verdict != "match":
                        ok = False
                        break
                if ok and has_capacity(device, alt):
                    found.append(device)
            per_alt.append(found)
        candidates.append(per_alt)

    def free(device, alt, state):  # type: ignore[no-untyped-def]
        taken, consumed, counters = state
        if not device.multi:
            if device.name in held or device.name in taken:
                return False
        else:
            amounts = takes(device, alt)
            if amounts is None or "*whole*" in used.get(device.name, {}):
                return False
            for key, amount in amounts.items():
                total = used.get(device.name, {}).get(key, 0) + consumed.get((device.name, key), 0) + amount
                if total > device.capacity[key][0]:
                    return False
        if device.name not in held and device.name not in taken:
            for counter_set, counter, amount in device.counters:
                now = counters_used.get((counter_set, counter), 0) + counters.get((counter_set, counter), 0)
                if now + amount > totals[(counter_set, counter)]:
                    return False
        return True

    empty = (frozenset(), {}, {})

    # Step 2: pre-checks.
    for request, per_alt in zip(claim["requests"], candidates):
        if all(len(found) == 0 for found in per_alt):
            return ("rejected", "device selector error" if error else "no matching device", 0)
        enough = False
        for alt, found in zip(alternatives(request), per_alt):
            free_alone = [d for d in found if free(d, alt, empty)]
            if alt.get("allocationMode") == "All":
                enough = enough or (1 <= len(found) <= 32 and len(free_alone) == len(found))
            else:
                enough = enough or len(free_alone) >= alt.get("count", 1)
        if not enough:
            return ("rejected", "device selector error" if error else "insufficient devices", 0)

    # Step 3: search, depth first, each device tried one step.
    steps = 0
    out_of_steps = False

    def constraints_accept(device, request_name, alt_name, chosen):  # type: ignore[no-untyped-def]
        for i, constraint in enumerate(claim.get("constraints", [])):
            names = constraint.get("requests", [])
            if names and request_name not in names and f"{request_name}/{alt_name}" not in names:
                continue
            attribute = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
            value = device.attributes.get(attribute)
            if value is None:
                return False
            earlier = [v for (c, v) in chosen if c == i]
            if "matchAttribute" in constraint and earlier and earlier[0] != value:
                return False
            if "distinctAttribute" in constraint and value in earlier:
                return False
        return True

    def take(device, request, alt, alt_name, state, chosen, results):  # type: ignore[no-untyped-def]
        taken, consumed, counters = state
        consumed = dict(consumed)
        counters = dict(counters)
        amounts = takes(device, alt) if device.multi else None
        for key, amount in (amounts or {}).items():
            consumed[(device.name, key)] = consumed.get((device.name, key), 0) + amount
        if device.name not in held and device.name not in taken:
            for counter_set, counter, amount in device.counters:
                counters[(counter_set, counter)] = counters.get((counter_set, counter), 0) + amount
        chosen = list(chosen)
        for i, constraint in enumerate(claim.get("constraints", [])):
            names = constraint.get("requests", [])
            if not names or request["name"] in names or f"{request['name']}/{alt_name}" in names:
                attribute = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
                chosen.append((i, device.attributes[attribute]))
        label = request["name"] if "exactly" in request else f"{request['name']}/{alt_name}"
        results = results + [(label, device.name, None if amounts is None else sorted(amounts.items()))]
        return (taken | {device.name}, consumed, counters), chosen, results

    def attempt(device, request, alt, alt_name, state, chosen, results):  # type: ignore[no-untyped-def]
        nonlocal steps, out_of_steps
        if steps >= limit:
            out_of_steps = True
            return None
        steps += 1
        if free(device, alt, state) and constraints_accept(device, request["name"], alt_name, chosen):
            return take(device, request, alt, alt_name, state, chosen, results)
        return None

    def solve(r, state, chosen, results, preference):  # type: ignore[no-untyped-def]
        if r == len(claim["requests"]):
            return results, preference
        request = claim["requests"][r]
        for a, alt in enumerate(alternatives(request)):
            alt_name = alt.get("name")
            found = candidates[r][a]
            pref = preference - (a if "firstAvailable" in request else 0)
            if alt.get("allocationMode") == "All":
                if not 1 <= len(found) <= 32:
                    continue
                s, c, res = state, chosen, results
                ok = True
                for device in found:
                    nxt = attempt(device, request, alt, alt_name, s, c, res)
                    if nxt is None:
                        ok = False
                        break
                    s, c, res = nxt
                if ok:
                    answer = solve(r + 1, s, c, res, pref)
                    if answer is not None:
                        return answer
            else:
                answer = positions(r, a, request, alt, alt_name, found, alt.get("count", 1), 0, 0, state, chosen,
                                   results, pref)
                if answer is not None:
                    return answer
            if out_of_steps:
                return None
        return None

    def positions(r, a, request, alt, alt_name, found, k, j, start, state, chosen, results, pref):  # type: ignore[no-untyped-def]
        if j == k:
            return solve(r + 1, state, chosen, results, pref)
        for p in range(start, len(found)):
            if len(found) - p < k - j:
                return None
            nxt = attempt(found[p], request, alt, alt_name, state, chosen, results)
            if nxt is not None:
                answer = positions(r, a, request, alt, alt_name, found, k, j + 1, p + 1, *nxt, pref)
                if answer is not None:
                    return answer
            if out_of_steps:
                return None
        return None

    answer = solve(0, empty, [], [], 0)
    if answer is not None:
        return ("allocated", answer[0], answer[1], steps)
    if error:
        return ("rejected", "device selector error", steps)
    if out_of_steps:
        return ("rejected", "device search limit", steps)
    if claim.get("constraints"):
        return ("rejected", "device constraints unsatisfiable", steps)
    return ("rejected", "insufficient devices", steps)


def has_capacity(device: Device, alt: dict) -> bool:
    for key, amount in alt.get("capacity", {}).get("requests", {}).items():
        name = full_name(key, device.driver)
        if name not in device.capacity:
            return False
        if not device.multi and device.capacity[name][0] < q(amount):
            return False
    if device.multi and takes(device, alt) is None:
        return False
    return True
