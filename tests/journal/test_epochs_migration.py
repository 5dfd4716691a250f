"""Upgrading a journal written before epochs (revision 0003_epochs) keeps its history verifiable.

The old shape is written as the old code wrote it (rows keyed by LSN alone, no link);
after the upgrade every record carries its link in its epoch's chain, every epoch has
its head, and the epochs are marked as closed by the upgrade.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from kruntimes.journal import chain, prune_record, records
from kruntimes.journal.store import backends, engines, migrate, schema
from tests.journal.factories import T0, record

OLD = "0002_history_views"
A, B = "a" * 32, "b" * 32


def _old_journal(url: str) -> None:
    """Two incarnations and a prune record, inserted with the columns revision 0002 had."""
    migrate.upgrade(url, OLD)
    start = {"version": "0.9", "config_hash": "c0ffee"}
    rows = [records.encode(r) for r in (
        record(1, "incarnation", start, incarnation=A), record(2, "checkpoint", {"objects": []}, incarnation=A),
        record(3, incarnation=A), record(4, "incarnation", start, incarnation=B),
        record(5, "checkpoint", {"objects": []}, incarnation=B), record(6, incarnation=B))]
    rows.append(records.EncodedRecord(0, B, T0, "prune", 1, "{}", records.content_hash("{}")))
    engine = engines.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO journal_records (lsn, incarnation, recorded_at, kind, schema_version, payload,"
                " payload_sha256) VALUES (:lsn, :incarnation, :recorded_at, :kind, :schema_version, :payload,"
                " :payload_sha256)"),
                [{**r._asdict(), "recorded_at": r.recorded_at if conn.dialect.name != "sqlite"
                  else schema.sqlite_timestamp(r.recorded_at)} for r in rows])
    finally:
        engine.dispose()


def _chained(journal: backends.Journal, key: chain.ChainKey | None) -> dict[str, tuple[int, str]]:
    """Recompute every epoch's chain from the stored records; each epoch's last (LSN, link)."""
    heads: dict[str, tuple[int, str]] = {}
    for r in journal.read_encoded():
        if r.kind == "prune":  # rewritten by 0008_chained_prunes: the first of the prune records' own chain
            assert (r.incarnation, r.chain_hash) == (
                prune_record.incarnation_of(1), prune_record.link(chain.GENESIS, 1, r.recorded_at, r.payload_sha256, key))
            continue
        prev = heads.get(r.incarnation, (0, chain.GENESIS))[1]
        assert r.chain_hash == chain.link(prev, r.incarnation, r.lsn, r.recorded_at, r.kind, r.schema_version,
                                          r.payload_sha256, key), f"epoch {r.incarnation} LSN {r.lsn}"
        heads[r.incarnation] = (r.lsn, r.chain_hash)
    return heads


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_an_old_journal_is_chained_epoch_by_epoch_and_its_epochs_are_closed_by_the_upgrade(
        journal_url: str, keyed: bool, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    _old_journal(journal_url)
    key = None
    if keyed:
        (tmp_path / "key").write_bytes(b"s" * 40)
        monkeypatch.setenv(chain.KEY_FILE_ENV, str(tmp_path / "key"))
        key = chain.load_key()
    migrate.upgrade(journal_url)
    journal = backends.Journal.open(journal_url, create=False)
    try:
        heads = _chained(journal, key)
        assert heads.keys() == {A, B}
        epochs = journal.epochs()
        assert list(epochs) == [A, B]
        for epoch, (lsn, link) in heads.items():
            e = epochs[epoch]
            assert (e.head_lsn, e.head_hash, e.end_lsn, e.end_reason) == (lsn, link, None, schema.BEFORE_EPOCHS)
            assert (e.algorithm, e.key_id) == (chain.algorithm(key), None if key is None else key.key_id)
        assert (epochs[B].first_lsn, epochs[B].started_at) == (4, T0 + timedelta(milliseconds=4))
        # the views still read the rebuilt table, and the next epoch continues the journal
        with journal.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM cycles")).scalar() == 2
        journal.append_batch([record(7, "incarnation", {"version": "1.0", "config_hash": "c"}, incarnation="c" * 32)],
                             key=key)
        assert _chained(journal, key)["c" * 32][0] == 7
    finally:
        journal.close()


def test_a_downgrade_restores_the_old_shape_unless_two_epochs_share_an_lsn(journal_url: str) -> None:
    _old_journal(journal_url)
    migrate.upgrade(journal_url)
    migrate.downgrade(journal_url, OLD)
    engine = engines.create_engine(journal_url)
    try:
        inspector = sa.inspect(engine)
        assert "journal_epochs" not in inspector.get_table_names()
        assert inspector.get_pk_constraint("journal_records")["constrained_columns"] == ["lsn"]
        assert "chain_hash" not in {c["name"] for c in inspector.get_columns("journal_records")}
    finally:
        engine.dispose()
    migrate.upgrade(journal_url)
    journal = backends.Journal.open(journal_url, create=False)
    try:
        journal.append_batch([record(6, incarnation="c" * 32)])
    finally:
        journal.close()
    with pytest.raises(RuntimeError, match="epochs share LSNs .first 6"):
        migrate.downgrade(journal_url, OLD)
