"""Whole-number Kubernetes quantities: the only values a Run request or a capacity may hold.

SPEC §2.2 judges a request "by its value in Kubernetes quantity syntax": ``"1k"`` and
``"1000m"`` are whole numbers, ``"500m"`` is not. Planner arithmetic is exact integer
arithmetic, so every quantity is turned into an ``int`` once, here, or rejected with a
message a user can act on.

The value itself comes from the Kubernetes client's parser
(``kubernetes.utils.quantity.parse_quantity``). That parser is laxer than the API
server (it accepts ``"1K"``, ``" 1"``, ``"1_000"``, ``"NaN"``) and turns
``"1e999999999"`` into a Decimal whose ``int()`` never finishes, so a string first
passes apimachinery's grammar (``resource/quantity.go``) and cheap magnitude guards
here, and only then is handed to the client, under a Decimal context wide enough
that its arithmetic is exact for every input the guards let through.

Only the API layer imports this module: the planner core and replay work on the
integers it produces and never load the Kubernetes client.
"""

import json
import math
import re
from datetime import date, time, timedelta
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Iterator

from kubernetes.utils.quantity import parse_quantity

# Largest value accepted: Kubernetes stores quantities as int64 when they fit, and a
# bound keeps exponent syntax ("1e999999999") from building enormous integers.
MAX_COUNT = 2**63 - 1

# apimachinery's grammar: <sign>?<digits>[.<digits>] then a binary SI suffix, a decimal
# SI suffix or a decimal exponent. ASCII digits only ([0-9], never \d). "E" alone means
# exa; "E" followed by digits is an exponent, as in Go's suffix interpretation.
_QUANTITY = re.compile(
    r"(?P<sign>[+-])?(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exp>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]))?",
    re.ASCII,
)
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# The same grammar as a JSON-schema pattern, for CRD generation (string form only).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$"
)

_HINT = '(use e.g. "1" or "2")'


class InvalidQuantity(ValueError):
    """A quantity that is not a non-negative whole number of at most ``MAX_COUNT``."""

    def __init__(self, value: object, problem: str) -> None:
        self.value = value
        self.problem = problem
        super().__init__(f"quantity {describe_input(value)} {problem}")


def describe_input(value: object, limit: int = 40) -> str:
    """Render a user-supplied value for a message: JSON-like, and never unbounded.

    The value may be anything a YAML file holds, including a "billion laughs" graph of
    shared lists that stands for 10**9 nodes, or a list that contains itself. So it is
    rendered piece by piece, without recursion, and rendering stops as soon as more
    than ``limit`` characters are out: the work depends on ``limit``, never on the
    value. Up to the cut, the text is what ``json.dumps`` would print; sets and
    other objects without a JSON form are shown by their type.
    """
    out: list[str] = []
    size = 0
    stack: list[Iterator[object]] = [iter((value,))]
    while stack and size <= limit:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, _Text):
            out.append(item)
            size += len(item)
        elif isinstance(item, dict):
            stack.append(_mapping_parts(item, limit))
        elif isinstance(item, (list, tuple)):
            stack.append(_sequence_parts(item))
        else:
            text = _scalar(item, limit - size + 1)
            out.append(text)
            size += len(text)
    text = "".join(out)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Text(str):
    """Punctuation and keys: emitted as they are, never rendered again."""


_END = object()


def _sequence_parts(items: list[object] | tuple[object, ...]) -> Iterator[object]:
    yield _Text("[")
    for i, item in enumerate(items):
        if i:
            yield _Text(", ")
        yield item
    yield _Text("]")


def _mapping_parts(mapping: dict[object, object], limit: int) -> Iterator[object]:
    yield _Text("{")
    for i, (key, item) in enumerate(mapping.items()):
        if i:
            yield _Text(", ")
        shown = key[: limit + 1] if isinstance(key, str) else _scalar(key, limit + 1).strip('"')
        yield _Text(json.dumps(shown, ensure_ascii=False) + ": ")
        yield item
    yield _Text("}")


def _scalar(value: object, room: int) -> str:
    """JSON text of one value that is not a list or mapping; at least ``room`` characters if it is longer."""
    if value is None or isinstance(value, (bool, float)):
        return json.dumps(value)
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # more digits than Python will convert
            return f"<an integer of {value.bit_length():,} bits>"
    if isinstance(value, str):
        return json.dumps(value[:room], ensure_ascii=False)
    if isinstance(value, (bytes, bytearray)):
        return json.dumps(repr(bytes(value[:room])))
    if isinstance(value, (Decimal, Fraction, date, time, timedelta)):
        return json.dumps(repr(value)[:room])
    if isinstance(value, (set, frozenset)):
        # Iteration order follows string hashing, so no items: a message must be the same on every run.
        return f"<a set of {len(value):,} items>"
    return f"<{type(value).__name__}>"


def parse_count(value: object) -> int:
    """Return the whole-number value of a quantity (str or int), else raise InvalidQuantity.

    ``"2"``, ``"1k"`` (1000), ``"1000m"`` (1), ``"1Ki"`` (1024), ``"1e3"`` and ``3`` are
    counts; ``"500m"``, ``"1.5"``, ``"-1"``, ``"abc"``, booleans and None are not.
    """
    # bool is an int subclass, but `true` as a request is a mistake, not a count of 1.
    if isinstance(value, bool):
        raise InvalidQuantity(value, f"is a boolean, not a whole number {_HINT}")
    if isinstance(value, int):
        exact = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidQuantity(value, f"is not a non-negative whole number {_HINT}")
        exact = Fraction(value)
    elif isinstance(value, (str, Decimal)):
        exact = _parse_text(value, str(value))
    else:
        raise InvalidQuantity(value, f"must be a string or an integer {_HINT}")
    if exact < 0 or exact.denominator != 1:
        raise InvalidQuantity(value, f"is not a non-negative whole number {_HINT}")
    if exact > MAX_COUNT:
        raise InvalidQuantity(value, f"is too large (at most {MAX_COUNT})")
    return int(exact)


def _parse_text(value: object, text: str) -> Fraction:
    """Exact value of a quantity string; bounded work however long or extreme it is."""
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise InvalidQuantity(value, f"is not a Kubernetes quantity {_HINT}")
    # Normalise to digits * 10**exponent (times a binary suffix) with no leading or trailing zeros in
    # digits, so magnitude checks below work on lengths, never on huge integers.
    frac = match["frac"] or ""
    digits = (match["int"] + frac).lstrip("0")
    exponent = _exponent(match["exp"]) - len(frac) + _DECIMAL_SUFFIX.get(match["decimal"], 0)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    if not digits:
        return Fraction(0)
    negative = match["sign"] == "-"
    # digits >= 10**(len-1), so the value is at least 10**(len-1+exponent): past 10**19
    # it exceeds MAX_COUNT whatever the binary factor.
    if len(digits) + exponent > 20:
        return Fraction(-MAX_COUNT - 1 if negative else MAX_COUNT + 1)
    # Below 10**-19 even 2**60 cannot lift a non-zero value to 1; and more than 80
    # significant digits with a negative exponent cannot cancel into a whole number
    # (at most 2**60 is available against 10**61 or more). Either way: a fraction.
    if len(digits) + exponent < -19 or len(digits) > 80:
        return Fraction(-1 if negative else 1, 2)
    # The guards bound the input to <= 80 significant digits and |value| < 10**20, times
    # at most 2**60: 120 digits of precision make the client's multiplication exact.
    with localcontext() as ctx:
        ctx.prec = 120
        parsed = parse_quantity(text)
    return Fraction(parsed)


def _exponent(text: str | None) -> int:
    """The decimal exponent, clamped: beyond 10**12 only its sign matters for the checks."""
    if text is None:
        return 0
    sign = -1 if text.startswith("-") else 1
    magnitude = text.lstrip("+-").lstrip("0")
    return sign * (10**12 if len(magnitude) > 12 else int(magnitude or "0"))
