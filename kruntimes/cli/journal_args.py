"""What the journal commands (`history`, `journal`, `db`) share: the journal URL, NS/NAME and
time arguments, JSON output, and one error contract.

The contract: a user's mistake or an unreachable database is ONE line on stderr naming
what is wrong and what to do, and exit code 2 — never a traceback. Arguments are
parsed inside the command (not by argparse ``type=``) so that their errors follow it too.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from kruntimes import wire
from kruntimes.journal import errors, redact
from kruntimes.journal.store import backends, engines

URL_ENV = "KRUNTIMES_JOURNAL_URL"


class UsageError(Exception):
    """A bad argument or a missing journal: printed as one line, exit code 2."""


def add_url_option(parser: argparse.ArgumentParser, *, deprecated: str | None = None) -> None:
    """``--journal URL``, the one name every command uses; ``deprecated`` is an old name still read."""
    parser.add_argument("--journal", dest="url", metavar="URL",
                        help=f"journal database (default: ${URL_ENV} or {engines.DEFAULT_URL}); "
                             "sqlite:///PATH or postgresql+psycopg://USER@HOST/DB")
    if deprecated:
        parser.add_argument(deprecated, dest="url", metavar="URL", action=_DeprecatedName,
                            help="deprecated: the same as --journal")


class _DeprecatedName(argparse.Action):
    """Stores like the option it stands for, and says once on stderr which name to use."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: {option_string} is deprecated, use --journal", file=sys.stderr)
        setattr(namespace, self.dest, values)


def journal_url(args: argparse.Namespace) -> str:
    return str(args.url or os.environ.get(URL_ENV) or engines.DEFAULT_URL)


def shown(url: str | sa.URL) -> str:
    """A URL safe to print: the password masked, even when the URL does not parse."""
    return redact.url(url)


def checked_url(url: str, *, must_exist: bool) -> sa.URL:
    """The parsed journal URL; with ``must_exist`` an SQLite file that is not there is an error.

    Why check: opening a missing SQLite path would quietly create an empty database.
    """
    try:
        parsed = engines.parse_url(url)
    except (ValueError, sa_exc.ArgumentError) as exc:
        raise UsageError(f"bad journal URL {shown(url)}: {redact.text(first_line(exc), url)}") from exc
    if must_exist and parsed.get_backend_name() == "sqlite":
        path = parsed.database or ""
        if path in ("", ":memory:") or not Path(path).is_file():
            raise UsageError(f"no journal at {path or '(in-memory)'}: pass --journal URL, or write one first"
                             " (the scheduler or `kruntimes demo` with its journal URL)")
    return parsed


def open_journal(url: str) -> backends.Journal:
    """Open an existing journal for reading; its schema must be current."""
    return backends.Journal.open(checked_url(url, must_exist=True), create=False)


class Declined(Exception):
    """The person at the terminal did not confirm: nothing was changed, exit code 1."""


def add_yes_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-y", "--yes", action="store_true",
                        help="do it without asking (required when stdin is not a terminal)")


def confirm(args: argparse.Namespace, question: str) -> None:
    """Ask ``question`` on the terminal unless ``--yes``; refuse without a terminal to ask on.

    Why refuse rather than proceed: a destructive command in a script or a Job must say
    so with ``--yes``, so that a command line copied from the docs never deletes by surprise.
    """
    if getattr(args, "yes", False):
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question.rstrip('?')}: refusing without confirmation because stdin is not a "
                         "terminal; pass --yes to do it")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise Declined("not confirmed; nothing was changed")


def parse_key(text: str, what: str = "NAMESPACE/NAME") -> tuple[str, str]:
    parts = text.split("/")
    if len(parts) != 2 or not all(p and p == p.strip() and p.isprintable() for p in parts):
        raise UsageError(f"expected {what} (e.g. default/my-run), got {text!r}")
    return parts[0], parts[1]


def parse_time(text: str, *, now: datetime | None = None, what: str = "time") -> datetime:
    """An instant from RFC 3339 / ISO 8601 (no zone means UTC), ``now``, or an age like ``90m``, ``2h``, ``1d``."""
    try:
        return wire.parse_when(text, now=now, what=what)
    except wire.NotATime as exc:
        raise UsageError(str(exc)) from None


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def when(value: datetime | None) -> str:
    """A recorded instant for a table: UTC to the millisecond."""
    return "-" if value is None else value.isoformat(sep=" ", timespec="milliseconds").replace("+00:00", "Z")


def guarded(prog: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Turn the failures a user can cause or meet into one stderr line and exit code 2."""

    def wrap(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(command)
        def run(args: argparse.Namespace) -> int:
            try:
                return command(args)
            except UsageError as exc:
                message = str(exc)
            except Declined as exc:
                print(f"{prog}: {exc}", file=sys.stderr)
                return 1
            except errors.JournalError as exc:
                message = str(exc)
            except sa_exc.DBAPIError as exc:
                message = (f"cannot use the journal at {shown(journal_url(args))}: {first_line(exc.orig)}"
                           " (is the database up and the URL right?)")
            except sa_exc.SQLAlchemyError as exc:
                message = f"journal error: {first_line(exc)}"
            except (ValueError, OSError) as exc:
                message = first_line(exc)
            # Whatever the message quotes (a driver's error, Alembic's), it never shows a password.
            print(f"{prog}: {redact.text(message, journal_url(args))}", file=sys.stderr)
            return 2

        return run

    return wrap


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()
