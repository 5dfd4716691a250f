"""LeastLoaded: favour the pod left least utilised by this Run (SPEC §3.4.2).

For every resource the pod declares with capacity > 0, the projected utilisation
(usage + request) / capacity as an exact fraction; the key is (max, sum), lower is
better. Normalised by rank over the distinct keys of the feasible pods:
100 * (K-1-r) // (K-1), or 100 when all keys are equal.

The raw score is the key as four integers (max numerator, max denominator, sum
numerator, sum denominator) - exact and canonically encodable. A pod's key depends
only on its immutable view and the request shape, so it is memoised on the view:
only pods whose usage changed since the last cycle are recomputed.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from kruntimes.scheduler.framework import CycleState
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
        memo_key = repr(("LeastLoaded", state.requests))  # a str: hashed once, not per pod
        request = dict(state.requests)
        keys = []
        for view in pods:
            key = view.memo.get(memo_key)
            if key is None:
                key = view.memo[memo_key] = load_key(view, request)
            keys.append(key)
        return keys

    def normalize(self, state: CycleState, raws: Sequence[Key]) -> list[int]:  # type: ignore[override]
        distinct = _ascending(set(raws))
        k = len(distinct)
        if k == 1:
            return [100] * len(raws)
        score = {key: 100 * (k - 1 - i) // (k - 1) for i, key in enumerate(distinct)}
        return list(map(score.__getitem__, raws))


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
