"""Whole-number Kubernetes quantities for CEL's `quantity(s)`, without the Kubernetes client.

SPEC §7.4 gives selectors `quantity(s)` → int, so `device.capacity["d"].memory >=
quantity("40Gi")` compares two exact integers. A selector is evaluated in the planner
and in replay, and neither may load the Kubernetes client, so the API layer's parser
(`kruntimes.api.quantity`, which wraps the client's) cannot be used here. This is the
same grammar (apimachinery's `resource/quantity.go`) and the same acceptance rule
(a non-negative whole number ≤ 2^63−1) in exact `Fraction` arithmetic;
tests/unit/test_devices_quantities.py checks it agrees with the API layer's parser.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_COUNT = 2**63 - 1

_QUANTITY = re.compile(
    r"(?P<sign>[+-])?(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exp>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]))?",
    re.ASCII,
)
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


class InvalidCount(ValueError):
    """Text that is not a whole-number quantity within int64."""


def parse_count(text: object) -> int:
    """The whole-number value of a quantity string, else InvalidCount."""
    if not isinstance(text, str):
        raise InvalidCount(f"a quantity must be a string, not {type(text).__name__}")
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise InvalidCount(f"{text[:72]!r} is not a Kubernetes quantity")
    frac = match["frac"] or ""
    digits = (match["int"] + frac).lstrip("0")
    exponent = _exponent(match["exp"]) - len(frac) + _DECIMAL.get(match["decimal"], 0)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    if not stripped:
        return 0
    # Magnitude guards on lengths (as the API layer's): never build a huge integer.
    if len(stripped) + exponent > 20:
        raise InvalidCount(f"{text[:72]!r} is too large (at most {MAX_COUNT})")
    if len(stripped) + exponent < -19 or len(stripped) > 80:
        raise InvalidCount(f"{text[:72]!r} is not a whole number")
    value = Fraction(int(stripped)) * Fraction(10) ** exponent * 2 ** _BINARY.get(match["binary"], 0)
    if match["sign"] == "-":
        value = -value
    if value < 0 or value.denominator != 1:
        raise InvalidCount(f"{text[:72]!r} is not a non-negative whole number")
    if value > MAX_COUNT:
        raise InvalidCount(f"{text[:72]!r} is too large (at most {MAX_COUNT})")
    return int(value)


def _exponent(text: str | None) -> int:
    if text is None:
        return 0
    sign = -1 if text.startswith("-") else 1
    magnitude = text.lstrip("+-").lstrip("0")
    return sign * (10**12 if len(magnitude) > 12 else int(magnitude or "0"))
