"""A replica killed during a blackhole before one record of its new epoch was stored: verify names them all.

Issue 22: the database blackholed from before the epoch began, so the epoch numbered
from 1 (the highest LSN its process knew without waiting), overlapping an older
epoch's LSNs, and not one of its records reached the database; the scheduler and its
writer process are killed with their process group inside the write timeout, so the
spool holds none either. The replica restarts a standby: its recovery closes the epoch
with the end that names the LSNs lost, and ``replay verify`` reports them by epoch and
LSN range and exits 0. PostgreSQL, through the test proxy that blackholes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from kruntimes.cli import main as cli
from kruntimes.journal.store import backends
from kruntimes.journal.write import settings
from kruntimes.journal.write.recovery import SpoolRecovery, has_records, left_behind
from replay import ends, integrity
from tests.integration.db_proxy import ProxiedJournal, proxied_journal  # noqa: F401 - the fixture
from tests.journal.factories import record
from tests.journal.test_kill_during_hang import WAIT

OLDER = "a" * 32

PRODUCER = textwrap.dedent("""
    import os, sys
    from kruntimes.journal.write import settings
    from kruntimes.journal.write.session import JournalSession
    from kruntimes.scheduler.config import SchedulerConfig

    session = JournalSession(sys.argv[1], SchedulerConfig(), spool_path=sys.argv[2], writer="process",
                             migrate=False, patience=settings.Patience(write_timeout=30.0))
    print(session.epoch, session.first_lsn, flush=True)
    for n in range(200):  # each line once its record is handed over
        lsn = session.recorder.record("bind", {"namespace": "ns", "run_uid": f"u{n}", "result": "ok"})
        os.write(1, b"%d\\n" % lsn)
    sys.stdin.readline()  # killed while it waits
""")


def test_an_epoch_killed_before_its_first_write_is_named_by_verify(proxied_journal: ProxiedJournal,
                                                                   tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    journal = backends.Journal.open(proxied_journal.direct, create=False)
    try:  # an older epoch, ended: LSNs 1..40
        journal.append_batch([record(1, "incarnation", {"version": "1", "config_hash": "c"}, incarnation=OLDER),
                              *(record(n, "leader", {"event": "acquired", "identity": OLDER}, incarnation=OLDER)
                                for n in range(2, 40)),
                              record(40, "end", {"reason": "shutdown"}, incarnation=OLDER)])
    finally:
        journal.close()
    spool = tmp_path / "journal.spool"
    proxied_journal.proxy.cut("blackhole")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, proxied_journal.url, str(spool)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    assert producer.stdin is not None and producer.stdout is not None
    try:
        epoch, first = producer.stdout.readline().split()
        appended = [int(producer.stdout.readline()) for _ in range(200)]
    finally:
        os.killpg(producer.pid, signal.SIGKILL)  # the scheduler and its writer process, as a container is
        producer.wait(WAIT)
    proxied_journal.proxy.restore()
    assert int(first) == 1 and appended[-1] == 201  # numbered from 1: the database did not answer
    assert left_behind(spool) and not has_records(spool)  # its epoch noted open, nothing spooled

    recovery = SpoolRecovery(proxied_journal.url, str(spool), migrate=False, patience=settings.Patience(retry_interval=0.05),
                             registry=CollectorRegistry()).start()  # the replica restarts, a standby
    try:
        assert recovery.drained.wait(WAIT)
    finally:
        recovery.stop()
    journal = backends.Journal.open(proxied_journal.direct, create=False)
    try:
        (end,) = journal.read(epoch)
        reports = {r.epoch: r for r in integrity.check(journal)}
    finally:
        journal.close()
    assert (end.lsn, end.kind) == (202, "end")
    assert reports[epoch].ok and reports[epoch].state == ends.ENDED and reports[epoch].lost_in_crash == (1, 201)
    assert reports[OLDER].ok
    assert cli.main(["replay", "verify", "--journal", proxied_journal.direct]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"records lost in a crash: epoch {epoch}, LSNs 1..201" in out
