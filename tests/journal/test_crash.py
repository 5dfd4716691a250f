"""A scheduler process killed mid-run loses at most its unflushed buffer, and says how far it had numbered.

The next epoch's writer drains whatever the dead one spooled and closes the dead
epoch with an ``end`` {"reason": "recovered"}: after its last durable record, and
after every LSN the dead scheduler had numbered (its numbered mark), so that the
records it had not yet sent to its writer are named lost, not gone unseen. The new
epoch numbers on right after that end record.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import sqlalchemy as sa

from kruntimes.journal.write.session import JournalSession, default_spool
from kruntimes.scheduler.config import SchedulerConfig

PRODUCER = textwrap.dedent("""
    import sys
    from kruntimes import demo
    demo.run(workers=2, journal=sys.argv[1])
""")


def _lsns(url: str) -> list[tuple[int, str, str]]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(
                "SELECT lsn, incarnation, kind FROM journal_records ORDER BY lsn"))]
    finally:
        engine.dispose()


def test_a_killed_scheduler_leaves_a_gap_free_prefix_and_the_next_incarnation_continues(
        journal_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Where the demo spools: next to a SQLite file, else in its working directory.
    spool = default_spool(journal_url) if journal_url.startswith("sqlite") else str(tmp_path / "kruntimes-journal.spool")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, journal_url], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        # Kill it once records are flowing, well before the demo ends.
        while time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                if len(_lsns(journal_url)) > 2000:
                    break
            except sa.exc.DBAPIError:
                continue  # database or schema not created yet
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
    durable = _lsns(journal_url)
    assert durable, "the producer wrote nothing before it was killed"
    assert [lsn for lsn, _, _ in durable] == list(range(1, len(durable) + 1))
    assert len({inc for _, inc, _ in durable}) == 1

    # The next incarnation drains what the dead one spooled, then continues.
    session = JournalSession(journal_url, SchedulerConfig(), spool_path=spool)
    session.close()
    after = _lsns(journal_url)
    dead = [row for row in after if row[1] == durable[0][1]]
    new = [row for row in after if row[1] != durable[0][1]]
    kept = [lsn for lsn, _, kind in dead if kind != "end"]
    assert kept == list(range(1, len(kept) + 1)), "the dead epoch's stored records are a gap-free prefix"
    assert dead[-1][2] == "end" and [kind for _, _, kind in dead].count("end") == 1
    assert dead[-1][0] > kept[-1]  # after the LSNs numbered and never sent, if any: verify names them
    assert [kind for _, _, kind in new] == ["incarnation", "end"]
    assert new[0][0] == dead[-1][0] + 1
