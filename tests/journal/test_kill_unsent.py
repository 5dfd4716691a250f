"""A scheduler killed with records it had not yet sent to its writer process: verify names them (issue 22).

The recorder hands a record to the process writer's buffer; its sender sends what
gathered every 25 ms. A scheduler process killed in between (SIGKILL, the OOM killer)
takes those records with it, and the writer process, which never received them, could
not say they existed: its handed-over mark stopped at what it had received, so the
recovered epoch read "ended by a crash, nothing missing". The recorder now notes each
LSN, before it hands the record over, in a file mapped into its memory
(``handover.Numbered``), which the kill leaves in the page cache; recovery ends the
epoch after it, and verify names every record numbered and not stored. Both backends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kruntimes.journal.store import backends
from replay import ends
from tests.journal.test_kill_during_hang import recover_and_check

WAIT = 60.0
KILL_AFTER = 30_000  # records appended before the kill (the first ones reach the writer process before it)

PRODUCER = textwrap.dedent("""
    import os, sys
    from kruntimes.journal.write.session import JournalSession
    from kruntimes.scheduler.config import SchedulerConfig

    session = JournalSession(sys.argv[1], SchedulerConfig(), spool_path=sys.argv[2], writer="process")
    print(session.epoch, session.writer.pid, flush=True)
    n = 0
    while True:  # as fast as the scheduler's lock allows; each line once its record is handed over
        n += 1
        lsn = session.recorder.record("bind", {"namespace": "ns", "run_uid": f"u{n}", "result": "ok"})
        os.write(1, b"%d\\n" % lsn)
""")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")  # exited, not yet reaped


def test_records_a_killed_scheduler_had_not_sent_are_named_by_verify(journal_url: str, tmp_path: Path) -> None:
    backends.Journal.open(journal_url).close()  # migrated, as a deployment's Job does
    spool = tmp_path / "journal.spool"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, journal_url, str(spool)], stdout=subprocess.PIPE,
                                text=True, env=env, start_new_session=True)
    assert producer.stdout is not None
    try:
        epoch, writer_pid = producer.stdout.readline().split()
        appended = 0
        while appended < KILL_AFTER:
            appended = int(producer.stdout.readline())
    finally:
        producer.send_signal(signal.SIGKILL)  # the scheduler alone: its writer process stores what it received
        producer.wait(WAIT)
    appended = max([appended, *(int(line) for line in producer.stdout.read().split())])
    deadline = time.monotonic() + WAIT
    while not _gone(int(writer_pid)):
        assert time.monotonic() < deadline, "the writer process did not exit once the scheduler was gone"
        time.sleep(0.05)

    stored, report = recover_and_check(journal_url, journal_url, spool, epoch)  # the replica restarts, a standby
    first, last = report.lost_in_crash or (0, -1)
    lost = set(range(first, last + 1))
    assert set(range(min(stored), appended + 1)) <= stored | lost, "records handed over went missing without a word"
    assert report.handed_lsn is not None and report.handed_lsn >= appended
    assert report.state == ends.ENDED and report.end_reason == ends.RECOVERED
    assert report.ok, "a crash's unsent tail is named, not damage"
