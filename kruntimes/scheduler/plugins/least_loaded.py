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

from fractions import Fraction
from typing import Sequence

from kruntimes.scheduler.columns import PodTable
from kruntimes.scheduler.framework import CycleState
from kruntimes.scheduler.projection import Amounts
from kruntimes.scheduler.views import PodView

Key = tuple[int, int, int, int]


def load_key(view: PodView, request: dict[str, int]) -> Key:
    fractions = [Fraction(view.used.get(r, 0) + request.get(r, 0), c)
                 for r, c in sorted(view.capacity.items()) if c > 0]
    if not fractions:
        return (0, 1, 0, 1)
    top, total = max(fractions), sum(fractions, Fraction(0))
    return (top.numerator, top.denominator, total.numerator, total.denominator)


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
    """Each pod's key, and an id per distinct key (counted, so unused ids are reused)."""

    __slots__ = ("memo_key", "request", "keys", "ids", "id_of", "key_of", "count", "free")

    def __init__(self, requests: Amounts) -> None:
        self.memo_key, self.request = _memo_key(requests), dict(requests)
        self._reset(0)

    def _reset(self, n: int) -> None:
        self.keys: list[Key] = [(0, 1, 0, 1)] * n
        self.ids: list[int] = [-1] * n
        self.id_of: dict[Key, int] = {}
        self.key_of: list[Key | None] = []  # by id; None: free
        self.count: list[int] = []  # by id: how many pods have that key
        self.free: list[int] = []

    def update(self, table: PodTable, changed: Sequence[int] | None) -> None:
        views = table.views
        assert views is not None
        if changed is None:
            self._reset(len(views))
        for i in range(len(views)) if changed is None else changed:
            key = _memoised(views[i], self.memo_key, self.request)
            if changed is not None:
                self._release(self.ids[i])
            self.keys[i], self.ids[i] = key, self._hold(key)

    def _hold(self, key: Key) -> int:
        found = self.id_of.get(key)
        if found is None:
            found = self.free.pop() if self.free else len(self.key_of)
            if found == len(self.key_of):
                self.key_of.append(key)
                self.count.append(0)
            self.key_of[found], self.id_of[key] = key, found
        self.count[found] += 1
        return found

    def _release(self, found: int) -> None:
        self.count[found] -= 1
        if not self.count[found]:
            del self.id_of[self.key_of[found]]  # type: ignore[index]
            self.key_of[found] = None
            self.free.append(found)

    def scores(self, state: CycleState, table: PodTable, alive: Sequence[int] | None) -> tuple[list[Key], list[int]]:
        if alive is None:
            raws, ids = self.keys, self.ids
        else:
            raws, ids = list(map(self.keys.__getitem__, alive)), list(map(self.ids.__getitem__, alive))
        distinct = set(ids)
        k = len(distinct)
        if k == 1:
            return raws, [100] * len(raws)
        score = [0] * len(self.key_of)
        for rank, key in enumerate(_ascending({self.key_of[i] for i in distinct})):  # type: ignore[misc]
            score[self.id_of[key]] = 100 * (k - 1 - rank) // (k - 1)
        return raws, list(map(score.__getitem__, ids))


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
