"""A replica killed while its database hangs loses at most its writer's bound, and never silently.

Issue 22 item 2 (SPEC §5 "Availability", "Crash vs loss"): SIGKILLed 4-8 s into a
blackhole, a scheduler once lost 622-1,417 records its writer process held in memory,
and ``replay verify`` passed. Here a producer process (a scheduler's journal side:
``ProcessJournalWriter`` and its writer process) appends records while the database
is blackholed and is killed with its whole process group, as a container is. Every
record it had appended a while before the kill must be in the database once its
spool is recovered, or named by verify as lost in the crash (its unacknowledged tail:
verify still passes, nothing acknowledged is missing).
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

from kruntimes.journal.store import backends
from kruntimes.journal.write import settings
from kruntimes.journal.write.recovery import SpoolRecovery
from replay import ends, integrity
from tests.integration.db_proxy import ProxiedJournal, proxied_journal  # noqa: F401 - the fixture
from tests.journal.test_epochs_writer import E1

WAIT = 60.0
RATE = 500  # records a second
#: (the writer's write_timeout, seconds into the blackhole when the replica is killed)
KILLS = {
    "killed while its writer still waits for the database's answer: the tail is lost and named": (3.0, 0.6),
    "killed after several bounds: what waited longer than the bound is in the spool": (0.5, 3.0),
}

PRODUCER = textwrap.dedent("""
    import sys, time
    from kruntimes.journal.write import settings
    from kruntimes.journal.write.process import ProcessJournalWriter
    from tests.journal.factories import record
    from tests.journal.test_epochs_writer import E1, epoch_records

    url, spool = sys.argv[1], sys.argv[2]
    w = ProcessJournalWriter(settings.Store(url), settings.Spool(spool), epochs=settings.Epochs(epoch=E1),
                             patience=settings.Patience(write_timeout=float(sys.argv[3]), retry_interval=0.05,
                                                        max_retry_interval=0.2))
    for r in epoch_records(E1, 1, 100):
        w.append(r)
    assert w.flush(60)
    print(100, flush=True)
    sys.stdin.readline()  # the database hangs from now on
    lsn = 100
    while True:  # RATE records a second; each line is printed well after its records were sent
        for _ in range(50):
            lsn += 1
            w.append(record(lsn, incarnation=E1))
        time.sleep(0.1)
        print(lsn, flush=True)
""")


@pytest.mark.parametrize(("bound", "hang"), KILLS.values(), ids=KILLS.keys())
def test_a_replica_killed_during_a_blackhole_keeps_or_names_every_record_it_handed_over(
        bound: float, hang: float, proxied_journal: ProxiedJournal, tmp_path: Path) -> None:
    spool = tmp_path / "journal.spool"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, proxied_journal.url, str(spool), str(bound)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    assert producer.stdin is not None and producer.stdout is not None
    try:
        assert producer.stdout.readline().strip() == "100"
        proxied_journal.proxy.cut("blackhole")
        producer.stdin.write("go\n")
        producer.stdin.flush()
        appended = 100
        lines = int(hang / 0.1)
        for _ in range(lines):
            appended = int(producer.stdout.readline())
    finally:
        os.killpg(producer.pid, signal.SIGKILL)  # the scheduler and its writer process, as a container is
        producer.wait(WAIT)
    proxied_journal.proxy.restore()

    stored, report = recover_and_check(proxied_journal.url, proxied_journal.direct, spool, E1)
    first, last = report.lost_in_crash or (0, -1)
    lost = set(range(first, last + 1))
    assert set(range(1, appended + 1)) <= stored | lost, "records handed over went missing without a word"
    assert stored.isdisjoint(lost) and len(lost) <= int(2 * bound * RATE)
    assert report.state == ends.ENDED and report.end_reason == ends.RECOVERED
    assert report.ok, "a crash's unacknowledged tail is named, not damage"
    assert report.handed_lsn is not None and report.handed_lsn >= appended


def recover_and_check(url: str, direct: str, spool: Path, epoch: str) -> tuple[set[int], integrity.EpochReport]:
    """The replica restarts as a standby: its recovery drains the spool and closes the killed epoch.

    Returns the LSNs then stored of ``epoch`` (its end record aside) and verify's report of the journal's one epoch.
    """
    recovery = SpoolRecovery(url, str(spool), migrate=False, patience=settings.Patience(retry_interval=0.05),
                             registry=CollectorRegistry()).start()
    try:
        assert recovery.drained.wait(WAIT)
    finally:
        recovery.stop()
    journal = backends.Journal.open(direct, create=False)
    try:
        stored = {r.lsn for r in journal.read_encoded(epoch) if r.kind != "end"}
        [report] = integrity.check(journal)
    finally:
        journal.close()
    return stored, report
