"""`python -m tests.model.campaign --workloads N --seed S [--out DIR]`: the model against `simulate`.

Runs N random workloads (workload i is drawn from `random.Random(f"{S}:{i}")`, so any
one can be regenerated alone), prints the match rate (workloads fully identical, Run
decisions identical) and writes the first differing workloads as YAML into DIR.

Each differing workload is also classified: the smallest set of issue 12's defects
(`planner.QUIRKS`) whose emulation in the model makes it agree with `simulate`
("explained by"); a crash of `simulate` is classed by its exception; a workload no
combination explains is "unexplained" - a defect nobody has listed yet, or a model
bug, to be read by a person.
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import random
import sys
from collections import Counter

from tests.model import compare, planner, workloads


def classify(text: str) -> str:
    """Why this workload differs: a quirk set, a crash, or "unexplained"."""
    documents = planner.load(text)
    try:
        rows = compare.simulate_kruntimes(text, workloads.NOW)
    except Exception as exc:  # noqa: BLE001
        return f"crash {type(exc).__name__}"
    names = sorted(planner.QUIRKS)
    for size in range(1, len(names) + 1):
        for combo in itertools.combinations(names, size):
            if not compare.judge_all(documents, rows, workloads.NOW, frozenset(combo)).differences:
                return "+".join(combo)
    return "unexplained"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.model.campaign", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--seed", default="0")
    parser.add_argument("--out", default="model-differences", help="folder for the first differing workloads")
    parser.add_argument("--keep", type=int, default=10, help="how many differing workloads to write")
    parser.add_argument("--no-classify", action="store_true", help="skip the (slower) classification")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    identical = runs = runs_identical = written = 0
    classes: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for i in range(args.workloads):
        text = workloads.to_yaml(workloads.workload(random.Random(f"{args.seed}:{i}")))
        report = compare.compare(text, workloads.NOW)
        runs += report.compared
        runs_identical += report.compared - report.differing
        if not report.differences:
            identical += 1
            continue
        label = "unclassified" if args.no_classify else classify(text)
        classes[label] += 1
        examples.setdefault(label, f"{args.seed}:{i}")
        if written < args.keep or (label == "unexplained" and written < 3 * args.keep):
            out.mkdir(parents=True, exist_ok=True)
            notes = "".join(f"# {d}\n" for d in report.differences)
            (out / f"workload-{args.seed}-{i}.yaml").write_text(
                f"# seed {args.seed}:{i}, class {label}, now {workloads.NOW.isoformat()}\n{notes}{text}")
            written += 1
    n = args.workloads
    print(f"seed {args.seed}: {identical}/{n} workloads identical ({100 * identical / max(n, 1):.1f}%), "
          f"{runs_identical}/{runs} Run decisions identical ({100 * runs_identical / max(runs, 1):.2f}%)")
    for label, count in classes.most_common():
        print(f"  {count:6d}  {label}  (first: {examples[label]})")
    if written:
        print(f"first {written} differing workloads written to {out}/")
    return 0 if identical == n else 1


if __name__ == "__main__":
    sys.exit(main())
