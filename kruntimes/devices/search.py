"""One pod's depth-first device search (SPEC §7.5 step 3), and the try rule Reserve re-checks (§7.6).

`allocation` decides what is searched and charges the budget; this module holds the
search's own state: the pod's usage plus what the search has taken so far, the one
try rule (free given usage and this search, and accepted by every constraint covering
the request), the walk over requests, alternatives and candidate positions with its
one prune, and the pre-check of step 2 (enough candidates free on their own).
"""

from __future__ import annotations

from dataclasses import dataclass

from kruntimes.devices import claims, inventory, usage

MAX_ALL = 32  # an All alternative takes 1..MAX_ALL candidates


@dataclass(frozen=True)
class Result:
    request: str  # "gpu", or "nic/fast" for a firstAvailable alternative
    device: str
    consumed: tuple[tuple[str, int], ...] | None  # multi-allocatable devices only


def has_capacity(device: inventory.Device, alt: claims.Alternative) -> bool:
    """Step 1's capacity test: exclusive, value ≥ request; multi-allocatable, the rounded amount fits."""
    for key, request in alt.capacity:
        cap = device.capacity_of(inventory.qualify(key, device.driver))
        if cap is None or (not device.allow_multiple_allocations and cap.value < request):
            return False
    return not device.allow_multiple_allocations or usage.consumption(device, alt) is not None


class Search:
    """One pod's search state: usage plus what this search has taken so far."""

    def __init__(self, inv: inventory.Inventory, before: usage.Usage, claim: claims.DeviceClaim, limit: int) -> None:
        self.inv, self.usage, self.claim, self.limit = inv, before, claim, limit
        self.sets = inv.counters()
        self.taken: dict[str, int] = {}  # device → times taken in this search
        self.consumed: dict[str, dict[str, int]] = {}
        self.counters: dict[tuple[str, str], int] = {}
        self.chosen: dict[int, list[inventory.AttributeValue]] = {}  # constraint index → values
        self.results: list[Result] = []
        self.preference = 0
        self.steps = 0
        self.exhausted = False

    def free(self, device: inventory.Device, alt: claims.Alternative, alone: bool = False) -> bool:
        name = device.name
        in_search = 0 if alone else self.taken.get(name, 0)
        if not device.allow_multiple_allocations:
            if name in self.usage.held or in_search:
                return False
        else:
            amounts = usage.consumption(device, alt)
            if amounts is None:
                return False
            used = self.usage.consumed.get(name, {})
            mine = {} if alone else self.consumed.get(name, {})
            if "\0whole" in used:
                return False
            for key, amount in amounts:
                if used.get(key, 0) + mine.get(key, 0) + amount > device.capacity_of(key).value:  # type: ignore[union-attr]
                    return False
        if name not in self.usage.held and not in_search:  # first use: its counters must fit
            for use in device.consumes_counters:
                for counter, amount in use.counters:
                    key = (use.counter_set, counter)
                    used = self.usage.counters.get(key, 0) + (0 if alone else self.counters.get(key, 0))
                    if used + amount > self.sets[use.counter_set][counter]:
                        return False
        return True

    def accepts(self, device: inventory.Device, request: str, alt: str | None) -> bool:
        for i, constraint in enumerate(self.claim.constraints):
            if not constraint.covers(request, alt):
                continue
            value = device.attribute(constraint.attribute)
            if value is None:
                return False
            typed = (type(value), value)
            earlier = [(type(v), v) for v in self.chosen.get(i, [])]
            if constraint.kind == "match" and earlier and earlier[0] != typed:
                return False
            if constraint.kind == "distinct" and typed in earlier:
                return False
        return True

    def take(self, device: inventory.Device, request: claims.Request, alt: claims.Alternative) -> None:
        name = device.name
        first = name not in self.usage.held and not self.taken.get(name)
        self.taken[name] = self.taken.get(name, 0) + 1
        amounts = usage.consumption(device, alt) if device.allow_multiple_allocations else None
        mine = self.consumed.setdefault(name, {})
        for key, amount in amounts or ():
            mine[key] = mine.get(key, 0) + amount
        if first:
            usage.charge(self.counters, device)
        for i, constraint in enumerate(self.claim.constraints):
            if constraint.covers(request.name, alt.name):
                self.chosen.setdefault(i, []).append(device.attribute(constraint.attribute))  # type: ignore[arg-type]
        label = f"{request.name}/{alt.name}" if request.first_available else request.name
        self.results.append(Result(label, name, amounts))

    def undo(self, device: inventory.Device, request: claims.Request, alt: claims.Alternative) -> None:
        name = device.name
        self.results.pop()
        for i, constraint in enumerate(self.claim.constraints):
            if constraint.covers(request.name, alt.name):
                self.chosen[i].pop()
        mine = self.consumed[name]
        for key, amount in (usage.consumption(device, alt) if device.allow_multiple_allocations else None) or ():
            mine[key] -= amount
        self.taken[name] -= 1
        if not self.taken[name] and name not in self.usage.held:
            usage.charge(self.counters, device, -1)

    def tries(self, device: inventory.Device, request: claims.Request, alt: claims.Alternative) -> bool:
        """One step: the device is taken if free and accepted (the caller undoes it)."""
        if self.steps >= self.limit:
            self.exhausted = True
            return False
        self.steps += 1
        if self.free(device, alt) and self.accepts(device, request.name, alt.name):
            self.take(device, request, alt)
            return True
        return False

    def requests_from(self, r: int, candidates: list[list[list[inventory.Device]]]) -> bool:
        if r == len(self.claim.requests):
            return True
        request = self.claim.requests[r]
        for a, alt in enumerate(request.alternatives):
            self.preference -= a if request.first_available else 0
            if self.slots(r, a, 0, 0, candidates):
                return True
            self.preference += a if request.first_available else 0
            if self.exhausted:
                return False
        return False

    def slots(self, r: int, a: int, j: int, start: int, candidates: list[list[list[inventory.Device]]]) -> bool:
        request, alt = self.claim.requests[r], self.claim.requests[r].alternatives[a]
        cands = candidates[r][a]
        if alt.mode == "All":
            if not 1 <= len(cands) <= MAX_ALL:
                return False
            done = 0
            for device in cands:
                if not self.tries(device, request, alt):
                    break
                done += 1
            ok = done == len(cands) and self.requests_from(r + 1, candidates)
            if not ok:
                for device in reversed(cands[:done]):
                    self.undo(device, request, alt)
            return ok
        k = alt.count
        if j == k:
            return self.requests_from(r + 1, candidates)
        for p in range(start, len(cands)):
            if len(cands) - p < k - j:  # the one prune: too few positions left
                return False
            device = cands[p]
            if self.tries(device, request, alt):
                if self.slots(r, a, j + 1, p + 1, candidates):
                    return True
                self.undo(device, request, alt)
            if self.exhausted:
                return False
        return False


def enough_alone(search: Search, alt: claims.Alternative, cands: list[inventory.Device]) -> bool:
    """Step 2's pre-check: enough of ``cands`` free on their own (All: every one, 1..MAX_ALL of them)."""
    free = sum(1 for d in cands if search.free(d, alt, alone=True))
    if alt.mode == "All":
        return 1 <= len(cands) <= MAX_ALL and free == len(cands)
    return free >= alt.count
