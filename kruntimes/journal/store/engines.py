"""The journal URL and the engine built from it: the one place a URL becomes a backend.

The store's other modules (``backends``, ``migrate``, ``schema_wait``) and the writer's
child process all start here, so none of them needs another to read a URL - which is
what once tied ``backends``, ``migrate`` and ``schema_wait`` into an import circle.
"""

from __future__ import annotations

import types

import sqlalchemy as sa

from kruntimes.journal.store import backend_postgres, backend_sqlite

DEFAULT_URL = "sqlite:///kruntimes-journal.db"


def parse_url(url: str | sa.URL) -> sa.URL:
    """The journal URL SQLAlchemy should use (``postgresql://`` becomes psycopg 3)."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() in ("postgresql", "postgres"):
        return backend_postgres.normalize_url(parsed)
    if parsed.get_backend_name() == "sqlite":
        return parsed
    raise ValueError(f"unsupported journal URL scheme {parsed.drivername!r}: use sqlite:///PATH or "
                     "postgresql+psycopg://USER@HOST/DB")


def create_engine(url: str | sa.URL) -> sa.Engine:
    """An engine configured for the journal (SQLite pragmas, PostgreSQL timeouts)."""
    parsed = parse_url(url)
    return backend_for(parsed).create_engine(parsed)


def backend_for(url: sa.URL) -> types.ModuleType:
    """The backend module (``backend.Backend``) that stores a journal at ``url``."""
    return backend_sqlite if url.get_backend_name() == "sqlite" else backend_postgres
