"""Kubernetes qualified names and label values (SPEC §2.2 resource names, selectors)."""

import pytest

from kruntimes.api import names

QUALIFIED = [
    ("runs", "the built-in resource name is valid"),
    ("example.com/gpu", "a prefixed name is valid"),
    ("a", "a one-character name is valid"),
    ("A_b.c-D", "mixed case with underscores, dots and dashes is valid"),
    ("x" * 63, "a 63-character name part is valid"),
    ("a." * 126 + "b/n", "a 253-character prefix is valid"),
    ("sub.example.com/my-resource", "a multi-label prefix is valid"),
]

NOT_QUALIFIED = [
    ("bad name!", "the name part must consist of", "spaces and punctuation are rejected"),
    ("", "must not be empty", "an empty name is rejected"),
    ("/gpu", "prefix before '/' must not be empty", "an empty prefix is rejected"),
    ("example.com/", "name part must not be empty", "an empty name part is rejected"),
    ("a/b/c", "at most one '/'", "two slashes are rejected"),
    ("x" * 64, "at most 63 characters", "a 64-character name part is rejected"),
    ("a." * 127 + "b/n", "at most 253 characters", "a 255-character prefix is rejected"),
    ("Example.com/gpu", "lowercase DNS subdomain", "an upper-case prefix is rejected"),
    ("-gpu", "must consist of", "a leading dash is rejected"),
    ("gpu.", "must consist of", "a trailing dot is rejected"),
    ("gp\u00fc", "must consist of", "non-ASCII letters are rejected"),
    ("gpu\n", "must consist of", "a trailing newline is rejected"),
]

LABEL_VALUES = [
    ("", "an empty label value is valid"),
    ("team-a", "a dashed label value is valid"),
    ("v1.2_3", "dots and underscores inside a label value are valid"),
    ("x" * 63, "a 63-character label value is valid"),
]

BAD_LABEL_VALUES = [
    ("x" * 64, "at most 63 characters", "a 64-character label value is rejected"),
    ("a/b", "must consist of", "a slash in a label value is rejected"),
    ("-a", "must consist of", "a leading dash in a label value is rejected"),
    ("a b", "must consist of", "a space in a label value is rejected"),
]


@pytest.mark.parametrize("name", [c[0] for c in QUALIFIED], ids=[c[1] for c in QUALIFIED])
def test_qualified_names_are_accepted(name: str) -> None:
    assert names.qualified_name_error(name) is None


@pytest.mark.parametrize(
    ("name", "fragment"),
    [c[:2] for c in NOT_QUALIFIED],
    ids=[c[2] for c in NOT_QUALIFIED],
)
def test_malformed_qualified_names_say_why(name: str, fragment: str) -> None:
    message = names.qualified_name_error(name)
    assert message is not None
    assert fragment in message
    assert "is not a valid Kubernetes qualified name" in message
    assert '(e.g. "runs" or "example.com/gpu")' in message


def test_the_message_quotes_the_name_and_can_name_the_field() -> None:
    message = names.qualified_name_error("bad name!")
    assert message is not None and message.startswith('resource name "bad name!" is not')
    key_message = names.qualified_name_error("a b", what="label key", example='"app"')
    assert key_message is not None and key_message.startswith('label key "a b"')
    assert key_message.endswith('(e.g. "app")')


def test_a_huge_name_is_quoted_only_in_part() -> None:
    message = names.qualified_name_error("x" * 100_000)
    assert message is not None and len(message) < 300


@pytest.mark.parametrize("value", [c[0] for c in LABEL_VALUES], ids=[c[1] for c in LABEL_VALUES])
def test_label_values_are_accepted(value: str) -> None:
    assert names.label_value_error(value) is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [c[:2] for c in BAD_LABEL_VALUES],
    ids=[c[2] for c in BAD_LABEL_VALUES],
)
def test_malformed_label_values_say_why(value: str, fragment: str) -> None:
    message = names.label_value_error(value)
    assert message is not None and fragment in message
