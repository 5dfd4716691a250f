"""No command prints a journal's password (docs/journal.md), whichever command and whatever it prints.

Every command that shows a journal URL renders it through ``redact.url``; these tests run
each of them on one PostgreSQL journal whose URL carries a password (loopback trusts it,
so the password is only ever text to leak) and read everything it wrote.
"""

from __future__ import annotations

import contextlib
import io
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from kruntimes import demo
from kruntimes.cli import main as cli
from kruntimes.ui import server
from tests.integration.cluster import wait_for
from tests.integration.processes import kubeconfig, run_scheduler  # noqa: F401 - the fixtures
from tests.journal.conftest import postgres_base_url  # noqa: F401 - the fixture
from tests.journal.history_journal import fresh_postgres_schema

SECRET = "Zq7secretPw"


@pytest.fixture(scope="module")
def secret_journal(postgres_base_url: str) -> Iterator[str]:  # noqa: F811 - the imported fixture
    """A PostgreSQL journal URL with a password in it, in a schema of its own."""
    with fresh_postgres_schema(postgres_base_url) as url:
        yield sa.make_url(url).set(password=SECRET).render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def demo_output(secret_journal: str) -> Iterator[tuple[int, str]]:
    """`kruntimes demo --journal URL` on a twentieth of its workload: exit code and all it printed."""
    real = demo.run
    with pytest.MonkeyPatch.context() as patch, _Captured() as out:
        patch.setattr(demo, "run", lambda **kwargs: real(**kwargs, scale=0.05))
        code = cli.main(["demo", "--journal", secret_journal])
    yield code, out.text


class _Captured:
    """stdout and stderr of the commands run inside it (module-scoped fixtures cannot use capsys)."""

    def __enter__(self) -> _Captured:
        self._buffer = io.StringIO()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(contextlib.redirect_stdout(self._buffer))
        self._stack.enter_context(contextlib.redirect_stderr(self._buffer))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        self.text = self._buffer.getvalue()


def test_the_demo_on_a_journal_with_a_password_never_prints_it(demo_output: tuple[int, str]) -> None:
    code, out = demo_output
    assert code == 0 and "postgresql+psycopg://postgres:***@" in out, out
    assert SECRET not in out
    assert "*** stands for the password" in out  # the follow-up commands say what to put there


COMMANDS = {
    "history run": ("history", "run", "demo/py-0001"),
    "history run of no such Run": ("history", "run", "demo/no-such-run"),
    "history pod": ("history", "pod", "demo/python-00001", "--at", "now"),
    "history cycles": ("history", "cycles", "--outcome", "unschedulable"),
    "history waits": ("history", "waits"),
    "history held": ("history", "held", "demo/python-00001", "--at", "now"),
    "history decisions": ("history", "decisions", "--since", "1h"),
    "history churn": ("history", "churn", "--since", "1h"),
    "history conflicts": ("history", "conflicts", "--since", "1h"),
    "replay verify": ("replay", "verify"),
    "replay cycle": ("replay", "cycle", "--last"),
    "replay what-if": ("replay", "what-if", "--since", "1h", "--weights", "LeastLoaded=3"),
    "journal index": ("journal", "index"),
    "journal reindex": ("journal", "reindex"),
    "journal prune, a dry run": ("journal", "prune", "--before", "1h", "--dry-run"),
    "db upgrade": ("db", "upgrade"),
}


@pytest.mark.parametrize("command", COMMANDS.values(), ids=list(COMMANDS))
def test_no_journal_command_prints_the_password(command: tuple[str, ...], demo_output: tuple[int, str],
                                                secret_journal: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main([*command, "--journal", secret_journal])
    out, err = capsys.readouterr()
    assert SECRET not in out + err


@pytest.mark.parametrize("command", COMMANDS.values(), ids=list(COMMANDS))
def test_no_journal_command_prints_the_password_of_a_database_that_does_not_answer(
        command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main([*command, "--journal", f"postgresql+psycopg://kr:{SECRET}@127.0.0.1:1/kruntimes"])
    out, err = capsys.readouterr()
    assert code == 2 and SECRET not in out + err and "***" in err


def test_the_ui_start_up_line_masks_the_password(demo_output: tuple[int, str], secret_journal: str,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[Any] = []

    def stop_at_once(self: Any) -> None:
        served.append(self)
        raise KeyboardInterrupt  # as Ctrl-C would, right after the start-up line

    monkeypatch.setattr(server._Server, "serve_forever", stop_at_once)
    assert cli.main(["ui", "--journal", secret_journal, "--listen", "127.0.0.1:0"]) == 0
    out, err = capsys.readouterr()
    assert served and "serving postgresql+psycopg://postgres:***@" in err
    assert SECRET not in out + err


def test_the_scheduler_start_logs_mask_the_password(run_scheduler: Any, secret_journal: str,  # noqa: F811
                                                    kube_namespace: str, tmp_path: Path) -> None:
    process = run_scheduler("--namespace", kube_namespace, "--leader-elect-resource-namespace", kube_namespace,
                            "--http-address", "127.0.0.1", "--http-port", "0",
                            "--journal", secret_journal, "--journal-migrate", "auto",
                            "--journal-spool", str(tmp_path / "spool"))
    wait_for(lambda: process.get("/readyz")[0] == 200, timeout=60, what="/readyz 200")
    process.popen.send_signal(signal.SIGTERM)
    assert process.finish() == 0
    logs = "\n".join(process.lines)
    assert "postgresql+psycopg://postgres:***@" in logs
    assert SECRET not in logs
