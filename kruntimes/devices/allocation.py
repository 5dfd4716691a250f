"""Deterministic first-fit allocation of a Run's device claim on one Runtime Pod (SPEC §7.5).

A pure function of (inventory, device usage, claim, classes, engine, budget): the
same inputs give the same devices, the same step count and the same reason on every
machine and in replay, because work is bounded by counted steps, never by a clock.
`prepare` does the per-cycle part once (PreFilter), `on_pod` the per-pod part.

1. Candidates of an alternative: the pod's devices in inventory order whose class
   selectors then request selectors hold (the first false or error stops) and that
   have every requested capacity (exclusive: value ≥ request; multi-allocatable: the
   policy-rounded amount ≤ value).
2. Pre-checks, request by request in order: no alternative with a candidate →
   `no matching device`; no alternative with `count` candidates that are free on
   their own (All: every candidate free, 1..32 of them) → `insufficient devices`.
3. Search: requests, then alternatives in order; an ExactCount alternative takes
   candidate positions p1 < … < pk, stopping before position p for slot j when
   `len − p < k − j`; an All alternative takes every candidate. Each device tried is
   one step; a try succeeds if the device is free (given usage and this search) and
   every constraint covering the request accepts it. Depth first; the first solution wins.
4. Budget: at most `SEARCH_STEPS` per search and `CYCLE_STEPS` per cycle, charged once
   per distinct search key (`CycleBudget`). A search that runs out: `device search
   limit`; one that fails: `device constraints unsatisfiable` with constraints, else
   `insufficient devices`. Any selector error on a pod whose allocation fails turns
   the reason into `device selector error`, whatever it was.
5. Consumption (`usage`): an exclusive device is taken whole; a multi-allocatable one
   per capacity key by the rounded request (unrequested: the policy's default, else
   the whole value); a device's counters are charged once while it has any holder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from kruntimes.devices import cel_engine, claims, inventory, search as search_mod, usage

Holders = tuple[usage.Holder, ...] | list[usage.Holder]

SEARCH_STEPS = 10_000
CYCLE_STEPS = 50_000

Result = search_mod.Result  # one device given to one request (or alternative); defined with the search
MAX_ALL = search_mod.MAX_ALL

# The Filter's reasons (§7.6); the first two are decided before allocation, from the pod's annotation.
NO_INVENTORY = "no device inventory"
INVALID_INVENTORY = "invalid device inventory"
CLASS_NOT_FOUND = "device class not found"
CLASS_INVALID = "device class invalid"
NO_MATCHING_DEVICE = "no matching device"
SELECTOR_ERROR = "device selector error"
INSUFFICIENT = "insufficient devices"
UNSATISFIABLE = "device constraints unsatisfiable"
SEARCH_LIMIT = "device search limit"


@dataclass(frozen=True)
class Allocation:
    results: tuple[Result, ...]
    steps: int
    preference: int  # DevicePreference raw: −Σ chosen firstAvailable index (§7.6)


@dataclass(frozen=True)
class Rejection:
    reason: str
    steps: int


def preference_scores(raws: list[int]) -> list[int]:
    """DevicePreference normalised across the feasible pods: `(raw−min)*100 // (max−min)`, 0 if all equal."""
    if not raws:
        return []
    low, high = min(raws), max(raws)
    if low == high:
        return [0] * len(raws)
    return [(raw - low) * 100 // (high - low) for raw in raws]


@dataclass
class CycleBudget:
    """Steps left in one cycle; a search key is charged the first time it is searched.

    ``search_steps`` bounds one search; both budgets are scheduler configuration.
    """

    remaining: int = CYCLE_STEPS
    search_steps: int = SEARCH_STEPS
    seen: dict[tuple, Allocation | Rejection] = field(default_factory=dict)


class SearchMemo:
    """Searches remembered across cycles (§7.5 step 4: a hit is charged its recorded steps).

    A search is a pure function of its key and its step limit, so a remembered one
    answers for any limit it decides: one that ended after s steps (found or failed)
    is the same under any limit ≥ s and runs out at the limit below s; one that ran
    out at L runs out at any limit ≤ L. Anything else is searched again. Replay gets
    the same outcomes and charges with or without the memo.
    """

    LIMIT = 1 << 16

    def __init__(self) -> None:
        self._entries: dict[tuple, tuple[Allocation | Rejection, bool, bool]] = {}
        self.hits = 0  # device_searches_total{result="memoised"} (§7.8)
        self.generation = 0  # moves when entries are forgotten: what a caller kept from a recall may not hold

    def recall(self, key: tuple, limit: int) -> Allocation | Rejection | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        outcome, exhausted, errors = entry
        if (not exhausted and outcome.steps <= limit) or (exhausted and limit == outcome.steps):
            self.hits += 1
            return outcome
        if limit < outcome.steps:
            self.hits += 1
            return Rejection(SELECTOR_ERROR if errors else SEARCH_LIMIT, limit)
        return None

    def remember(self, key: tuple, outcome: Allocation | Rejection, exhausted: bool, errors: bool) -> None:
        if len(self._entries) >= self.LIMIT:
            self._entries.clear()  # changes no outcome: each is recomputed alike
            self.generation += 1
        self._entries[key] = (outcome, exhausted, errors)


@dataclass(frozen=True)
class Prepared:
    """A claim made ready once per cycle (PreFilter): its classes' selectors compiled and digested."""

    claim: claims.DeviceClaim
    class_selectors: dict[str, list[cel_engine.Selector]]
    request_selectors: tuple[tuple[tuple[cel_engine.Selector, ...], ...], ...]  # per request, per alternative
    class_digests: tuple[str, ...]


def prepare(claim: claims.DeviceClaim, classes: Mapping[str, claims.DeviceClass | claims.InvalidDeviceClass],
            engine: cel_engine.Engine) -> Prepared | Rejection:
    """The claim ready for every pod of a cycle, or the class reason every pod gets (§7.2).

    The Run's own selectors must compile (PreFilter fails the Run otherwise, §7.4):
    `cel_engine.SelectorInvalid` is raised for them, not turned into a pod reason.
    """
    names = sorted({a.class_name for r in claim.requests for a in r.alternatives})
    if any(n not in classes for n in names):
        return Rejection(CLASS_NOT_FOUND, 0)
    compiled: dict[str, list[cel_engine.Selector]] = {}
    digests = []
    for n in names:
        cls = classes[n]
        if isinstance(cls, claims.InvalidDeviceClass):
            return Rejection(CLASS_INVALID, 0)
        try:
            compiled[n] = [engine.compile(s) for s in cls.selectors]
        except cel_engine.SelectorInvalid:
            return Rejection(CLASS_INVALID, 0)
        digests.append(cls.digest)
    own = tuple(tuple(tuple(engine.compile(s) for s in a.selectors) for a in r.alternatives) for r in claim.requests)
    return Prepared(claim, compiled, own, tuple(digests))


def allocate(inv: inventory.Inventory, holders: Holders, claim: claims.DeviceClaim,
             classes: Mapping[str, claims.DeviceClass | claims.InvalidDeviceClass], engine: cel_engine.Engine,
             budget: CycleBudget, memo: SearchMemo | None = None) -> Allocation | Rejection:
    """Allocate ``claim`` on one pod (§7.5): `prepare` then `on_pod`, for callers with one pod at a time."""
    prepared = prepare(claim, classes, engine)
    if isinstance(prepared, Rejection):
        return prepared
    return on_pod(prepared, inv, holders, engine, budget, memo)


def on_pod(prepared: Prepared, inv: inventory.Inventory, holders: Holders, engine: cel_engine.Engine,
           budget: CycleBudget, memo: SearchMemo | None = None, fingerprint: tuple | None = None) -> Allocation | Rejection:
    """Allocate a prepared claim on one pod, charging ``budget``; pods go in pod-name order.

    ``fingerprint`` is `usage.fingerprint(inv, holders)` when the caller keeps it per pod.
    """
    if fingerprint is None:
        fingerprint = usage.fingerprint(inv, holders)
    key = search_key(prepared, inv, fingerprint)
    known = budget.seen.get(key)
    if known is not None:
        return known
    limit = min(budget.search_steps, budget.remaining)
    outcome = memo.recall(key, limit) if memo is not None else None
    if outcome is None:
        outcome, exhausted, errors = _allocate(inv, usage.Usage(inv, holders), prepared, engine, limit)
        if memo is not None:
            memo.remember(key, outcome, exhausted, errors)
    budget.remaining -= outcome.steps
    budget.seen[key] = outcome
    return outcome


def search_key(prepared: Prepared, inv: inventory.Inventory, fingerprint: tuple) -> tuple:  # type: ignore[type-arg]
    """What a search is a pure function of (besides its step limit): the key of `CycleBudget.seen` and the memo."""
    return (inv.digest, fingerprint, prepared.claim.digest, prepared.class_digests)


def _allocate(inv: inventory.Inventory, before: usage.Usage, prepared: Prepared, engine: cel_engine.Engine,
              limit: int) -> tuple[Allocation | Rejection, bool, bool]:
    """The outcome, whether the search ran out of steps, and whether a selector erred."""
    claim = prepared.claim
    errors = False
    candidates: list[list[list[inventory.Device]]] = []
    for request, own in zip(claim.requests, prepared.request_selectors):
        per_alt = []
        for alt, alt_own in zip(request.alternatives, own):
            selectors = prepared.class_selectors[alt.class_name] + list(alt_own)
            cands = []
            for device in inv.devices:
                verdict: cel_engine.Verdict = "match"
                for selector in selectors:
                    verdict = engine.verdict(selector, device)
                    if verdict != "match":
                        break
                errors = errors or verdict == "error"
                if verdict == "match" and search_mod.has_capacity(device, alt):
                    cands.append(device)
            per_alt.append(cands)
        candidates.append(per_alt)
    search = search_mod.Search(inv, before, claim, limit)
    for request, per_alt in zip(claim.requests, candidates):
        if not any(per_alt):
            return Rejection(SELECTOR_ERROR if errors else NO_MATCHING_DEVICE, 0), False, errors
        if not any(search_mod.enough_alone(search, alt, cands) for alt, cands in zip(request.alternatives, per_alt)):
            return Rejection(SELECTOR_ERROR if errors else INSUFFICIENT, 0), False, errors
    if search.requests_from(0, candidates):
        return Allocation(tuple(search.results), search.steps, search.preference), False, errors
    if errors:
        reason = SELECTOR_ERROR
    elif search.exhausted:
        reason = SEARCH_LIMIT
    else:
        reason = UNSATISFIABLE if claim.constraints else INSUFFICIENT
    return Rejection(reason, search.steps), search.exhausted, errors


def recheck(inv: inventory.Inventory, holders: Holders, claim: claims.DeviceClaim,
            results: tuple[Result, ...]) -> bool:
    """Whether ``results`` still pass step 3's try rule, in order, given ``holders`` (Reserve, §7.6).

    Reserve re-checks under the cache lock with the usage of that moment: each result's
    device must still be in the inventory, free and accepted by the constraints, as
    the search that found it tried it. No selector is evaluated and no step counted.
    """
    search = search_mod.Search(inv, usage.Usage(inv, holders), claim, limit=len(results))
    alternatives = {(f"{r.name}/{a.name}" if r.first_available else r.name): (r, a)
                    for r in claim.requests for a in r.alternatives}
    for result in results:
        device = inv.device(result.device)
        if device is None or result.request not in alternatives:
            return False
        request, alt = alternatives[result.request]
        if not search.tries(device, request, alt):
            return False
    return True
