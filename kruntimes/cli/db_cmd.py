"""`kruntimes db upgrade [--url URL]` and `kruntimes db downgrade REVISION [--url URL]`.

Both run the journal's packaged Alembic migrations (``kruntimes.journal.migrate``), so an
installed kruntimes migrates from any directory; ``alembic`` at the repo root uses the
same scripts.
"""

from __future__ import annotations

import argparse

from kruntimes.cli import journal_args as ja
from kruntimes.journal import migrate


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("db", help="migrate the journal database schema")
    actions = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = actions.add_parser("upgrade", help="create or migrate the journal to the newest schema")
    up.add_argument("revision", nargs="?", default="head", help="target revision (default: head)")
    ja.add_url_option(up, "--url")
    up.set_defaults(run=run_upgrade)
    down = actions.add_parser("downgrade", help="migrate the journal back to REVISION ('base' drops it all)")
    down.add_argument("revision", help="target revision, e.g. 0001_journal_records or base")
    ja.add_url_option(down, "--url")
    down.set_defaults(run=run_downgrade)


@ja.guarded("kruntimes db upgrade")
def run_upgrade(args: argparse.Namespace) -> int:
    url = ja.checked_url(ja.journal_url(args), must_exist=False)
    before = migrate.current_revision(url)
    migrate.upgrade(url, args.revision)
    print(f"journal {ja.shown(url)}: {before or 'empty'} -> {migrate.current_revision(url) or 'empty'}")
    return 0


@ja.guarded("kruntimes db downgrade")
def run_downgrade(args: argparse.Namespace) -> int:
    url = ja.checked_url(ja.journal_url(args), must_exist=True)
    before = migrate.current_revision(url)
    if before is None:
        raise ja.UsageError(f"the journal at {ja.shown(url)} has no schema to downgrade")
    migrate.downgrade(url, args.revision)
    print(f"journal {ja.shown(url)}: {before} -> {migrate.current_revision(url) or 'empty (base)'}")
    return 0
