"""The journal commands' safety rails, on both backends.

Deleting commands (`db downgrade`, `journal prune`) ask on a terminal and refuse
without one unless `--yes`; `db upgrade` will not create a journal among another
application's tables; and no command prints a database password, however the URL is
malformed.
"""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from kruntimes.cli import main as cli
from kruntimes.cli import scheduler_cmd
from kruntimes.journal import redact
from kruntimes.journal.store import backends, engines, migrate
from tests.journal.history_journal import PHASE2, Generated, load

pytest_plugins = ("tests.journal.history_fixtures",)  # the generated journal's fixtures

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    """Standard input that is a terminal whose person types ``answer``."""

    def isatty(self) -> bool:
        return True


def kruntimes(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def count(url: str) -> int:
    engine = engines.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM journal_records")).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def loaded(journal_url: str, generated: Generated) -> str:
    load(journal_url, generated)
    return journal_url


PRUNE = ("journal", "prune", "--before", (PHASE2 - timedelta(minutes=30)).isoformat())


def test_prune_without_a_terminal_refuses_and_deletes_nothing(loaded: str, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # piped input is not a terminal: never read
    before = count(loaded)
    code, _, err = kruntimes(capsys, *PRUNE, "--journal", loaded)
    assert code == 2 and "stdin is not a terminal; pass --yes" in err
    assert count(loaded) == before


@pytest.mark.parametrize("answer,deletes", [("y\n", True), ("yes\n", True), ("n\n", False), ("\n", False), ("", False)],
                         ids=["y", "yes", "n", "just enter", "end of input"])
def test_prune_on_a_terminal_shows_what_would_go_and_deletes_only_when_told(
        loaded: str, answer: str, deletes: bool, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    before = count(loaded)
    code, out, err = kruntimes(capsys, *PRUNE, "--journal", loaded)
    assert out.startswith("would delete ") and "[y/N]" in out
    if deletes:
        assert code == 0 and out.split("[y/N]")[1].strip().startswith("deleted ") and count(loaded) < before
    else:
        assert code == 1 and "nothing was changed" in err and count(loaded) == before


def test_downgrade_to_base_refuses_without_a_terminal_and_asks_on_one(
        loaded: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, _, err = kruntimes(capsys, "db", "downgrade", "base", "--journal", loaded)
    assert code == 2 and "pass --yes" in err and migrate.current_revision(loaded) == migrate.head_revision()

    monkeypatch.setattr(sys, "stdin", Terminal("no\n"))
    code, out, err = kruntimes(capsys, "db", "downgrade", "base", "--journal", loaded)
    assert code == 1 and "drops every journal table and record" in out
    assert migrate.current_revision(loaded) == migrate.head_revision()

    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    code, out, _ = kruntimes(capsys, "db", "downgrade", "base", "--journal", loaded)
    assert code == 0 and migrate.current_revision(loaded) is None


def test_upgrade_refuses_a_database_that_holds_other_tables_unless_allowed(
        journal_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    engine = engines.create_engine(journal_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE invoices (id INTEGER PRIMARY KEY)"))
    finally:
        engine.dispose()
    code, _, err = kruntimes(capsys, "db", "upgrade", "--journal", journal_url)
    assert code == 2 and "holds other tables (invoices)" in err and "--allow-foreign-tables" in err
    assert migrate.current_revision(journal_url) is None

    code, _, _ = kruntimes(capsys, "db", "upgrade", "--journal", journal_url, "--allow-foreign-tables")
    assert code == 0 and migrate.current_revision(journal_url) == migrate.head_revision()
    code, _, _ = kruntimes(capsys, "db", "upgrade", "--journal", journal_url)  # its own journal now: no question
    assert code == 0


SECRET = "Zq7secretPw"
MALFORMED = {
    "a port that is not a number": f"postgresql+psycopg://kr:{SECRET}@db:notaport/kruntimes",
    "a port out of range": f"postgresql+psycopg://kr:{SECRET}@127.0.0.1:99999/kruntimes",
    "an unclosed IPv6 bracket": f"postgresql+psycopg://kr:{SECRET}@[::1/kruntimes",
    "an unknown scheme": f"nosuchdb://kr:{SECRET}@db/kruntimes",
    "no scheme at all": f"kr:{SECRET}@db/kruntimes",
    "an unescaped @ in the password": f"postgresql+psycopg://kr:{SECRET}@x@127.0.0.1:1/kruntimes",
    "a : in the password": f"postgresql+psycopg://kr:a:{SECRET}@127.0.0.1:1/kruntimes",
    "the password in the query": f"postgresql+psycopg://kr@127.0.0.1:1/kruntimes?password={SECRET}",
    "a port and nothing after": f"postgresql+psycopg://kr:{SECRET}@db:",
}
COMMANDS = {
    "history": ("history", "cycles", "--journal"),
    "prune": ("journal", "prune", "--before", "1d", "--yes", "--journal"),
    "db upgrade": ("db", "upgrade", "--journal"),
    "db downgrade": ("db", "downgrade", "base", "--yes", "--url"),
    "replay": ("replay", "verify", "--journal"),
}


@pytest.mark.parametrize("url", MALFORMED.values(), ids=list(MALFORMED))
@pytest.mark.parametrize("command", COMMANDS.values(), ids=list(COMMANDS))
def test_no_command_prints_the_password_of_a_malformed_url(command: tuple[str, ...], url: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = kruntimes(capsys, *command, url)
    assert code == 2 and len(err.strip().splitlines()) <= 2  # the error (and a deprecation note)
    assert SECRET not in out + err and "***" in err


@pytest.mark.parametrize("url", MALFORMED.values(), ids=list(MALFORMED))
def test_the_scheduler_journal_check_never_shows_the_password(url: str) -> None:
    try:
        scheduler_cmd.check_journal(url)  # checks the URL's form only; a URL that parses passes
    except scheduler_cmd.UsageError as exc:
        assert SECRET not in str(exc) and "***" in str(exc)


@pytest.mark.parametrize("url", MALFORMED.values(), ids=list(MALFORMED))
def test_a_redacted_url_keeps_no_part_of_the_password(url: str) -> None:
    shown = redact.url(url)
    assert SECRET not in shown and "***" in shown
    assert SECRET not in redact.text(f"cannot use {url} nor {url!r}", url)


def test_the_demo_never_shows_the_password_of_a_malformed_url() -> None:
    done = subprocess.run([sys.executable, "-m", "kruntimes.cli.main", "demo", "--journal",
                           MALFORMED["a port that is not a number"]], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 2 and SECRET not in done.stdout + done.stderr
