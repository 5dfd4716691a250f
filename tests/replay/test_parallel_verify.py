"""`replay verify` in a process pool reports what a serial verify reports (issue 16 item 4).

The pool splits a range into walks that start at checkpoints; each walk goes on to
the checkpoint the next one starts from, so every checkpoint is still proven. These
tests force the pool on small journals (`min_parallel_work=0`) and hold it to the
serial answer: the same cycles judged, the same divergences, the same damage at the
same LSN, on both backends.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from kruntimes.journal.store.backends import Journal
from kruntimes.scheduler import registry
from replay import errors, parallel, source, verify
from tests.replay import journals
from tests.replay.test_divergence import MostLoaded


@pytest.fixture
def written(journal_url: str, tmp_path: Path) -> journals.Written:
    return journals.scripted(journal_url, tmp_path, checkpoint_every=10)


def _verify(url: str, workers: int) -> verify.VerifyReport:
    journal = Journal.open(url)
    try:
        report = verify.verify(journal, source.Selection(), workers=workers, min_parallel_work=0)
    finally:
        journal.close()
    report.raise_for_problems()
    return report


def test_a_pool_of_two_judges_every_cycle_and_proves_every_checkpoint_the_serial_walk_proves(
        written: journals.Written) -> None:
    serial, pooled = _verify(written.url, 1), _verify(written.url, 2)
    assert serial.ok and pooled.ok and pooled.workers == 2
    assert pooled.replayed == pooled.identical == serial.replayed == written.cycles
    assert len(pooled.walk_cpu) == 2  # the walks ran in two other processes
    assert pooled.stats.checkpoints_compared >= serial.stats.checkpoints_compared > 0


def test_the_pieces_walk_on_to_the_checkpoint_the_next_piece_starts_from(written: journals.Written) -> None:
    journal = Journal.open(written.url)
    try:
        cycles = verify.engine.select(journal, source.Selection())
        units = parallel.split(journal, cycles, 4)
        starts = [verify.engine.start_of(journal, u.incarnation, min(r.snapshot_lsn for r in u.refs)) for u in units]
    finally:
        journal.close()
    assert len(units) == 4 and [r for u in units for r in u.refs] == cycles
    assert [u.through for u in units] == [*starts[1:], 0]


def test_divergences_found_by_the_pool_are_the_serial_ones_in_lsn_order(
        written: journals.Written, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.REGISTRY, "LeastLoaded", MostLoaded)  # type: ignore[index]
    serial, pooled = _verify(written.url, 1), _verify(written.url, 2)
    assert not pooled.ok and pooled.workers == 2 and len(pooled.diverged) > 0

    def seen(report: verify.VerifyReport) -> list[Any]:
        return [(r.lsn, [str(d) for d in r.differences]) for r in report.diverged]

    assert seen(pooled) == seen(serial)


def test_damage_found_in_one_piece_is_named_as_a_serial_verify_names_it(written: journals.Written) -> None:
    checkpoint = journals.lsns_of(written.url, "checkpoint")[-2]
    journals.rewrite(written.url, checkpoint, lambda p: p.update(pods=[]))
    with pytest.raises(errors.CheckpointMismatch) as serial:
        _verify(written.url, 1)
    with pytest.raises(errors.CheckpointMismatch) as pooled:
        _verify(written.url, 2)
    assert pooled.value.lsn == serial.value.lsn == checkpoint
    assert pooled.value.epoch == written.incarnation and written.incarnation in str(pooled.value)


@pytest.mark.parametrize("damage", [
    errors.RecordGap(5, 9, "LSNs 5..9 not in the journal"),
    errors.CheckpointMismatch(7, ["pod ns/p0: capacity differs"]),
    errors.CorruptRecord(3, "edited").located("epoch-1"),
], ids=["a gap", "a checkpoint mismatch", "a corrupt record named with its epoch"])
def test_damage_crosses_a_process_boundary_unchanged(damage: errors.JournalDamage) -> None:
    back = pickle.loads(pickle.dumps(damage))
    assert type(back) is type(damage) and str(back) == str(damage)
    assert vars(back) == vars(damage)
