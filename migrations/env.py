"""Alembic environment for the kruntimes journal (Alembic's template: offline and online paths).

The URL comes from, in order: a connection handed over by ``kruntimes.journal.store.migrate``,
``-x url=...``, ``KRUNTIMES_JOURNAL_URL``, ``sqlalchemy.url`` in alembic.ini, and
finally the embedded default ``sqlite:///kruntimes-journal.db``.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

from kruntimes.journal import views
from kruntimes.journal.store import engines

config = context.config

# Only the `alembic` command line configures logging; code calling migrate.upgrade
# keeps its own logging setup.
if config.config_file_name is not None and "connection" not in config.attributes:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

# The tables plus the declared history views; `include_object` keeps autogenerate
# from mistaking the views for missing tables (the views revision owns them).
target_metadata = views.metadata

# Serialises concurrent `upgrade`s of one PostgreSQL journal (e.g. two scheduler
# replicas starting at once); any constant works, this one spells "krjournal".
_PG_MIGRATION_LOCK = 0x6B726A6F75726E61


def journal_url() -> str:
    return (
        context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("KRUNTIMES_JOURNAL_URL")
        or config.get_main_option("sqlalchemy.url")
        or engines.DEFAULT_URL
    )


def run_migrations_offline() -> None:
    """Emit SQL for the URL's dialect without connecting (``alembic upgrade head --sql``)."""
    url = engines.parse_url(journal_url())
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        include_object=views.include_object,
        render_as_batch=url.get_backend_name() == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through a live connection: the one handed over, or a new journal engine."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_with(connection)
        return
    engine = engines.create_engine(journal_url())
    try:
        with engine.connect() as connection:
            _run_with(connection)
            connection.commit()
    finally:
        engine.dispose()


def _run_with(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=views.include_object,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
