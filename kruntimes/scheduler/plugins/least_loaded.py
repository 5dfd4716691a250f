"""LeastLoaded: favour the pod left least utilised by this Run (SPEC §3.4.2).

For every resource the pod declares with capacity > 0, the projected utilisation
(usage + request) / capacity as an exact fraction; the key is (max, sum), lower is
better. Normalised by rank over the distinct keys of the feasible pods:
100 * (K-1-r) // (K-1), or 100 when all keys are equal.

The raw score is the key as four integers (max numerator, max denominator, sum
numerator, sum denominator) - exact and canonically encodable. A pod's key depends
only on its immutable view and the request shape, so it is memoised on the view:
only pods whose usage changed since the last cycle are recomputed.

Through a column (`columns`) each pod's key is kept with a small integer naming
it among the table's distinct keys, so normalising hashes and indexes ints, not
4-tuples: the distinct keys of the feasible pods are `set(ids)`, only those few
are sorted, and each pod's score is a list look-up by its id.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from math import gcd
from typing import Sequence

from kruntimes.scheduler.columns import PodTable
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.projection import Amounts
from kruntimes.scheduler.views import PodView

Key = tuple[int, int, int, int]


def load_key(view: PodView, request: dict[str, int]) -> Key:
    """(max, sum) of the utilisation fractions, each in lowest terms with a positive denominator.

    Plain integers, as `Fraction` would give them (a few times faster): a/b > c/d is
    a*d > c*b for positive denominators, and the order of the resources changes
    neither the max's value nor the exact sum."""
    used = view.used
    top_n, top_d, sum_n, sum_d = 0, 0, 0, 1
    for r, c in view.capacity.items():
        if c > 0:
            u = used.get(r, 0) + request.get(r, 0)
            if not top_d or u * top_d > top_n * c:
                top_n, top_d = u, c
            sum_n, sum_d = sum_n * c + u * sum_d, sum_d * c
    if not top_d:
        return (0, 1, 0, 1)
    g, h = gcd(top_n, top_d), gcd(sum_n, sum_d)
    return (top_n // g, top_d // g, sum_n // h, sum_d // h)


class LeastLoaded:
    name = "LeastLoaded"

    def score(self, state: CycleState, pods: Sequence[PodView]) -> list[Key]:
        memo_key, request = _memo_key(state.requests), dict(state.requests)
        return [_memoised(view, memo_key, request) for view in pods]

    def normalize(self, state: CycleState, raws: Sequence[Key]) -> list[int]:  # type: ignore[override]
        distinct = _ascending(set(raws))
        k = len(distinct)
        if k == 1:
            return [100] * len(raws)
        score = {key: 100 * (k - 1 - i) // (k - 1) for i, key in enumerate(distinct)}
        return list(map(score.__getitem__, raws))

    def column(self, requests: Amounts) -> _Column:
        return _Column(requests)


class _Column:
    """Each pod's key and the id of that key among those the table has seen; the scores."""

    __slots__ = ("memo_key", "request", "keys", "ids", "id_of", "key_of", "count", "live", "pending", "scored")

    def __init__(self, requests: Amounts) -> None:
        self.memo_key, self.request = _memo_key(requests), dict(requests)
        self._reset(0)

    def _reset(self, n: int) -> None:
        self.keys: list[Key] = [(0, 1, 0, 1)] * n
        self.ids: list[int] = [0] * n
        self.id_of: dict[Key, int] = {}  # ids are never reused for another key, only renumbered
        self.key_of: list[Key] = []  # by id
        self.count: list[int] = []  # by id: how many pods have that key now
        self.live = 0  # ids with a count
        self.pending: set[int] = set()  # positions changed since the scores were last brought up to date
        self.scored: _Scored | None = None

    def update(self, table: PodTable, changed: Sequence[int] | None) -> None:
        views = table.views
        assert views is not None
        if changed is None or len(self.key_of) > 4 * self.live + 256:
            self._reset(len(views))  # renumbered, so that `key_of` stays about as long as the live keys
            changed = range(len(views))
            fresh = True
        else:
            fresh = False
        keys, ids, count = self.keys, self.ids, self.count
        for i in changed:
            key = _memoised(views[i], self.memo_key, self.request)
            if not fresh:
                count[ids[i]] -= 1
                self.live -= not count[ids[i]]
            found = self.id_of.get(key)
            if found is None:
                found = self.id_of[key] = len(self.key_of)
                self.key_of.append(key)
                count.append(0)
            self.live += not count[found]
            count[found] += 1
            keys[i], ids[i] = key, found
        if not fresh and self.scored is not None:
            self.pending.update(changed)

    def scores(self, state: CycleState, table: PodTable,
               alive: Sequence[int] | None) -> tuple[list[Key], list[int], set[int]]:
        scored = self.scored
        if scored is None or scored.alive is not alive:
            scored = self.scored = _Scored(self, alive)
        elif self.pending:
            scored.patch(self, self.pending)
        self.pending.clear()
        return scored.raws, scored.norm, scored.values


class _Scored:
    """The raws and normalised scores of the feasible pods at `alive`, patched while `alive` stays.

    `count` holds how many of them have each key id; only when that set of ids changes
    are the few distinct keys ranked again and every score rewritten."""

    __slots__ = ("alive", "index", "raws", "ids", "count", "score", "norm", "values")

    def __init__(self, column: _Column, alive: Sequence[int] | None) -> None:
        self.alive = alive
        if alive is None:
            self.index: dict[int, int] | None = None
            self.raws, self.ids = list(column.keys), list(column.ids)
        else:
            self.index = {p: j for j, p in enumerate(alive)}
            self.raws = list(map(column.keys.__getitem__, alive))
            self.ids = list(map(column.ids.__getitem__, alive))
        self.count = Counter(self.ids)
        self._rank(column)

    def _rank(self, column: _Column) -> None:
        k = len(self.count)
        if k == 1:
            self.score = dict.fromkeys(self.count, 100)
        else:
            ordered = _ascending({column.key_of[i] for i in self.count})
            self.score = {column.id_of[key]: 100 * (k - 1 - rank) // (k - 1) for rank, key in enumerate(ordered)}
        self.norm = list(map(self.score.__getitem__, self.ids))
        self.values = set(self.score.values())

    def patch(self, column: _Column, positions: set[int]) -> None:
        count, ids, index = self.count, self.ids, self.index
        at = [j for j in (positions if index is None else map(index.get, positions)) if j is not None]
        alive = self.alive
        ranked = False
        for j in at:
            p = j if alive is None else alive[j]
            old, new = ids[j], column.ids[p]
            self.raws[j] = column.keys[p]
            if old != new:
                ids[j] = new
                count[old] -= 1
                if not count[old]:
                    del count[old]
                    ranked = True
                if new not in count:
                    ranked = True
                count[new] += 1
        if ranked:
            self._rank(column)
        else:
            for j in at:
                self.norm[j] = self.score[ids[j]]


def _memo_key(requests: Amounts) -> str:
    return repr(("LeastLoaded", requests))  # a str: hashed once, not per pod


def _memoised(view: PodView, memo_key: str, request: dict[str, int]) -> Key:
    key = view.memo.get(memo_key)
    if key is None:
        key = view.memo[memo_key] = load_key(view, request)
    return key


def _ascending(keys: set[Key]) -> list[Key]:
    """Sort exact keys. Integer true division is correctly rounded, hence monotone, so
    sorting by floats is exact whenever no two different fractions share a float;
    that is checked, and the rare collision falls back to Fraction comparison."""
    approx = {k: (k[0] / k[1], k[2] / k[3]) for k in keys}
    if len(set(approx.values())) == len(keys) and _floats_exact(keys, approx):
        return sorted(keys, key=approx.__getitem__)
    return sorted(keys, key=lambda k: (Fraction(k[0], k[1]), Fraction(k[2], k[3])))


def _floats_exact(keys: set[Key], approx: dict[Key, tuple[float, float]]) -> bool:
    # Equal float maxima must be equal exact maxima, or ties would be broken by the
    # (rounded) sums instead of the exact maxima.
    exact_max_by_float: dict[float, tuple[int, int]] = {}
    for k in keys:
        seen = exact_max_by_float.setdefault(approx[k][0], (k[0], k[1]))
        if seen != (k[0], k[1]):
            return False
    return True
