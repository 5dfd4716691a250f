"""Kubernetes syntax the model needs, written again from the rules themselves.

Quantities (apimachinery's `resource.Quantity` grammar), qualified names, label
values and RFC 3339 times. Nothing here comes from kruntimes: the point of the
model is to disagree with kruntimes when kruntimes is wrong, so it may not share
a parser with it (issue 12, "A second implementation that checks the first").

Every function returns a value or None ("malformed"); none raises on user data.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone
from fractions import Fraction

INT64_MAX = 2**63 - 1

# <sign>?(<digits>[.<digits>?] | .<digits>) then one suffix: binary SI, a decimal
# exponent (e/E followed by a signed integer), or decimal SI. "E" alone is exa.
_QUANTITY = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE])?", re.ASCII)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def quantity_value(value: object) -> Fraction | None:
    """The exact value of a Kubernetes quantity (a string, or a YAML/JSON number), else None."""
    if isinstance(value, bool):
        return None  # `true` is not a number, whatever Python thinks
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        # A JSON number is read by Quantity.UnmarshalJSON as its text; finite floats
        # are exact binary fractions, so their value is exact too.
        return Fraction(value) if value == value and value not in (float("inf"), float("-inf")) else None
    if not isinstance(value, str):
        return None
    m = _QUANTITY.fullmatch(value)
    if m is None:
        return None
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4) or ""
    if not whole and not frac:
        return None
    digits = (whole + frac).lstrip("0")
    exp10 = -len(frac)
    exp2 = 0
    if suffix in _BINARY:
        exp2 = _BINARY[suffix]
    elif suffix in _DECIMAL:
        exp10 += _DECIMAL[suffix]
    elif suffix:
        exp_text = suffix[1:]
        # Only the order of magnitude matters beyond a few digits: clamp, so that
        # "1e999999999" costs nothing (its value is far past INT64_MAX either way).
        magnitude = exp_text.lstrip("+-").lstrip("0") or "0"
        clamped = 10**6 if len(magnitude) > 6 else int(magnitude)
        exp10 += -clamped if exp_text.startswith("-") else clamped
    if not digits:
        return Fraction(0)
    if len(digits) + exp10 > 40:
        # At least 10**39: far above INT64_MAX; the sign still decides malformed-ness
        # for the caller, the exact magnitude does not.
        return Fraction(10**40) * (-1 if sign == "-" else 1)
    if exp10 < -(4 * len(digits) + 70):
        # 5**-exp10 exceeds digits * 2**60: the value is a non-zero fraction below 1.
        return Fraction(1, 2) * (-1 if sign == "-" else 1)
    exact = Fraction(int(digits)) * Fraction(10) ** exp10 * 2**exp2
    return -exact if sign == "-" else exact


def count(value: object) -> int | None:
    """A request or capacity amount: a whole number in 0..2^63-1 (SPEC §2.2), else None."""
    exact = quantity_value(value)
    if exact is None or exact.denominator != 1 or exact < 0 or exact > INT64_MAX:
        return None
    return int(exact)


_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", re.ASCII)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII)


def is_qualified_name(name: object) -> bool:
    """apimachinery IsQualifiedName: [DNS-1123 subdomain (<=253) '/'] name part (<=63)."""
    if not isinstance(name, str):
        return False
    prefix, slash, part = name.rpartition("/")
    if slash:
        if not prefix or len(prefix) > 253 or "/" in prefix or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return False
    return 0 < len(part) <= 63 and _NAME_PART.fullmatch(part) is not None


def is_label_value(value: object) -> bool:
    """apimachinery IsValidLabelValue: empty, or a name part of at most 63 characters."""
    return isinstance(value, str) and (value == "" or (len(value) <= 63 and _NAME_PART.fullmatch(value) is not None))


# RFC 3339 §5.6 date-time: full-date "T" full-time; "T" and "Z" may be lower case (§5.6
# NOTE); seconds are required; any number of fractional digits; offset Z or +hh:mm.
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))", re.ASCII)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def instant(value: object) -> Fraction | None:
    """Seconds since the epoch, exactly, of an RFC 3339 time; None when it is not one.

    A YAML file may also hold an unquoted timestamp, which the YAML loader has already
    turned into a datetime: one with a zone is an instant, a naive one or a bare date is not.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            return None
        delta = value - _EPOCH
        return Fraction(delta.days * 86400 + delta.seconds) + Fraction(delta.microseconds, 10**6)
    if isinstance(value, date) or not isinstance(value, str):
        return None
    m = _RFC3339.fullmatch(value)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    # Leap seconds (60) are refused, as Go's time.Parse (Kubernetes) refuses them.
    if hour > 23 or minute > 59 or second > 59:
        return None
    try:
        midnight = datetime(year, month, day, tzinfo=timezone.utc)
    except ValueError:
        return None
    offset = 0
    if m.group(9):
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            return None
        offset = (oh * 3600 + om * 60) * (1 if m.group(9) == "+" else -1)
    frac = Fraction(int(m.group(7)), 10 ** len(m.group(7))) if m.group(7) else Fraction(0)
    days = (midnight - _EPOCH).days
    return Fraction(days * 86400 + hour * 3600 + minute * 60 + second - offset) + frac
