"""The journal's tables as SQLAlchemy 2.x declarative models; Alembic owns the DDL.

Only the generic log lives here: ``journal_records`` (one row per record, payload as
canonical JSON text + SHA-256) and ``journal_incarnations`` (a projection of the
``incarnation`` records, written in the same transaction). Typed side tables (cycles,
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
    return value.replace(tzinfo=None).isoformat(" ", "microseconds")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class JournalRecordRow(Base):
    """One journal record. ``payload`` is canonical JSON text, never re-serialised."""

    __tablename__ = "journal_records"

    # The LSN alone is the key: a new incarnation continues after the last durable
    # LSN, so LSNs are unique across the whole journal and give one total order.
    lsn: Mapped[int] = mapped_column(LSN, primary_key=True, autoincrement=False)
    incarnation: Mapped[str] = mapped_column(String(64), nullable=False)
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    schema_version: Mapped[int] = mapped_column(Integer, nullable=False)
    payload: Mapped[str] = mapped_column(Text, nullable=False)
    payload_sha256: Mapped[str] = mapped_column(String(64), nullable=False)

    __table_args__ = (
        Index("ix_journal_records_incarnation_lsn", "incarnation", "lsn"),
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


metadata = Base.metadata
journal_records = JournalRecordRow.__table__
journal_incarnations = JournalIncarnationRow.__table__
