"""What a journal backend module provides: the only code that differs between SQLite and PostgreSQL.

Reads go through SQLAlchemy Core and are the same on both backends; a backend module
(``backend_sqlite``, ``backend_postgres``) brings the engine's settings, the bulk
insert of records and history rows, and how its driver says "duplicate key".
``engines.backend_for`` picks one from the URL; ``Journal`` calls it through this shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from kruntimes.journal import records
from kruntimes.journal.history import derive


class Backend(Protocol):
    """The module-level functions ``backend_sqlite`` and ``backend_postgres`` each define."""

    NAME: str
    #: How history rows hold their times (``derive.derive(..., stamp=STAMP)``); None: as datetimes.
    STAMP: Any

    def create_engine(self, url: sa.URL) -> sa.Engine: ...

    def limit_statements(self, conn: sa.Connection, seconds: float) -> None: ...

    def stamps(self, rows: Sequence[records.EncodedRecord]) -> list[str] | None: ...

    def insert_records(self, dbapi_connection: Any, rows: Sequence[records.EncodedRecord],
                       stamped: Any = None) -> None: ...

    def insert_derived(self, dbapi_connection: Any, derived: derive.Derived) -> None: ...

    def is_duplicate(self, exc: BaseException) -> bool: ...
