"""How every listing command prints: `-o table|wide|json|yaml` and `--no-headers`, as kubectl does.

One module so that the conventions cannot drift between commands:

- ``table`` fits the terminal. Only columns of free text (``wrap``: a reason, an
  error) ever wrap; names, times and numbers are never cut or wrapped. When the
  columns do not fit, the ``optional`` ones go first (right to left), then the text
  columns wrap; if names alone are wider than the terminal, the line is longer than
  the terminal rather than a name cut. ``wide`` shows every column, unwrapped.
- ``json`` and ``yaml`` print the command's document with named fields; no
  positional arrays.
- ``--no-headers`` drops column headers, titles and captions, for ``awk`` and ``cut``.

``--json`` is kept as the old spelling of ``-o json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FORMATS = ("table", "wide", "json", "yaml")
PIPED_WIDTH = 160  # a pipe has no width; a table cut to 80 would wrap every row


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=FORMATS, default="table",
                        help="table (fits the terminal), wide (every column), json or yaml (named fields)")
    parser.add_argument("--no-headers", action="store_true", help="tables without headers, titles or legends")
    parser.add_argument("--json", dest="output", action="store_const", const="json", help="the same as -o json")


def structured(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "table") in ("json", "yaml")


def print_document(args: argparse.Namespace, value: Any) -> None:
    """``value`` as JSON or YAML, whichever ``-o`` asked for."""
    plain = json.loads(json.dumps(value, default=_json_default))
    if args.output == "yaml":
        import yaml  # only a yaml listing pays for it

        sys.stdout.write(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True))
    else:
        print(json.dumps(plain, indent=2, ensure_ascii=False))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


@dataclass(frozen=True)
class Column:
    header: str
    right: bool = False  # numbers: right-aligned, never wrapped
    name: bool = False  # a Run or pod name: never cut, never wrapped (nor is any column but `wrap` ones)
    wrap: bool = False  # free text that may wrap in a narrow terminal
    optional: bool = False  # dropped first when the table does not fit (always shown with -o wide)
    wide_only: bool = False  # shown only with -o wide


@dataclass
class Listing:
    """A table in the making: columns, rows of text, an optional title and legend."""

    columns: Sequence[Column]
    title: str = ""
    legend: str = ""
    rows: list[list[str]] = field(default_factory=list)

    def add(self, *cells: Any) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(["-" if c is None else str(c) for c in cells])


def terminal_width() -> int:
    return shutil.get_terminal_size((PIPED_WIDTH, 24)).columns if sys.stdout.isatty() else PIPED_WIDTH


def shown_columns(listing: Listing, wide: bool, width: int) -> list[int]:
    """The indexes of the columns to print: all for wide, else as many as fit, optional ones dropped first."""
    keep = [i for i, c in enumerate(listing.columns) if wide or not c.wide_only]
    if wide:
        return keep

    def natural(i: int) -> int:
        return max([len(listing.columns[i].header), *(len(r[i]) for r in listing.rows)]) + 3

    droppable = [i for i in keep if listing.columns[i].optional]
    while droppable and sum(natural(i) for i in keep) > width:
        keep.remove(droppable.pop())
    return keep


def render(listing: Listing, args: argparse.Namespace, *, width: int | None = None) -> None:
    """Print ``listing`` as a table (``-o table`` or ``wide``), honouring ``--no-headers``."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    wide = args.output == "wide"
    width = width or terminal_width()
    keep = shown_columns(listing, wide, width)
    headers = not getattr(args, "no_headers", False)
    # Names are never cut: when the pinned columns alone are wider than the terminal,
    # the line grows past it (the terminal folds it; a copied name stays whole).
    floor = 0
    for i in keep:
        c = listing.columns[i]
        longest = max([len(c.header), *(len(r[i]) for r in listing.rows)])
        floor += (min(longest, len(c.header) + 2, 12) if c.wrap else longest) + 2
    console = Console(width=100_000 if wide else max(width, floor), highlight=False, soft_wrap=wide)
    table = Table(title=listing.title if headers and listing.title else None, title_justify="left",
                  caption=listing.legend if headers and listing.legend else None, caption_justify="left",
                  show_header=headers, box=None, pad_edge=False, expand=False)
    for i in keep:
        c = listing.columns[i]
        longest = max([len(c.header), *(len(r[i]) for r in listing.rows)])
        pinned = not c.wrap or wide
        table.add_column(c.header, justify="right" if c.right else "left", no_wrap=pinned,
                         min_width=longest if pinned else None, overflow="fold")
    for row in listing.rows:
        # Text, not markup: names and reasons are the user's, and "[/b]" in them is not a style.
        table.add_row(*(Text(row[i]) for i in keep))
    console.print(table)
