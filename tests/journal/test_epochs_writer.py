"""The writer's side of epochs (SPEC §5): the chain, the heads, the spool's check, recovery.

Every journal here is checked link by link from GENESIS (``factories.unchained``), so
whatever path a record took - straight to the database, through the spool, through
an old-format spool - the stored chain must be whole.
"""

from __future__ import annotations

import json
import logging
import zlib
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kruntimes.journal import chain, records
from kruntimes.journal.write import settings, spool, writer
from kruntimes.journal.store import backends
from tests.journal.factories import INCARNATION, record, unchained
from tests.journal.test_writer import FAST_RETRY, WAIT, FlakyJournal

START = {"version": "0.1.0", "config_hash": "c0ffee"}
E1, E2 = "e1" + "0" * 30, "e2" + "0" * 30


def epoch_records(epoch: str, first: int, last: int, *, start: bool = True) -> list[records.JournalRecord]:
    """An epoch's records: its incarnation record (at ``first``), then cycles."""
    out = [record(first, "incarnation", START, incarnation=epoch)] if start else [record(first, incarnation=epoch)]
    return out + [record(lsn, incarnation=epoch) for lsn in range(first + 1, last + 1)]


def make(journal: Any, tmp_path: Path, *, spool_path: Path | None = None, epochs: settings.Epochs = settings.Epochs(),
         batching: settings.Batching = settings.Batching(), registry: CollectorRegistry | None = None,
         ) -> writer.JournalWriter:
    return writer.JournalWriter(journal, settings.Spool(spool_path or tmp_path / "journal.spool"), batching=batching,
                                patience=FAST_RETRY, epochs=epochs,
                                instruments=settings.Instruments(registry=registry if registry is not None else CollectorRegistry()))


@pytest.fixture
def key_file(tmp_path: Path) -> str:
    path = tmp_path / "journal-key"
    path.write_bytes(b"k" * 48)
    return str(path)


def test_the_writer_chains_each_epoch_with_the_key_and_stores_its_head_with_its_records(
        journal: backends.Journal, tmp_path: Path, key_file: str) -> None:
    key = chain.load_key(key_file)
    with make(journal, tmp_path, epochs=settings.Epochs(key_file=key_file), batching=settings.Batching(max_batch=7)) as w:
        for r in epoch_records(E1, 1, 30) + epoch_records(E2, 31, 40):
            w.append(r)
        w.append(record(41, "end", {"reason": "shutdown"}, incarnation=E2))
        assert w.flush(WAIT)
    stored = list(journal.read_encoded())
    assert [r.lsn for r in unchained(stored, key)] == list(range(1, 42))
    heads = journal.epochs()
    assert [(e.epoch, e.first_lsn, e.head_lsn, e.end_lsn, e.end_reason) for e in heads.values()] == [
        (E1, 1, 30, None, None), (E2, 31, 41, 41, "shutdown")]
    assert heads[E2].head_hash == stored[-1].chain_hash and heads[E1].head_hash == stored[29].chain_hash
    assert {(e.algorithm, e.key_id) for e in heads.values()} == {("hmac-sha256", key.key_id)}  # type: ignore[union-attr]


def test_records_spooled_in_an_outage_carry_their_links_and_drain_into_a_whole_chain(
        journal: backends.Journal, tmp_path: Path) -> None:
    flaky = FlakyJournal(journal)
    w = make(flaky, tmp_path).start()
    everything = epoch_records(E1, 1, 300)
    try:
        for r in everything[:100]:
            w.append(r)
        assert w.flush(WAIT)
        flaky.down = True
        for r in everything[100:200]:
            w.append(r)
        assert w.flush(WAIT)
        spooled = list(spool.Spool.records(w._spool))
        assert spooled and all(len(r.chain_hash) == 64 for r in spooled)
        flaky.down = False
        for r in everything[200:]:
            w.append(r)
        assert w.drain(WAIT)
    finally:
        w.close(WAIT)
    assert unchained(journal.read_encoded()) == [records.encode(r) for r in everything]
    assert journal.epochs()[E1].head_lsn == 300


def _forged_spool(tmp_path: Path, journal: backends.Journal, forge: Any) -> Path:
    """Spool two epochs while the database is down, then rewrite the spool file with ``forge`` applied."""
    flaky = FlakyJournal(journal)
    flaky.down = True
    path = tmp_path / "journal.spool"
    w = make(flaky, tmp_path, spool_path=path).start()
    for r in epoch_records(E1, 1, 20) + epoch_records(E2, 21, 30):
        w.append(r)
    assert w.flush(WAIT)
    w.close(WAIT)
    original = spool.Spool.open(path)
    rows = [forge(r) for r in original.records()]
    original.close()
    path.unlink()
    forged = spool.Spool.open(path)  # valid frames and CRCs: only the chain can tell
    forged.append(rows)
    forged.close()
    return path


@pytest.mark.parametrize("forge, why", [
    (lambda r: r._replace(payload=r.payload.replace("run-12", "run-99"),
                          payload_sha256=records.content_hash(r.payload.replace("run-12", "run-99")))
     if r.lsn == 12 else r, "link that does not follow"),
    (lambda r: r._replace(payload_sha256="deadbeef" * 8) if r.lsn == 12 else r, "payload SHA-256"),
    (lambda r: r._replace(chain_hash=chain.link(chain.GENESIS, r.incarnation, r.lsn, r.recorded_at, r.kind,
                                                r.schema_version, r.payload_sha256)) if r.lsn == 12 else r,
     "link that does not follow"),
], ids=["payload edited and rehashed", "forged payload hash", "link recomputed"])
def test_a_forged_spool_record_is_never_stored_and_the_rest_of_its_epoch_is_quarantined(
        journal: backends.Journal, tmp_path: Path, forge: Any, why: str, caplog: pytest.LogCaptureFixture) -> None:
    path = _forged_spool(tmp_path, journal, forge)
    registry = CollectorRegistry()
    with caplog.at_level(logging.ERROR, logger="kruntimes.journal.writer"):
        w = make(journal, tmp_path, spool_path=path, registry=registry).start()
        try:
            assert w.drain(WAIT)
        finally:
            w.close(WAIT)
    stored = unchained(journal.read_encoded())
    assert [(r.incarnation, r.lsn) for r in stored] == [(E1, lsn) for lsn in range(1, 12)] + [
        (E2, lsn) for lsn in range(21, 31)]
    quarantined = spool.Spool.open(w.quarantine_path)
    try:
        assert [r.lsn for r in quarantined.records()] == list(range(12, 21))
    finally:
        quarantined.close()
    assert w.stats().rejected["chain"] == 9 and w.stats().quarantined == 9
    assert registry.get_sample_value("kruntimes_journal_records_rejected_total", {"reason": "chain"}) == 9
    assert f"record epoch {E1} LSN 12" in caplog.text and why in caplog.text
    assert journal.epochs()[E1].head_lsn == 11


def test_a_key_stored_with_another_link_is_a_conflict_quarantined_never_dropped_silently(
        journal: backends.Journal, tmp_path: Path) -> None:
    other = records.encode(record(3, incarnation=E1))._replace(chain_hash="ab" * 32)
    journal.append_batch([records.encode(r) for r in epoch_records(E1, 1, 2)])
    journal.append_batch([other])
    with make(journal, tmp_path) as w:
        for r in epoch_records(E1, 1, 5):
            w.append(r)
        assert w.flush(WAIT)
        stats = w.stats()
    assert stats.rejected["conflict"] == 3 and stats.quarantined == 3  # LSN 3 and the rest of its epoch
    q = spool.Spool.open(w.quarantine_path)
    try:
        assert [r.lsn for r in q.records()] == [3, 4, 5]
    finally:
        q.close()


def test_an_old_format_spool_still_drains_its_links_computed_from_the_stored_head(
        journal: backends.Journal, tmp_path: Path) -> None:
    everything = epoch_records(E1, 1, 20)
    journal.append_batch([records.encode(r) for r in everything[:5]])
    path = tmp_path / "journal.spool"
    frames = []
    for r in everything[5:]:
        body = spool._to_body(records.encode(r), 1)
        frames.append(spool._FRAME.pack(len(body), zlib.crc32(body)) + body)
    path.write_bytes(spool.MAGIC_V1 + b"".join(frames))
    w = make(journal, tmp_path, spool_path=path).start()
    try:
        w.append(record(21, incarnation=E1))
        assert w.drain(WAIT)
    finally:
        w.close(WAIT)
    assert unchained(journal.read_encoded()) == [records.encode(r) for r in [*everything, record(21, incarnation=E1)]]
    assert path.read_bytes()[:8] == spool.MAGIC, "an emptied old spool starts the current format"


def test_an_epoch_killed_mid_term_is_closed_as_recovered_by_the_next_writer_on_its_spool(
        journal: backends.Journal, tmp_path: Path) -> None:
    flaky = FlakyJournal(journal)
    first = make(flaky, tmp_path, epochs=settings.Epochs(epoch=E1)).start()
    for r in epoch_records(E1, 1, 10):
        first.append(r)
    assert first.flush(WAIT)
    flaky.down = True
    for lsn in range(11, 16):
        first.append(record(lsn, incarnation=E1))
    assert first.flush(WAIT)
    first.close(WAIT)  # no end record: as if the process had been killed
    assert json.loads((tmp_path / "journal.spool.epochs").read_text()) == [E1]

    second = make(flaky, tmp_path, epochs=settings.Epochs(epoch=E2))
    assert second.last_lsn() == 16, "the new epoch numbers after the end record it will write"
    second.start()
    try:
        flaky.down = False
        for r in epoch_records(E2, 17, 18):
            second.append(r)
        second.append(record(19, "end", {"reason": "shutdown"}, incarnation=E2))
        assert second.drain(WAIT)
    finally:
        second.close(WAIT)
    stored = unchained(journal.read_encoded())
    ends = [(r.incarnation, r.lsn, json.loads(r.payload)) for r in stored if r.kind == "end"]
    assert ends == [(E1, 16, {"reason": "recovered"}), (E2, 19, {"reason": "shutdown"})]
    epochs = journal.epochs()
    assert [(e.head_lsn, e.end_lsn, e.end_reason) for e in epochs.values()] == [(16, 16, "recovered"),
                                                                                 (19, 19, "shutdown")]
    assert not (tmp_path / "journal.spool.epochs").exists(), "nothing is left to recover"


def test_a_writer_process_restarted_mid_epoch_does_not_end_its_own_epoch(
        journal: backends.Journal, tmp_path: Path) -> None:
    with make(journal, tmp_path, epochs=settings.Epochs(epoch=E1)) as w:
        for r in epoch_records(E1, 1, 5):
            w.append(r)
        assert w.flush(WAIT)
    with make(journal, tmp_path, epochs=settings.Epochs(epoch=E1)) as again:  # the same epoch goes on, its head known only to the database
        for lsn in range(6, 9):
            again.append(record(lsn, incarnation=E1))
        assert again.flush(WAIT)
    stored = unchained(journal.read_encoded())
    assert [r.lsn for r in stored] == list(range(1, 9)) and "end" not in {r.kind for r in stored}


def test_the_head_is_published_in_a_log_line_and_a_gauge(
        journal: backends.Journal, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    with caplog.at_level(logging.INFO, logger="kruntimes.journal.writer"):
        with make(journal, tmp_path, epochs=settings.Epochs(epoch=E1), registry=registry) as w:
            for r in epoch_records(E1, 1, 9):
                w.append(r)
            w.append(record(10, "end", {"reason": "shutdown"}, incarnation=E1))
            assert w.flush(WAIT)
            assert registry.get_sample_value("kruntimes_journal_head_lsn") == 10
    head = journal.epochs()[E1]
    published = [(r.epoch, r.lsn, r.hash) for r in caplog.records if r.getMessage() == "journal head"]  # type: ignore[attr-defined]
    assert published[-1] == (E1, 10, head.head_hash)
    assert registry.get_sample_value("kruntimes_journal_head_lsn") == 0, "a closed writer's head is no gauge"


def test_an_unknown_epoch_in_the_tests_default_incarnation_is_linked_by_the_database(
        journal: backends.Journal, tmp_path: Path) -> None:
    with make(journal, tmp_path) as w:
        for lsn in range(1, 4):
            w.append(record(lsn))
        assert w.flush(WAIT)
    assert [r.lsn for r in unchained(journal.read_encoded())] == [1, 2, 3]
    assert journal.epochs()[INCARNATION].head_lsn == 3


def test_a_killed_leaders_spool_drains_into_its_own_epoch_beside_the_next_leaders_records(
        journal: backends.Journal, tmp_path: Path) -> None:
    # Issue 14's lost term: A spools during an outage and is killed; B leads and numbers
    # the same LSNs; A's replica comes back. Nothing collides, nothing is rejected.
    down = FlakyJournal(journal)
    down.down = True
    a = make(down, tmp_path, spool_path=tmp_path / "a.spool", epochs=settings.Epochs(epoch=E1)).start()
    for r in epoch_records(E1, 1, 480):
        a.append(r)
    assert a.flush(WAIT)
    a.close(WAIT)  # killed: its records are in its spool only, no end record
    with make(journal, tmp_path, spool_path=tmp_path / "b.spool", epochs=settings.Epochs(epoch=E2)) as b:
        for r in epoch_records(E2, 1, 100):  # B only knew the database: it numbers from 1 too
            b.append(r)
        b.append(record(101, "end", {"reason": "lost"}, incarnation=E2))
        assert b.flush(WAIT)
    e3 = "e3" + "0" * 30
    again = make(journal, tmp_path, spool_path=tmp_path / "a.spool", epochs=settings.Epochs(epoch=e3))
    start = (again.last_lsn() or 0) + 1
    again.start()
    try:
        for r in epoch_records(e3, start, start + 9):
            again.append(r)
        assert again.drain(WAIT)
        stats = again.stats()
    finally:
        again.close(WAIT)
    assert sum(stats.rejected.values()) == 0 and stats.quarantined == 0
    stored = unchained(journal.read_encoded())
    by_epoch = {e: [r.lsn for r in stored if r.incarnation == e] for e in (E1, E2, e3)}
    assert by_epoch[E1] == list(range(1, 482)) and by_epoch[E2] == list(range(1, 102))
    assert by_epoch[e3] == list(range(start, start + 10)) and start == 482
    ends = {e.epoch: (e.end_lsn, e.end_reason) for e in journal.epochs().values()}
    assert ends == {E1: (481, "recovered"), E2: (101, "lost"), e3: (None, None)}
