"""CycleOutcome.digest: SHA-256 of the canonical text of ``encode()``, whatever encodings it reuses.

``canonical.digest_of`` keeps the encoding of each per-pod tuple by identity and hands
it to orjson as a fragment, so a snapshot's pod names or a plugin's unchanged scores
are not encoded again each cycle. The text must be the one encoding everything afresh
gives (the stdlib's reference encoder's), for new tuples, kept ones, values orjson
refuses (ints beyond 64 bits) and values that equal others yet encode otherwise
(``False`` and ``0``): replay compares digests of journals written before it existed.
"""

from __future__ import annotations

import hashlib
import json
import random
from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as hs

from kruntimes import canonical
from kruntimes.scheduler.outcome import SCHEDULED, CycleOutcome, DeviceWork, PluginScores

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def reference_digest(o: CycleOutcome) -> str:
    text = json.dumps(canonical.plain(o.encode()), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def outcome(names: tuple[str, ...], raw: tuple, normalized: tuple[int, ...], **more: object) -> CycleOutcome:
    n = len(names)
    return CycleOutcome("ns", "run", "uid", 7, NOW, "cfg", SCHEDULED, pods=names, rejections=(None,) * n,
                        feasible=names, totals=normalized, chosen=names[0] if names else None,
                        scores=(PluginScores("LeastLoaded", 1, raw, normalized),
                                PluginScores("PreferredRunAffinity", 2, (0,) * n, (0,) * n)), **more)


raws = hs.one_of(hs.integers(-(2**70), 2**70), hs.booleans(),
                 hs.tuples(hs.integers(0, 2**66), hs.integers(-3, 3)))


@given(data=hs.data(), n=hs.integers(0, 12))
def test_the_digest_is_the_reference_texts_for_new_and_kept_tuples(data: hs.DataObject, n: int) -> None:
    names = tuple(f"pod-{i}-ü" for i in range(n))
    raw = tuple(data.draw(hs.lists(raws, min_size=n, max_size=n)))
    normalized = tuple(data.draw(hs.lists(hs.integers(0, 100), min_size=n, max_size=n)))
    first = outcome(names, raw, normalized)
    again = outcome(names, raw, normalized, message="the same tuples, kept")
    assert first.digest() == reference_digest(first)
    assert again.digest() == reference_digest(again)  # now from the kept encodings
    assert first.digest() == reference_digest(first)


def test_a_kept_tuple_of_zeros_does_not_stand_for_an_equal_tuple_of_false() -> None:
    zeros, falses = (0, 0, 0), (False, False, False)
    assert zeros == falses
    names = ("a", "b", "c")
    with_zeros, with_falses = outcome(names, zeros, (1, 2, 3)), outcome(names, falses, (1, 2, 3))
    assert with_zeros.digest() == reference_digest(with_zeros)
    assert with_falses.digest() == reference_digest(with_falses) != with_zeros.digest()


def test_a_device_outcome_and_more_outcomes_than_the_cache_keeps_digest_as_the_reference() -> None:
    rng = random.Random(3)
    names = tuple(f"pod-{i:04d}" for i in range(200))
    outcomes = []
    for i in range(3 * canonical.FRAGMENTS_KEPT):
        raw = tuple((rng.randrange(5), rng.randrange(90)) for _ in names)
        normalized = tuple(rng.choice((0, 50, 100)) for _ in names)
        devices = DeviceWork(steps=i, allocations=tuple((n, [{"device": "gpu-0"}]) for n in names[:3]),
                             chosen=[{"device": "gpu-0"}]) if i % 5 == 0 else None
        outcomes.append(outcome(names, raw, normalized, devices=devices))
    for o in outcomes + outcomes[::-1]:
        assert o.digest() == reference_digest(o)
