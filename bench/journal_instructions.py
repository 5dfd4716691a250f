"""The scheduling thread's own price for the journal, in instructions (issue 3; not a test).

bench/journal_overhead.py measures seconds, and on a shared machine its journal-off
runs alone can spread by a factor of 1.5 within minutes. Instruction counts do not
move with the machine's mood: valgrind's callgrind counts the same total for the same
code and input (here to ~0.2%; PYTHONHASHSEED is fixed so that set and dict order, and
with it the work, is the same each run).

The same workload as journal_overhead.py (the demo's, every ``--every``-th Run, one
worker, in-memory API) is scheduled under callgrind in three settings:

- journal off;
- records made: the journal on, every record numbered, built and buffered, the
  buffer emptied every 64 records without pickling - numbering and buffering alone;
- own share: as records made, but each 64 records are pickled as the process
  writer's producer does, then discarded.

Each setting runs twice, once stopping before the first cycle; the difference is the
scheduling's count. The ratio off / setting is the throughput ratio the scheduling
thread would see if an instruction cost the same everywhere. What this cannot show:
the writer process on the other core, its sender and receiver threads here, and the
cost of memory traffic that instructions do not count - journal_overhead.py's
seconds include those.

    python bench/journal_instructions.py [--every 10]     # ~5 minutes on 2 CPUs
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench.journal_overhead, when run as a script

SETTINGS = ("journal off", "records made", "own share")
_COLLECTED = re.compile(r"==\d+== Collected : (\d+)")


def collected(valgrind_stderr: str) -> int:
    """The instruction count callgrind reports when the program ends."""
    match = _COLLECTED.search(valgrind_stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{valgrind_stderr[-2000:]}")
    return int(match.group(1))


def child(setting: str, every: int, setup_only: bool) -> int:
    """Prepare (and unless ``setup_only``, schedule) the workload; the number of cycles run."""
    from bench.journal_overhead import Discard, drain, prepare
    from kruntimes.journal.write.recorder import JournalRecorder

    recorder = None if setting == "journal off" else JournalRecorder(
        Discard(pickle=setting == "own share"), start_lsn=0)
    scheduler = prepare(recorder, every=every)
    return 0 if setup_only else drain(scheduler)[0]


def _measure(setting: str, every: int, setup_only: bool) -> tuple[int, int]:
    """(instructions, cycles) of one child under callgrind."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               sys.executable, __file__, "--child", setting, "--every", str(every)]
    if setup_only:
        command.append("--setup-only")
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(ROOT))
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{setting}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return collected(done.stderr), int(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=10, help="schedule every N-th Run of the demo (default 10)")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    parser.add_argument("--setup-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error("--every must be at least 1")
    if args.child:
        from kruntimes import gctuning

        gctuning.tune()  # as the scheduler and journal_overhead.py do; here, not in child(), which tests call
        print(child(args.child, args.every, args.setup_only))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind not found: this benchmark counts instructions with valgrind's callgrind")
        return 1
    per_cycle: dict[str, float] = {}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for setting in SETTINGS:
            setup = pool.submit(_measure, setting, args.every, True)
            run = pool.submit(_measure, setting, args.every, False)
            (before, _), (total, cycles) = setup.result(), run.result()
            per_cycle[setting] = (total - before) / cycles
            print(f"  {setting}: {total - before:,} instructions for {cycles:,} cycles", flush=True)
    off = per_cycle["journal off"]
    print(f"{'setting':<16}{'instructions/cycle':>20}{'vs off':>9}{'ratio off/setting':>19}")
    for setting in SETTINGS:
        value = per_cycle[setting]
        print(f"{setting:<16}{value:>20,.0f}{value / off - 1:>+9.1%}{off / value:>19.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
