"""The journal's tables as SQLAlchemy 2.x declarative models; Alembic owns the DDL.

Only the generic log lives here: ``journal_records`` (one row per record, payload as
canonical JSON text + SHA-256, and its link in its epoch's hash chain),
``journal_incarnations`` (a projection of the ``incarnation`` records) and
``journal_epochs`` (each epoch's head: its last LSN and link), both written in the
same transaction as the records they describe. Typed side tables (cycles,
placements, ...) and the query views belong to the history layer; they hang off
``Base.metadata`` so one Alembic history covers all of them.

Every change here needs a migration in ``migrations/versions``; a
test fails when the models and the migrated schema drift apart.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import BigInteger, DateTime, Index, Integer, MetaData, String, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Explicit constraint names keep Alembic's batch mode on SQLite and the autogenerate
# comparison stable across backends.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# On SQLite an INTEGER PRIMARY KEY is the rowid itself: rows are stored in LSN order
# and no second B-tree is maintained for the key (BIGINT would not alias the rowid).
# Both are 64-bit.
LSN = BigInteger().with_variant(Integer(), "sqlite")


class UtcDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out, on every backend.

    PostgreSQL stores ``timestamptz``. SQLite has no time zones: the value is stored as
    naive UTC text ``YYYY-MM-DD HH:MM:SS.ffffff`` (SQLAlchemy's SQLite format, which
    the bulk insert path writes directly) and UTC is re-attached on the way out.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: the journal stores UTC instants only")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


def sqlite_timestamp(value: datetime) -> str:
    """The text UtcDateTime stores on SQLite, for an aware datetime (fast path for bulk inserts)."""
    if value.tzinfo is not timezone.utc:
        value = value.astimezone(timezone.utc)
    # The UTC text without its "+00:00": a quarter cheaper than replace(tzinfo=None) first.
    return value.isoformat(" ", "microseconds")[:-6]


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class JournalRecordRow(Base):
    """One journal record. ``payload`` is canonical JSON text, never re-serialised."""

    __tablename__ = "journal_records"

    # Keyed by (epoch, LSN) (SPEC §5 "Several writers, one truth"): ``incarnation`` is
    # the record's epoch, one leadership term. LSNs are gap-free within an epoch; a new
    # epoch numbers on from the highest LSN its process knows, so they are unique in
    # practice and give a total order to read in, but nothing relies on that: two
    # writers, or a spool drained after another leader began, never compete for a key.
    incarnation: Mapped[str] = mapped_column(String(64), primary_key=True)
    lsn: Mapped[int] = mapped_column(LSN, primary_key=True, autoincrement=False)
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    schema_version: Mapped[int] = mapped_column(Integer, nullable=False)
    payload: Mapped[str] = mapped_column(Text, nullable=False)
    payload_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    # chain.link(previous record's chain_hash in this epoch, or GENESIS, this record).
    chain_hash: Mapped[str] = mapped_column(String(64), nullable=False)

    __table_args__ = (
        Index("ix_journal_records_lsn", "lsn"),
        Index("ix_journal_records_kind_lsn", "kind", "lsn"),
        Index("ix_journal_records_recorded_at", "recorded_at"),
    )


class JournalIncarnationRow(Base):
    """One scheduler incarnation, projected from its ``incarnation`` record."""

    __tablename__ = "journal_incarnations"

    incarnation: Mapped[str] = mapped_column(String(64), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    first_lsn: Mapped[int] = mapped_column(BigInteger, nullable=False)
    version: Mapped[str] = mapped_column(String(64), nullable=False)
    config_hash: Mapped[str] = mapped_column(String(64), nullable=False)


class JournalEpochRow(Base):
    """One epoch (leadership term) and its head, upserted with every batch of its records.

    ``head_lsn``/``head_hash`` are the epoch's last stored record and its link: a record
    table truncated, or restored from an older copy, no longer ends at the head.
    ``end_lsn``/``end_reason`` come from the epoch's ``end`` record; an epoch written
    before epochs existed has no end record and ``end_reason`` ``before-epochs``.
    ``key_id`` names the HMAC key of a keyed chain (``chain.ChainKey.key_id``).
    ``history_lsn`` is the epoch's last record whose history rows are written (the
    history tables hold every record of the epoch up to it; NULL: none yet): the head
    when the writer derives them in the record's transaction, behind it while
    ``kruntimes journal index`` has yet to catch up (``journal.history.indexer``).
    """

    __tablename__ = "journal_epochs"

    epoch: Mapped[str] = mapped_column(String(64), primary_key=True)
    first_lsn: Mapped[int] = mapped_column(BigInteger, nullable=False)
    head_lsn: Mapped[int] = mapped_column(BigInteger, nullable=False)
    head_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    algorithm: Mapped[str] = mapped_column(String(16), nullable=False)
    key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    end_lsn: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    end_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    history_lsn: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


#: ``end_reason`` of the epochs a journal held when it was upgraded to epochs.
BEFORE_EPOCHS = "before-epochs"

metadata = Base.metadata
journal_records = JournalRecordRow.__table__
journal_incarnations = JournalIncarnationRow.__table__
journal_epochs = JournalEpochRow.__table__
