"""`kruntimes crds [--write DIR]`: the Run and Runtime CRDs, generated from the models.

Prints the CustomResourceDefinitions (pipe to ``kubectl apply -f -``) or writes one file
per CRD, which is how ``deploy/crds`` is kept in step with ``kruntimes/api/models.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kruntimes.api import crds


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("crds", help="print the Run and Runtime CustomResourceDefinitions",
                       description="Print the kruntimes.io CustomResourceDefinitions generated from "
                                   "the API models, or write them to a directory.")
    p.add_argument("--write", metavar="DIR",
                   help="write one YAML file per CRD into DIR (e.g. deploy/crds) instead of printing")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.write is None:
        sys.stdout.write(crds.render_yaml())
        return 0
    try:
        written = crds.write(Path(args.write))
    except OSError as exc:
        print(f"kruntimes crds: cannot write to {args.write}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0
