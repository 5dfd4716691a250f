"""Run the journal's Alembic migrations from code (``kruntimes db upgrade``, ``Journal.open``).

The Alembic scripts live in the repository's top-level ``migrations/``, which a wheel
installs as ``kruntimes/migrations`` (pyproject.toml maps the package), so this works
from an installed wheel, from a checkout and from any directory; the top-level
``alembic.ini`` points the ``alembic`` command at the same scripts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from kruntimes.journal import errors
from kruntimes.journal.store import engines, schema

log = logging.getLogger("kruntimes.journal.migrate")


def default_migrate_mode(url: str | sa.URL) -> str:
    """How the scheduler treats the schema unless told (SPEC §5: migrations run once).

    ``auto`` (migrate on start) for SQLite: one writer on one file, like the demo.
    ``never`` (only wait for the head revision) for a server database: replicas in a
    cluster, where the `kruntimes db upgrade` Job is the one place that migrates.
    """
    return "auto" if engines.parse_url(url).get_backend_name() == "sqlite" else "never"


def _script_location() -> Path:
    """The installed ``kruntimes/migrations``, else a checkout's top-level ``migrations/``."""
    package = Path(__file__).resolve().parents[2]  # kruntimes/ (this is kruntimes/journal/store/migrate.py)
    installed = package / "migrations"
    return installed if (installed / "env.py").is_file() else package.parent / "migrations"


SCRIPT_LOCATION = _script_location()


def alembic_config() -> Config:
    """An Alembic config for the packaged scripts, with no ini file and no logging setup."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    return config


class MigrationFailed(errors.JournalError):
    """Alembic refused a migration (an unknown revision and the like); chains its error.

    Why a type of our own: callers report it without importing Alembic, which costs a
    quarter of a second at start-up for commands that never migrate.
    """


def upgrade(url: str | sa.URL | sa.Engine, revision: str = "head") -> None:
    """Migrate the journal at ``url`` up to ``revision`` (creating it if needed).

    Says so in ONE log line when the revision moved: Alembic's own INFO lines (a dozen per
    fresh journal) are left to debug logging (``cluster.logs.configure``).
    """
    with _connection(url) as conn:
        before = MigrationContext.configure(conn).get_current_revision()
        config = alembic_config()
        config.attributes["connection"] = conn
        try:
            command.upgrade(config, revision)
        except CommandError as exc:
            raise MigrationFailed(f"migration failed: {str(exc).strip()}") from exc
        after = MigrationContext.configure(conn).get_current_revision()
    if after != before:
        log.info("journal schema migrated", extra={"from_revision": before or "empty", "to_revision": after})


def downgrade(url: str | sa.URL | sa.Engine, revision: str) -> None:
    """Migrate the journal at ``url`` down to ``revision`` (``base`` drops every table)."""
    with _connection(url) as conn:
        config = alembic_config()
        config.attributes["connection"] = conn
        try:
            command.downgrade(config, revision)
        except CommandError as exc:
            raise MigrationFailed(f"migration failed: {str(exc).strip()}") from exc


def current_revision(url: str | sa.URL | sa.Engine) -> str | None:
    """The revision the journal at ``url`` is at, or None for an empty database."""
    with _connection(url) as conn:
        return MigrationContext.configure(conn).get_current_revision()


def foreign_tables(url: str | sa.URL | sa.Engine) -> list[str]:
    """The tables and views of a database that holds no journal revision yet, sorted.

    Non-empty means ``url`` names a database something else uses: creating the journal
    there mixes it with another application's tables (and a later ``downgrade base``
    would run in that database). Once migrated, every table is the journal's concern.
    """
    with _connection(url) as conn:
        if MigrationContext.configure(conn).get_current_revision() is not None:
            return []
        inspector = sa.inspect(conn)
        names = set(inspector.get_table_names()) | set(inspector.get_view_names())
        # Another `db upgrade` may have committed the journal meanwhile: then it is ours.
        if names and MigrationContext.configure(conn).get_current_revision() is not None:
            return []
    return sorted(names - {"alembic_version"} - set(schema.metadata.tables))


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the packaged migrations have no head revision"
    return head


def require_head(url: str | sa.URL | sa.Engine) -> None:
    """Raise ``JournalError`` unless the journal's schema is at the newest revision."""
    current, head = current_revision(url), head_revision()
    if current != head:
        raise errors.JournalError(
            f"journal schema is at revision {current!r}, this kruntimes needs {head!r}:"
            " run `kruntimes db upgrade --journal URL`"
        )


def known_revision(revision: str) -> bool:
    """Whether ``revision`` is one of this code's migrations (else the database is newer)."""
    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False


@contextmanager
def _connection(url: str | sa.URL | sa.Engine) -> Iterator[sa.Connection]:
    # Migrate through the journal's own engine so SQLite gets WAL and PostgreSQL the
    # psycopg driver, exactly as the writer will see them.
    engine = url if isinstance(url, sa.Engine) else engines.create_engine(url)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        if engine is not url:
            engine.dispose()
