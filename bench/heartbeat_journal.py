"""What runtimed's heartbeats cost the journal: records/s and bytes/s, against the scheduling records.

Every runtimed renews its pod's `kruntimes.io/runtimed-heartbeat` annotation every
`heartbeat_period` seconds (default `runtimed.agent.DEFAULT_HEARTBEAT_PERIOD`), and the
scheduler applies every pod event it watches through `ClusterCache.upsert_pod`,
which journals it. This counts what that costs, with the real cache and the real
journal (SQLite, the default writer):

1. heartbeats: `--pods` Runtime Pods, Ready with fresh heartbeats, then `--rounds`
   renewal rounds (every pod once per period, in simulated time; a scheduling cycle
   is planned every simulated second, so the renewals a cycle needs are counted).
   Records and bytes per round, divided by the period; twice: with every renewal
   journaled (as before `scheduler.renewals`) and with renewals held until a
   cycle's verdict could depend on them (now).
2. scheduling: `kruntimes demo` (at `--demo-scale`) with its journal; its records
   other than pod events, per second of the demo and per Run.

    python bench/heartbeat_journal.py                      # 1,000 pods, the whole demo (~1 min)
    python bench/heartbeat_journal.py --pods 50 --rounds 2 --demo-scale 0.05
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kruntimes import demo, gctuning  # noqa: E402
from kruntimes.journal.write.session import JournalSession  # noqa: E402
from kruntimes.runtimed.agent import DEFAULT_HEARTBEAT_PERIOD  # noqa: E402
from kruntimes.scheduler import renewals  # noqa: E402
from kruntimes.scheduler.cache import ClusterCache  # noqa: E402
from kruntimes.scheduler.config import SchedulerConfig  # noqa: E402
from kruntimes.scheduler.projection import PodInfo, RunInfo  # noqa: E402

PERIOD = DEFAULT_HEARTBEAT_PERIOD
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def _stats(db: str, after_lsn: int, where: str = "1=1") -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        count, size = conn.execute(f"SELECT count(*), coalesce(sum(length(payload) + length(payload_sha256) "
                                   f"+ length(incarnation) + 40), 0) FROM journal_records "
                                   f"WHERE lsn > ? AND {where}", (after_lsn,)).fetchone()
    return int(count), int(size)


def heartbeats(pods: int, rounds: int, work: Path, *, hold: bool = True) -> tuple[float, float, int]:
    """(records per round, bytes per round, pods)."""
    db = f"{work}/heartbeats-{hold}.db"
    held = renewals.Renewals.hold
    if not hold:
        renewals.Renewals.hold = lambda *args: False  # type: ignore[method-assign, assignment]
    try:
        return _heartbeats(db, pods, rounds)
    finally:
        renewals.Renewals.hold = held  # type: ignore[method-assign]


def _heartbeats(db: str, pods: int, rounds: int) -> tuple[float, float, int]:
    config = SchedulerConfig()
    session = JournalSession(f"sqlite:///{db}", config)
    cache = ClusterCache(config, session.recorder)
    session.attach(cache)
    infos = [PodInfo(namespace="bench", name=f"python-{i:04d}", uid=f"uid-{i}", runtime="python",
                     resource_version="1", ready=True, heartbeat=T0, capacity=(("runs", 4),)) for i in range(pods)]
    for info in infos:
        cache.upsert_pod(info, now=T0, event="ADDED")
    probe = RunInfo(namespace="bench", name="probe", uid="probe", runtime="python")
    # Warm-up rounds (one staleness window), not counted: every applied heartbeat starts
    # at T0, so held renewals first come due after a window; counted rounds are the steady state.
    warm = -(-config.heartbeat_staleness_seconds // int(PERIOD))
    start = cache.lsn
    rv = 1
    for r in range(1, warm + rounds + 1):
        if r == warm + 1:
            start = cache.lsn
        for i, info in enumerate(infos):
            # Renewals spread over the period, as independent runtimeds send them.
            at = T0 + timedelta(seconds=(r - 1) * PERIOD + PERIOD * i / pods)
            rv += 1
            infos[i] = replace(info, heartbeat=at, resource_version=str(rv))
            cache.upsert_pod(infos[i], now=at)
            if i % max(1, pods // int(PERIOD)) == 0:  # about one cycle per simulated second
                with cache.lock:
                    cache.snapshot(probe, at)
    end = cache.lsn
    session.close()
    count, size = _stats(db, start, "kind != 'end'")  # the session's end record is not a renewal
    assert count == end - start, (count, end - start)  # every record of the counted rounds is in the table
    return count / rounds, size / rounds, pods


def scheduling(scale: float, work: Path) -> tuple[int, int, int, int, float, int]:
    """(scheduling records, their bytes, pod-event records, their bytes, demo seconds, Runs) of one demo."""
    db = f"{work}/demo.db"
    report = demo.run(journal=f"sqlite:///{db}", scale=scale)
    pod = "kind = 'mutation' AND payload LIKE '%\"kind\":\"Pod\"%'"
    records, size = _stats(db, 0, f"kind NOT IN ('incarnation', 'checkpoint') AND NOT ({pod})")
    pod_records, pod_size = _stats(db, 0, pod)
    return records, size, pod_records, pod_size, report.seconds, report.runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--demo-scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    gctuning.tune()
    with tempfile.TemporaryDirectory(prefix="kruntimes-bench-") as tmp:
        every = heartbeats(args.pods, args.rounds, Path(tmp), hold=False)
        per_round, bytes_round, pods = heartbeats(args.pods, args.rounds, Path(tmp))
        records, size, pod_records, pod_size, seconds, runs = scheduling(args.demo_scale, Path(tmp))
    hb_rate, hb_bytes = per_round / PERIOD, bytes_round / PERIOD
    sched_rate, sched_bytes = records / seconds, size / seconds
    print(f"heartbeat journaling: {pods} pods, renewal period {PERIOD:g} s (runtimed's default), "
          f"{args.rounds} rounds")
    print(f"{'':<44} {'records/s':>10} {'bytes/s':>10} {'bytes/record':>13}")
    print(f"{'heartbeats, every renewal journaled (before)':<44} {every[0] / PERIOD:>10.1f} "
          f"{every[1] / PERIOD:>10.0f} {every[1] / max(every[0], 1):>13.0f}")
    print(f"{'heartbeats, renewals held (now)':<44} {hb_rate:>10.1f} {hb_bytes:>10.0f} "
          f"{bytes_round / max(per_round, 1):>13.0f}")
    print(f"{f'demo scheduling records ({runs} Runs, {seconds:.0f} s)':<44} {sched_rate:>10.1f} "
          f"{sched_bytes:>10.0f} {size / max(records, 1):>13.0f}")
    print(f"{'demo pod-event records (adds, Ready, beats)':<44} {pod_records / seconds:>10.1f} "
          f"{pod_size / seconds:>10.0f} {pod_size / max(pod_records, 1):>13.0f}")
    for label, rate, rate_bytes in (("every renewal", every[0] / PERIOD, every[1] / PERIOD),
                                    ("held", hb_rate, hb_bytes)):
        print(f"heartbeats at {pods} pods, {label}: {100 * rate / sched_rate:.1f}% of the demo's scheduling "
              f"record rate, {100 * rate_bytes / sched_bytes:.1f}% of its bytes; per day {rate * 86400:,.0f} "
              f"records, {rate_bytes * 86400 / 1e6:,.0f} MB")
    print(f"the demo's scheduling records per Run: {records / runs:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
