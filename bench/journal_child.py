"""The journal writer process's CPU per 1,000-pod scheduling cycle, its work done in one process (not a test).

What ``python -m kruntimes.journal.write.child`` does with what the scheduler hands it,
without the pipe and its pacing, so that CPU time can be read for every thread at once
(``time.process_time``) on a shared machine:

- the records: a ``JournalRecorder`` on bench/planner.py's cache (1,000 Runtime Pods,
  10,000 active Runs), a fixed clock and epoch; per cycle the Run's ADDED, the cycle, the
  reserve and a bind. Deferred, as the scheduler hands them over, and pickled by
  ``wire`` into one message per ``--per-message`` cycles, as its sender does (untimed);
- per message, timed: ``wire.chunks_of``, the child's unwrap, ``handover.Mark.advance``,
  ``JournalWriter.extend`` and a flush (one batch per message: building the payloads,
  the chain, ``append_batch`` with the history tables inline, the commit), on SQLite.

Rounds of each checkout alternate (``--against`` another checkout, e.g. ``git archive
<rev> | tar -x -C /tmp/before``); each prints its rounds and their minimum. With
``--keep DIR`` a checkout's first round leaves its journal in ``DIR/<n>/journal.db``:
the records are the same for any code that stores the same bytes, so the two journals'
tables can be compared row for row.

    python bench/journal_child.py [--cycles 1200] [--per-message 4] [--rounds 3] [--repeat 3]
                                  [--against PATH] [--keep DIR]
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
EPOCH = "e" * 32
WARM_MESSAGES = 3  # the writer's start-up (its schema check, its first connection): not timed


class _Capture:
    """The recorder's sink: keeps the deferred records it is handed."""

    accepts_deferred = True

    def __init__(self) -> None:
        self.records: list[Any] = []

    def append(self, record: Any) -> None:
        self.records.append(record)


def messages(cycles: int, per_message: int) -> list[bytes]:
    """The sender's messages for ``cycles`` scheduling cycles of bench/planner.py's 1,000-pod cell."""
    from bench import planner as bp
    from kruntimes.journal.write import wire
    from kruntimes.journal.write.recorder import JournalRecorder
    from kruntimes.scheduler.config import SchedulerConfig

    config = SchedulerConfig()
    cycle = bp.RealCycle(bp.Workload.build(1000, 10_000, headroom=cycles // 1000 + 20), config)
    tick, sink = itertools.count(), _Capture()
    recorder = JournalRecorder(sink, start_lsn=0, incarnation=EPOCH,
                               clock=lambda: T0 + timedelta(microseconds=next(tick)))
    recorder.start(config, top_candidates=5, instance="bench")
    cycle.cache.recorder, recorder.state_source, cycle.cache.lsn = recorder, cycle.cache, recorder.lsn
    out, sent = [], 0
    for j, run in enumerate(itertools.islice(bp.pending_runs(), cycles)):
        cycle.admit([run])
        outcome = cycle(run)
        with cycle.cache.lock:
            cycle.cache.record("cycle", {"outcome": outcome, "result": "scheduled", "duration": 0.0005})
            cycle.cache.record("bind", {"namespace": run.namespace, "run": run.name, "run_uid": run.uid,
                                        "pod": outcome.chosen, "result": "bound"})
        if (j + 1) % per_message == 0:
            out.append(wire.chunks_message([wire.dumps([tuple(r) for r in sink.records[sent:]])]))
            sent = len(sink.records)
    return out


def store(data: list[bytes], directory: str) -> float:
    """CPU seconds of every thread of this process to store ``data`` (after the warm-up messages)."""
    from kruntimes.journal.store import backends
    from kruntimes.journal.write import child, handover, settings, wire
    from kruntimes.journal.write.writer import JournalWriter

    url = f"sqlite:///{directory}/journal.db"
    backends.Journal.open(url).close()
    journal = backends.Journal.deferred(url, migrate=False)
    writer = JournalWriter(journal, settings.Spool(f"{directory}/spool"), epochs=settings.Epochs(epoch=EPOCH)).start()
    mark = handover.Mark(f"{directory}/spool", EPOCH)

    def take(message: bytes) -> None:
        received: list[Any] = []
        for chunk in wire.chunks_of(message):
            received += chunk
        _, batch = child._unwrap(received)
        mark.advance(batch)
        writer.extend(batch)
        assert writer.flush(60), "the writer did not store a message's records"

    try:
        for message in data[:WARM_MESSAGES]:
            take(message)
        started = time.process_time()
        for message in data[WARM_MESSAGES:]:
            take(message)
        return time.process_time() - started
    finally:
        writer.close(30)
        mark.close(ended=True)
        journal.close()


def one(args: argparse.Namespace) -> None:
    """This process's checkout: its rounds, in µs of CPU per cycle."""
    data = messages(args.cycles, args.per_message)
    timed = (len(data) - WARM_MESSAGES) * args.per_message
    found = []
    for i in range(args.rounds):
        keep = Path(args.keep) if args.keep and i == 0 else None
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            found.append(store(data, str(keep)))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            found.append(store(data, tmp))
    each = " ".join(f"{s / timed * 1e6:.0f}" for s in found)
    print(f"{args.tree:<40} {each:<20} min {min(found) / timed * 1e6:6.0f} µs/cycle", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=1200)
    parser.add_argument("--per-message", type=int, default=4, help="cycles a message (one batch each)")
    parser.add_argument("--rounds", type=int, default=3, help="stores of the same messages per process")
    parser.add_argument("--repeat", type=int, default=3, help="processes per checkout, alternating")
    parser.add_argument("--against", help="another checkout, measured alternately beside this one")
    parser.add_argument("--keep", help="leave each checkout's first journal in KEEP/<n>/journal.db")
    parser.add_argument("--tree", help=argparse.SUPPRESS)  # set for the processes this one starts
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
        one(args)
        return
    trees = [str(HERE)] + ([str(Path(args.against).resolve())] if args.against else [])
    print(f"{args.cycles:,} cycles at 1,000 pods, {args.per_message} a message; {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}; child CPU µs per cycle, each round of each process")
    for repeat in range(args.repeat):
        for n, tree in enumerate(trees):
            keep = [] if not args.keep or repeat else ["--keep", str(Path(args.keep) / str(n))]
            subprocess.run([sys.executable, __file__, "--tree", tree, "--cycles", str(args.cycles),
                            "--per-message", str(args.per_message), "--rounds", str(args.rounds), *keep],
                           check=True, env={**os.environ, "PYTHONPATH": tree})


if __name__ == "__main__":
    main()
