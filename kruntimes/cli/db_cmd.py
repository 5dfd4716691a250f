"""`kruntimes db upgrade [--journal URL]` and `kruntimes db downgrade REVISION [--journal URL] [--yes]`.

Both run the journal's packaged Alembic migrations (``kruntimes.journal.store.migrate``), so an
installed kruntimes migrates from any directory; ``alembic`` at the repo root uses the
same scripts.

Two rails: an upgrade refuses a database that already holds tables of something else
(the URL probably names the wrong database) unless ``--allow-foreign-tables``; a
downgrade deletes data, so it asks on a terminal and needs ``--yes`` elsewhere.
"""

from __future__ import annotations

import argparse

from kruntimes.cli import journal_args as ja
from kruntimes.journal.store import migrate


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("db", help="migrate the journal database schema")
    actions = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = actions.add_parser("upgrade", help="create or migrate the journal to the newest schema")
    up.add_argument("revision", nargs="?", default="head", help="target revision (default: head)")
    up.add_argument("--allow-foreign-tables", action="store_true",
                    help="create the journal even in a database that already holds other tables")
    ja.add_url_option(up, deprecated="--url")
    up.set_defaults(run=run_upgrade)
    down = actions.add_parser("downgrade", help="migrate the journal back to REVISION ('base' drops it all)")
    down.add_argument("revision", help="target revision, e.g. 0001_journal_records or base")
    ja.add_url_option(down, deprecated="--url")
    ja.add_yes_option(down)
    down.set_defaults(run=run_downgrade)


@ja.guarded("kruntimes db upgrade")
def run_upgrade(args: argparse.Namespace) -> int:
    url = ja.checked_url(ja.journal_url(args), must_exist=False)
    before = migrate.current_revision(url)
    foreign = [] if args.allow_foreign_tables else migrate.foreign_tables(url)
    if foreign:
        listed = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ja.UsageError(f"the database at {ja.shown(url)} has no journal but holds other tables ({listed}):"
                            " point --journal at a database of its own, or pass --allow-foreign-tables")
    migrate.upgrade(url, args.revision)
    after = migrate.current_revision(url)
    if after == before:  # nothing to do: say so, not "0007 -> 0007"
        print(f"journal {ja.shown(url)}: already at {before or 'empty'}; nothing to do")
    else:
        print(f"journal {ja.shown(url)}: {before or 'empty'} -> {after or 'empty'}")
    return 0


@ja.guarded("kruntimes db downgrade")
def run_downgrade(args: argparse.Namespace) -> int:
    url = ja.checked_url(ja.journal_url(args), must_exist=True)
    before = migrate.current_revision(url)
    if before is None:
        raise ja.UsageError(f"the journal at {ja.shown(url)} has no schema to downgrade")
    loses = "drops every journal table and record" if args.revision == "base" else "drops what later revisions hold"
    ja.confirm(args, f"downgrade the journal at {ja.shown(url)} from {before} to {args.revision} ({loses})?")
    migrate.downgrade(url, args.revision)
    print(f"journal {ja.shown(url)}: {before} -> {migrate.current_revision(url) or 'empty (base)'}")
    return 0
