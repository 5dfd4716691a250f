"""Is the journal's schema whole? A dropped table or column is damage, not a journal that cannot be read.

`verify` reads the chain (`journal_records.chain_hash`), the heads (`journal_epochs`)
and the incarnations; if someone with write access drops one of them, the queries
fail the way an unreachable database's do, and verify used to say "cannot read the
journal" (exit 2: try again, fix the URL). When the schema says it is at the revision
this code needs (Alembic's `alembic_version`), every table and column of that
revision must be there: one that is not was removed, and that is damage (exit 3,
SPEC §5 "Integrity"), named here before anything else is read. A schema at another
revision is left to the usual message (upgrade it, or use the matching kruntimes).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes.journal.store import backends, migrate, schema
from kruntimes.journal import errors as journal_errors
from replay import errors

#: The tables verify reads, as the head revision has them.
CHECKED = (schema.journal_records, schema.journal_epochs, schema.journal_incarnations)


def check(journal: backends.Journal) -> list[errors.JournalDamage]:
    """A `SchemaDamage` per table (or its columns) missing from a schema at the head revision."""
    try:
        head = migrate.head_revision()
        if migrate.current_revision(journal.engine) != head:
            return []
        inspector = sa.inspect(journal.engine)
        found: list[errors.JournalDamage] = []
        for table in CHECKED:
            if not inspector.has_table(table.name):
                found.append(errors.SchemaDamage(f"the table {table.name} is missing (dropped?), although the "
                                                 f"schema is at revision {head}, which has it"))
                continue
            have = {column["name"] for column in inspector.get_columns(table.name)}
            missing = [column.name for column in table.columns if column.name not in have]
            if missing:
                found.append(errors.SchemaDamage(
                    f"the table {table.name} has no column {', '.join(missing)} (dropped?), although the schema is "
                    f"at revision {head}, which has it: what it held cannot be checked"))
    except sa_exc.DBAPIError as exc:
        raise journal_errors.JournalUnavailable(f"cannot read the journal ({journal.backend}): {exc.orig}") from exc
    return found
