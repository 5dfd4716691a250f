"""CycleOutcome: the complete result of one scheduling cycle, as a value.

Every pod's verdict (the Filter plugin and reason that rejected it, or feasible),
every Score plugin's raw and normalised score per feasible pod, the weighted
totals and the choice. The journal records a bounded summary plus a digest of
the canonical encoding of all of it; replay recomputes the outcome and compares
both, so "identical" means every pod's verdict and every score, not just the pod.
"""

from __future__ import annotations

import heapq
import operator
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any, Callable, NamedTuple, Sequence

from kruntimes import canonical
from kruntimes.scheduler.config import PLANNER_VERSION

SCHEDULED = "scheduled"
UNSCHEDULABLE = "unschedulable"
INVALID = "invalid"
ERROR = "error"

#: A raw score: an int, or a tuple of ints for plugins whose raw value is a vector
#: (LeastLoaded's exact utilisation fractions). Never a float.
Raw = int | tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PluginScores:
    plugin: str
    weight: int
    raw: tuple[Raw, ...]        # aligned with CycleOutcome.feasible
    normalized: tuple[int, ...]  # aligned with CycleOutcome.feasible, each in 0..100


class Candidate(NamedTuple):
    pod: str
    total: int
    scores: tuple[tuple[str, Raw, int], ...]  # (plugin, raw, normalised)


#: At most this many names per reason in a Pending message: bounded whatever the Run asks.
MAX_NAMES = 3


@dataclass(frozen=True, slots=True)
class Explanation:
    """What a Filter plugin adds to a Pending message (``FilterExtensions``): a few names per
    reason, a note, and whether only a pod or capacity change can help the Run."""

    named: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (reason, sorted names)
    note: str | None = None
    waits_for_pods: bool = False


@dataclass(frozen=True, slots=True)
class DeviceWork:
    """A device cycle's work: steps charged, each feasible pod's `status.devices` results, the chosen ones."""

    steps: int
    allocations: tuple[tuple[str, Any], ...]  # (pod, results as JSON values), aligned with CycleOutcome.feasible
    chosen: Any = None  # the chosen pod's results (JSON values), None when nothing was chosen

    def encode(self) -> dict[str, Any]:
        return {"steps": self.steps, "allocations": [[pod, results] for pod, results in self.allocations]}


@dataclass(frozen=True)
class CycleOutcome:
    namespace: str
    run_name: str
    run_uid: str
    snapshot_lsn: int
    now: datetime
    config_digest: str
    status: str
    pods: tuple[str, ...] = ()
    rejections: tuple[tuple[str, str] | None, ...] = ()  # aligned with pods
    feasible: tuple[str, ...] = ()
    scores: tuple[PluginScores, ...] = ()
    totals: tuple[int, ...] = ()  # aligned with feasible
    chosen: str | None = None
    chosen_uid: str | None = None
    message: str | None = None
    # Not decisions, so outside `encode` and the digest: the planner version that decided
    # (recorded on the cycle), and that no pod could ever fit the Run as the pods are
    # (the message says so; the queue then waits for pod or capacity events only).
    planner_version: str = PLANNER_VERSION
    waits_for_pods: bool = False
    # SPEC §7.8, for a Run with a device claim only (`device_outcome.attach`): the steps the cycle's
    # searches were charged and each feasible pod's allocation; inside the digest, so replay proves
    # every pod's devices and steps, and absent otherwise, so device-free digests never changed.
    devices: DeviceWork | None = None

    def rejection_counts(self) -> tuple[tuple[str, str, int], ...]:
        """(plugin, reason, count), sorted by plugin then reason."""
        if not any(self.rejections):  # every pod feasible, as most cycles of a busy cluster: no dict at all
            return ()
        counts = Counter(self.rejections)  # counted in C, the feasible pods' None too
        counts.pop(None, None)
        return tuple((p, r, n) for (p, r), n in sorted(counts.items()))  # type: ignore[misc]

    def top(self, k: int) -> tuple[Candidate, ...]:
        """The k best feasible pods by total, ties by name: the recorded candidates."""
        totals = self.totals
        if k <= 0 or not totals:
            return ()
        # Only a pod whose total reaches the k-th highest total (the floor) can be among
        # the k, so only those are ordered: two sorts with C-level keys, by name and stably
        # by total, highest first - the same order, ties included, as sorting all. Those
        # above the floor are fewer than k, and their totals are among the k highest; of
        # those at it - in a cluster of alike pods, nearly all - only the first few by name
        # are needed, which, when the pods come in name order (a snapshot's do), are the
        # first few in pod order. Both are found by `tuple.index` scans in C that stop there.
        names = self.feasible
        highest = heapq.nlargest(k, totals)
        floor = highest[-1]
        if _in_name_order(names):
            order = [i for total in sorted(set(highest), reverse=True) if total != floor
                     for i in _first(totals, total, highest.count(total))]
            order += _first(totals, floor, k - len(order))
        else:
            order = [i for i, total in enumerate(totals) if total >= floor]
        order.sort(key=names.__getitem__)
        order.sort(key=totals.__getitem__, reverse=True)
        scores = self.scores
        return tuple([Candidate(names[i], totals[i], tuple([(s.plugin, s.raw[i], s.normalized[i]) for s in scores]))
                      for i in order[:k]])

    @property
    def chosen_total(self) -> int | None:
        if self.chosen is None:
            return None
        return self.totals[self.feasible.index(self.chosen)]

    def encode(self, vector: Callable[[Any], Any] = canonical.unchanged) -> dict[str, Any]:
        """The FULL outcome for canonical encoding (O(pods) when encoded).

        Sequences stay tuples: the canonical encoder writes them as JSON arrays, so
        the digest needs no per-pod conversion on the hot path; `canonical.plain`
        turns this into lists where a JSON-exact value is needed. Each per-pod vector
        goes through ``vector`` (`canonical.digest_of`'s kept encodings)."""
        return {
            "namespace": self.namespace, "run_name": self.run_name, "run_uid": self.run_uid,
            "snapshot_lsn": self.snapshot_lsn, "now": self.now.isoformat(),
            "config_digest": self.config_digest, "status": self.status,
            "pods": vector(self.pods),
            "rejections": vector(self.rejections),
            "feasible": vector(self.feasible),
            "scores": [{"plugin": s.plugin, "weight": s.weight, "raw": vector(s.raw), "normalized": vector(s.normalized)}
                       for s in self.scores],
            "totals": vector(self.totals), "chosen": self.chosen, "chosen_uid": self.chosen_uid,
            "message": self.message,
            **({"devices": self.devices.encode()} if self.devices is not None else {}),
        }

    def digest(self) -> str:
        """SHA-256 of the canonical encoding of the full outcome (of ``encode()``)."""
        return canonical.digest_of(self.encode)


_ordered: tuple[Any, bool] = (None, False)  # the last names tuple asked about (kept alive: its id stays its own)


def _in_name_order(names: tuple[str, ...]) -> bool:
    """Whether `names` never decreases; remembered for the last tuple (the same one, cycle after cycle).
    The tuple and its answer are read and replaced as one object, so two threads never mix them up."""
    global _ordered
    kept = _ordered
    if kept[0] is not names:
        kept = _ordered = (names, all(map(operator.le, names, islice(names, 1, None))))
    return kept[1]


def _first(values: tuple[Any, ...], value: Any, n: int) -> list[int]:
    """The positions of the first `n` elements of `values` equal to `value` (fewer if there are not n)."""
    found: list[int] = []
    at = 0
    while len(found) < n:
        try:
            at = values.index(value, at)
        except ValueError:
            break
        found.append(at)
        at += 1
    return found


def pending_message(evaluated: int, rejections: tuple[tuple[str, str] | None, ...],
                    named: Sequence[tuple[str, tuple[str, ...]]] = (), notes: Sequence[str] = ()) -> str:
    """`0/5 runtime pods available: 3 insufficient capacity (example.com/gpu), 2 runtimed stale`.

    Built from counts, the plugins' bounded reasons and, per reason, at most
    ``MAX_NAMES`` names a plugin explained it with (resource names: SPEC §2.2 bounds
    them), then its notes: it never names a pod, a selector or a Run, so it cannot leak
    user data and its length is bounded.
    """
    counts = Counter(r[1] for r in rejections if r is not None)
    if evaluated == 0:
        return "0/0 runtime pods available: no runtime pods for this runtime"
    names = dict(named)
    parts = ", ".join(f"{n} {reason}{_names(names.get(reason, ()))}"
                      for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return "; ".join([f"0/{evaluated} runtime pods available: {parts}", *notes])


def _names(names: tuple[str, ...]) -> str:
    if not names:
        return ""
    more = len(names) - MAX_NAMES
    return f" ({', '.join(names[:MAX_NAMES])}{f' and {more} more' if more > 0 else ''})"
