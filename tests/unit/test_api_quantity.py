"""Whole-number quantities (SPEC §2.2): what a request or capacity may hold."""

import contextlib
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.api import quantity

VALID = [
    ("2", 2, "a plain integer string is its value"),
    ("1k", 1000, "a decimal SI suffix multiplies by 1000"),
    ("1000m", 1, "a thousand milli-units are one unit"),
    ("1Ki", 1024, "a binary SI suffix multiplies by 1024"),
    ("1e3", 1000, "a decimal exponent is applied"),
    (3, 3, "an int is taken as is"),
    (0, 0, "zero is a valid count"),
    ("0", 0, "zero as a string is a valid count"),
    ("+1", 1, "a leading plus sign is allowed as in Kubernetes"),
    ("-0", 0, "negative zero is zero"),
    ("1.", 1, "a trailing decimal point is allowed as in Kubernetes"),
    ("0.5Ki", 512, "a fraction that a binary suffix makes whole is whole"),
    ("1.5k", 1500, "a fraction that a decimal suffix makes whole is whole"),
    ("1E", 10**18, "a lone E is the exa suffix"),
    ("1E3", 1000, "an E followed by digits is an exponent"),
    ("7Ei", 7 * 2**60, "a large binary quantity within int64 is accepted"),
    (str(2**63 - 1), 2**63 - 1, "the int64 maximum is accepted"),
    ("0e999999999999", 0, "zero with an absurd exponent is zero"),
    (3.0, 3, "a float without a fractional part is whole"),
    (Decimal("1E+3"), 1000, "a Decimal is read through its quantity text"),
]

MALFORMED = [
    ("500m", "fractional milli quantity is rejected"),
    ("1.5", "fractional quantity is rejected"),
    ("-1", "negative quantity is rejected"),
    ("abc", "text that is not a quantity is rejected"),
    ("", "empty string is rejected"),
    ("NaN", "NaN is rejected"),
    ("Infinity", "Infinity is rejected"),
    ("inf", "inf is rejected"),
    (True, "boolean true is rejected"),
    (False, "boolean false is rejected"),
    (None, "null is rejected"),
    (2.5, "float with a fractional part is rejected"),
    (float("nan"), "float NaN is rejected"),
    (float("inf"), "float infinity is rejected"),
    ([1], "a list is rejected"),
    ({"runs": 1}, "a mapping is rejected"),
    (-1, "a negative int is rejected"),
    ("1K", "upper-case K is not a Kubernetes suffix"),
    ("1ki", "lower-case ki is not a binary suffix"),
    (" 1", "leading whitespace is rejected"),
    ("1\n", "a trailing newline is rejected"),
    ("1_000", "underscore digit grouping is rejected"),
    ("\uff11", "non-ASCII digits are rejected"),
    ("1e3k", "an exponent and a suffix together are rejected"),
    ("1e", "an exponent without digits is rejected"),
    (".", "a lone decimal point is rejected"),
    ("1e-999999999", "a tiny value from a huge negative exponent is fractional"),
]

TOO_LARGE = [
    ("1e999999999", "an absurd exponent is rejected without building the number"),
    ("1e" + "9" * 10_000, "an exponent with thousands of digits is rejected"),
    ("9" * 100_000, "a hundred thousand digits are rejected"),
    (str(2**63), "one past the int64 maximum is rejected"),
    ("8Ei", "8Ei exceeds int64"),
    (1e300, "a huge float is rejected"),
]


@pytest.mark.parametrize(("value", "expected"), [c[:2] for c in VALID], ids=[c[2] for c in VALID])
def test_valid_quantities_parse_to_their_whole_value(value: object, expected: int) -> None:
    assert quantity.parse_count(value) == expected


@pytest.mark.parametrize("value", [c[0] for c in MALFORMED], ids=[c[1] for c in MALFORMED])
def test_malformed_quantities_raise_invalid_quantity(value: object) -> None:
    with pytest.raises(quantity.InvalidQuantity, match=r"^quantity .* \(use e\.g\. \"1\""):
        quantity.parse_count(value)


@pytest.mark.parametrize("value", [c[0] for c in TOO_LARGE], ids=[c[1] for c in TOO_LARGE])
def test_absurdly_large_quantities_are_rejected_quickly(value: object) -> None:
    with pytest.raises(quantity.InvalidQuantity, match="too large"):
        quantity.parse_count(value)


def test_the_message_names_the_value_and_what_to_do() -> None:
    with pytest.raises(quantity.InvalidQuantity) as caught:
        quantity.parse_count("500m")
    assert str(caught.value) == (
        'quantity "500m" is not a non-negative whole number (use e.g. "1" or "2")'
    )
    assert caught.value.value == "500m"


def test_the_message_shows_at_most_a_bounded_prefix_of_the_value() -> None:
    with pytest.raises(quantity.InvalidQuantity) as caught:
        quantity.parse_count("x" * 10_000)
    assert len(str(caught.value)) < 200


def test_invalid_quantity_is_a_value_error() -> None:
    assert issubclass(quantity.InvalidQuantity, ValueError)


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_any_count_round_trips_through_its_decimal_text(n: int) -> None:
    assert quantity.parse_count(str(n)) == n
    assert quantity.parse_count(n) == n


@given(st.integers(min_value=0, max_value=(2**63 - 1) // 1000))
def test_a_k_suffix_multiplies_any_count_by_a_thousand(n: int) -> None:
    assert quantity.parse_count(f"{n}k") == n * 1000


@given(st.integers(min_value=0))
def test_any_non_negative_int_is_a_count_or_too_large(n: int) -> None:
    try:
        assert quantity.parse_count(str(n)) == n
    except quantity.InvalidQuantity as exc:
        assert n > quantity.MAX_COUNT and "too large" in str(exc)


# Whole-number quantities with a known value, in every spelling SPEC §2.2 accepts: the
# fuzz tests below must see these accepted, so a parser that rejects everything fails.
_COUNT = st.integers(min_value=0, max_value=10**15)
_VALID_TEXT = st.one_of(
    _COUNT.map(lambda n: (str(n), n)),
    _COUNT.map(lambda n: (f"+{n}", n)),
    _COUNT.map(lambda n: (f"00{n}", n)),
    _COUNT.map(lambda n: (f"{n}.000", n)),
    _COUNT.map(lambda n: (f"{n}k", n * 1000)),
    _COUNT.map(lambda n: (f"{n * 1000}m", n)),
    _COUNT.map(lambda n: (f"{n}Ki", n * 1024)),
    _COUNT.map(lambda n: (f"{n}e2", n * 100)),
    st.just((str(quantity.MAX_COUNT), quantity.MAX_COUNT)),
)


def _expected_for_text(text: str) -> int | None:
    """The value plain digit strings must have; None where the fuzz test accepts either answer."""
    if text.isascii() and text.isdigit() and int(text) <= quantity.MAX_COUNT:
        return int(text)
    return None


def _check(value: object, expected: int | None) -> None:
    if expected is not None:
        assert quantity.parse_count(value) == expected
        return
    with contextlib.suppress(quantity.InvalidQuantity):
        assert quantity.parse_count(value) >= 0


@given(st.one_of(st.text().map(lambda t: (t, _expected_for_text(t))), _VALID_TEXT))
def test_any_text_is_a_count_or_raises_invalid_quantity_and_valid_text_is_accepted(
        case: tuple[str, int | None]) -> None:
    _check(*case)


def _expected_for_json(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    if isinstance(value, str):
        return _expected_for_text(value)
    return value if 0 <= value <= quantity.MAX_COUNT else None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(st.one_of(_JSON.map(lambda v: (v, _expected_for_json(v))), _VALID_TEXT,
                 st.integers(min_value=0, max_value=quantity.MAX_COUNT).map(lambda n: (n, n))))
def test_any_json_value_is_a_count_or_raises_invalid_quantity_and_valid_counts_are_accepted(
        case: tuple[object, int | None]) -> None:
    _check(*case)


@given(st.one_of(st.booleans(), st.none(), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(), st.integers(), max_size=2), st.integers(max_value=-1),
                 st.integers(min_value=quantity.MAX_COUNT + 1)))
def test_booleans_null_containers_negatives_and_values_above_int64_are_never_counts(value: object) -> None:
    with pytest.raises(quantity.InvalidQuantity):
        quantity.parse_count(value)


@given(st.from_regex(quantity.QUANTITY_PATTERN, fullmatch=True))
def test_every_accepted_quantity_has_the_kubernetes_client_value(text: str) -> None:
    # The Kubernetes client's parser is the reference for values (it is laxer in syntax,
    # so only this direction holds). Imported here only: the api package must not.
    from kubernetes.utils.quantity import parse_quantity

    try:
        count = quantity.parse_count(text)
    except quantity.InvalidQuantity:
        return
    assert parse_quantity(text) == count  # type: ignore[no-untyped-call]
