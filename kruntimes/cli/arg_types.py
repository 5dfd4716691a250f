"""Argument types shared by commands that talk to Kubernetes and commands that must not load its client.

``kube_args`` re-exports them; the journal's commands import this module directly, so
`kruntimes journal ...` never imports the Kubernetes client (tests/unit/test_layering.py).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from kruntimes import wire


def positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
        return value
    parse.__name__ = kind.__name__
    return parse


def seconds(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type for a length of time in seconds: a number (``30``) or a duration (``90s``, ``1h30m``)."""
    def parse(text: str) -> Any:
        value = str(text).strip()
        try:
            return kind(value)
        except ValueError:
            pass
        try:
            total = wire.parse_duration(value).total_seconds()
        except wire.NotATime as exc:
            raise argparse.ArgumentTypeError(f"invalid duration {text!r}: give seconds or a duration such as "
                                             "90s, 5m, 1h30m") from exc
        return kind(total) if kind is not int else int(total)
    parse.__name__ = f"seconds ({kind.__name__})"
    return parse
