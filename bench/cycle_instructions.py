"""A benchmark cycle's count in instructions (valgrind's callgrind), as the planner's `*_instructions.py` take it.

A script counts by running itself under callgrind as a child (`--child ARGS`) with a
checkout's code on its PYTHONPATH (`--root`, this one by default), once with
`--cycles` measured cycles after its warm-up and once with none: the difference over
`--cycles` is one cycle's count, which does not move with the machine's load.
PYTHONHASHSEED is fixed so that set and dict order, and with them the work, are the
same each run.

The scripts import this module from their own folder, not as `bench.`, so that
`--root` may name a checkout that does not have it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def add_options(parser: argparse.ArgumentParser, *, root_help: str) -> None:
    """The options every such script takes: `--active`, `--cycles`, `--root` and the child's `--child`."""
    parser.add_argument("--active", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--root", type=Path, default=ROOT, help=root_help)
    parser.add_argument("--child", help=argparse.SUPPRESS)


def instructions(script: str, root: Path, child: str) -> int:
    """What callgrind counts in one run of `script --child child` with `root`'s code."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = dict(os.environ, PYTHONPATH=str(root), PYTHONHASHSEED="0")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        sys.executable, str(Path(script).resolve()), "--child", child],
                       check=True, env=env, cwd=root, capture_output=True)
        text = out.read_text()
    found = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.MULTILINE)
    assert found is not None, "no totals in callgrind's output"
    return int(found.group(1))


def per_cycle(script: str, root: Path, child: Callable[[int], str], cycles: int) -> float:
    """One cycle's count: a child with `cycles` measured cycles, less one with none, over `cycles`.

    `child(n)` is the `--child` argument of a child that measures `n` cycles.
    """
    return (instructions(script, root, child(cycles)) - instructions(script, root, child(0))) / cycles
