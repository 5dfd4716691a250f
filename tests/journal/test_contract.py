"""The journal contract: the very same tests against SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from kruntimes.journal import chain, errors, records
from kruntimes.journal.history import views
from kruntimes.journal.store import backends, engines, migrate
from tests.journal.factories import INCARNATION, T0, record


def test_an_empty_journal_has_no_last_lsn(journal: backends.Journal) -> None:
    assert journal.last_lsn() is None
    assert list(journal.read()) == []


def test_records_round_trip_byte_exact(journal: backends.Journal) -> None:
    payload = {"zeta": "ünïcødé ✓ 日本", "alpha": {"z": [1, -2, 3**40], "a": None}, "mid": True, "esc": "tab\t\"q\" \\ \x00"}
    written = records.encode(record(1, payload=payload))
    assert journal.append_batch([record(1, payload=payload)]) == 1

    (stored,) = journal.read_encoded()
    assert stored == written._replace(chain_hash=_link(chain.GENESIS, written))
    assert stored.payload == records.canonical_json(payload)
    assert stored.payload.startswith('{"alpha":{"a":null,"z":[1,-2,')
    assert stored.recorded_at == T0 + timedelta(milliseconds=1) and stored.recorded_at.tzinfo is not None
    assert list(journal.read()) == [record(1, payload=payload)]


def test_records_come_back_in_lsn_order_whatever_the_insert_order(journal: backends.Journal) -> None:
    journal.append_batch([record(5), record(3)])
    journal.append_batch([record(4), record(1), record(2)])
    assert [r.lsn for r in journal.read()] == [1, 2, 3, 4, 5]
    assert journal.last_lsn() == 5


def test_a_duplicate_lsn_is_an_error_and_stores_nothing_of_its_batch(journal: backends.Journal) -> None:
    journal.append_batch([record(1), record(2)])
    with pytest.raises(errors.DuplicateRecord):
        journal.append_batch([record(3), record(2)])
    assert [r.lsn for r in journal.read()] == [1, 2]


def test_skip_existing_makes_re_appending_idempotent(journal: backends.Journal) -> None:
    journal.append_batch([record(1), record(2)])
    assert journal.append_batch([record(1), record(2), record(3)], skip_existing=True) == 1
    assert journal.append_batch([record(1), record(2), record(3)], skip_existing=True) == 0
    assert [r.lsn for r in journal.read()] == [1, 2, 3]


def test_skip_existing_still_refuses_an_lsn_stored_with_other_content(journal: backends.Journal) -> None:
    journal.append_batch([record(1), record(2)])
    with pytest.raises(errors.DuplicateRecord) as info:
        journal.append_batch([record(2, payload={"other": 1}), record(3)], skip_existing=True)
    assert info.value.lsns == (2,)
    assert journal.last_lsn() == 2


def _link(prev: str, r: records.EncodedRecord, key: chain.ChainKey | None = None) -> str:
    return chain.link(prev, r.incarnation, r.lsn, r.recorded_at, r.kind, r.schema_version, r.payload_sha256, key)


def test_two_epochs_may_use_the_same_lsn_and_each_key_stays_unique(journal: backends.Journal) -> None:
    journal.append_batch([record(1), record(2)])
    assert journal.append_batch([record(2, incarnation="b" * 32), record(3, incarnation="b" * 32)]) == 2
    assert [(r.lsn, r.incarnation[0]) for r in journal.read_encoded()] == [(1, "7"), (2, "7"), (2, "b"), (3, "b")]
    with pytest.raises(errors.DuplicateRecord):
        journal.append_batch([record(3, incarnation="b" * 32)])


def test_records_without_a_link_are_chained_from_the_stored_head_and_the_head_moves_with_them(
        journal: backends.Journal) -> None:
    key = chain.ChainKey(b"k" * 32)
    heads: dict[str, tuple[int, str]] = {}
    journal.append_batch([record(1, "incarnation", {"version": "1", "config_hash": "c"}), record(2)], key=key, heads=heads)
    journal.append_batch([record(3)], key=key, heads=heads)
    stored = list(journal.read_encoded())
    prev = chain.GENESIS
    for r in stored:
        assert r.chain_hash == _link(prev, r, key)
        prev = r.chain_hash
    (head,) = journal.epochs().values()
    assert (head.epoch, head.first_lsn, head.head_lsn, head.head_hash) == (INCARNATION, 1, 3, prev)
    assert (head.algorithm, head.key_id, head.end_lsn, head.end_reason) == ("hmac-sha256", key.key_id, None, None)
    assert heads == {INCARNATION: (3, prev)}


def test_an_end_record_closes_its_epoch_and_an_older_batch_never_moves_the_head_back(
        journal: backends.Journal) -> None:
    journal.append_batch([record(1), record(2), record(3, "end", {"reason": "shutdown"})])
    journal.append_batch([record(2)], skip_existing=True)
    (head,) = journal.epochs().values()
    assert (head.head_lsn, head.end_lsn, head.end_reason) == (3, 3, "shutdown")


def test_a_link_given_with_the_record_is_stored_as_given_and_checked_on_a_re_append(
        journal: backends.Journal) -> None:
    first = records.encode(record(1))._replace(chain_hash="ab" * 32)
    journal.append_batch([first])
    assert [r.chain_hash for r in journal.read_encoded()] == ["ab" * 32]
    assert journal.append_batch([first], skip_existing=True) == 0
    with pytest.raises(errors.DuplicateRecord) as info:
        journal.append_batch([first._replace(chain_hash="cd" * 32)], skip_existing=True)
    assert info.value.keys == ((INCARNATION, 1),)


def test_an_append_that_fails_gives_up_its_connection_and_the_next_batch_lands(journal: backends.Journal) -> None:
    assert journal.append_batch([record(1)]) == 1
    with journal.engine.begin() as conn:  # the table is gone for a moment
        conn.execute(sa.text("ALTER TABLE journal_records RENAME TO journal_records_away"))
    with pytest.raises(errors.JournalUnavailable):
        journal.append_batch([record(2)])
    with journal.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE journal_records_away RENAME TO journal_records"))
    assert journal.append_batch([record(2)]) == 1
    assert [r.lsn for r in journal.read_encoded()] == [1, 2]


@pytest.mark.postgres
def test_an_append_connection_the_server_ended_is_replaced_without_losing_the_batch(postgres_url: str) -> None:
    journal = backends.Journal.open(postgres_url)
    try:
        assert journal.append_batch([record(1)]) == 1
        # What a server restart does to the connection appends keep: only this journal's
        # (the database is shared with other tests, whose connections must live on).
        kept = journal._append_conn  # noqa: SLF001 - the connection under test
        assert kept is not None
        pid = kept.connection.driver_connection.info.backend_pid
        with journal.engine.connect() as conn:
            ended = conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
        assert ended is True
        assert journal.append_batch([record(2)]) == 1
        assert [r.lsn for r in journal.read_encoded()] == [1, 2]
    finally:
        journal.close()


def test_read_ranges_are_after_since_and_up_to_until(journal: backends.Journal) -> None:
    journal.append_batch([record(lsn) for lsn in range(1, 11)])
    assert [r.lsn for r in journal.read(INCARNATION, since_lsn=3, until_lsn=6)] == [4, 5, 6]
    assert [r.lsn for r in journal.read(INCARNATION, since_lsn=8)] == [9, 10]
    assert [r.lsn for r in journal.read(INCARNATION, until_lsn=2)] == [1, 2]


OLDER, NEWER = "a" * 32, "b" * 32


def _overlapping_epochs(journal: backends.Journal) -> None:
    """The older epoch wrote LSNs 1..5; the newer one, begun while the database was away, 3..6."""
    journal.append_batch([record(lsn, incarnation=OLDER) for lsn in range(1, 6)])
    later = T0 + timedelta(hours=1)
    journal.append_batch([record(lsn, incarnation=NEWER, recorded_at=later + timedelta(milliseconds=lsn))
                          for lsn in range(3, 7)])


def test_an_lsn_range_is_read_within_the_epoch_it_names_never_across_epochs(journal: backends.Journal) -> None:
    _overlapping_epochs(journal)
    assert [(r.incarnation, r.lsn) for r in journal.read(OLDER, since_lsn=2, until_lsn=4)] == [(OLDER, 3), (OLDER, 4)]
    assert [(r.incarnation, r.lsn) for r in journal.read_encoded(NEWER, until_lsn=4)] == [(NEWER, 3), (NEWER, 4)]
    with pytest.raises(ValueError, match="epoch"):  # a bare LSN range would mix the two epochs' records
        list(journal.read(since_lsn=2, until_lsn=4))


def test_reading_every_epoch_gives_each_epochs_records_together_in_lsn_order(journal: backends.Journal) -> None:
    _overlapping_epochs(journal)
    read = [(r.incarnation, r.lsn) for r in journal.read_encoded()]
    assert read == [(OLDER, n) for n in range(1, 6)] + [(NEWER, n) for n in range(3, 7)]
    assert [(r.incarnation, r.lsn) for r in journal.read(kinds={"cycle"})] == read


def test_read_filters_by_kind(journal: backends.Journal) -> None:
    kinds = ["mutation", "cycle", "reserve", "bind", "cycle", "release"]
    journal.append_batch([record(lsn, kind) for lsn, kind in enumerate(kinds, start=1)])
    assert [r.lsn for r in journal.read(kinds={"cycle"})] == [2, 5]
    assert [r.lsn for r in journal.read(INCARNATION, since_lsn=2, kinds=["cycle", "bind"])] == [4, 5]


def test_read_streams_many_records_in_order(journal: backends.Journal) -> None:
    journal.append_batch([record(lsn) for lsn in range(1, 2501)])
    lsns = [r.lsn for r in journal.read_encoded(chunk_size=100)]
    assert lsns == list(range(1, 2501))


def test_incarnation_records_are_projected_into_journal_incarnations(journal: backends.Journal) -> None:
    start = {"version": "0.1.0", "config_hash": "c0ffee" * 4, "config": {"plugins": ["Capacity"]}}
    journal.append_batch([record(1, "incarnation", start), record(2)])
    journal.append_batch([record(3, "incarnation", {**start, "version": "0.2.0"}, incarnation="b" * 32)])
    got = journal.incarnations()
    assert [(i.incarnation, i.first_lsn, i.version, i.config_hash) for i in got] == [
        (INCARNATION, 1, "0.1.0", "c0ffee" * 4),
        ("b" * 32, 3, "0.2.0", "c0ffee" * 4),
    ]
    assert got[0].started_at == T0 + timedelta(milliseconds=1)


def test_models_and_migrated_schema_agree(journal: backends.Journal) -> None:
    with journal.engine.connect() as conn:
        opts = {"compare_type": True, "compare_server_default": True, "include_object": views.include_object}
        context = MigrationContext.configure(conn, opts=opts)
        diff = compare_metadata(context, views.metadata)
    assert diff == []


def test_upgrade_downgrade_upgrade(journal_url: str) -> None:
    migrate.upgrade(journal_url)
    assert migrate.current_revision(journal_url) == migrate.head_revision()
    migrate.downgrade(journal_url, "base")
    assert migrate.current_revision(journal_url) is None
    engine = engines.create_engine(journal_url)
    try:
        assert "journal_records" not in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()
    migrate.upgrade(journal_url)
    j = backends.Journal.open(journal_url, create=False)
    try:
        j.append_batch([record(1)])
        assert j.last_lsn() == 1
    finally:
        j.close()


def test_opening_an_unmigrated_journal_without_create_says_what_to_run(journal_url: str) -> None:
    with pytest.raises(errors.JournalError, match="kruntimes db upgrade"):
        backends.Journal.open(journal_url, create=False)
