"""Decoding the API server's JSON: a body nested beyond Python's parser still decodes (issue 23 item 6)."""

from __future__ import annotations

import json

import pytest

from kruntimes.cluster import decode


# Production processes decode at the interpreter's own limit (tests/conftest.py says why).
pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def nested(depth: int, inner: str = "{}") -> str:
    return '{"a":' * depth + inner + "}" * depth


def run(name: str, function: str) -> str:
    return '{"metadata":{"name":"%s","resourceVersion":"7"},"spec":{"mode":{"function":%s}}}' % (name, function)


@pytest.mark.parametrize("body, cut", [
    ('{"items":[]}', False),
    (run("shallow", nested(50)), False),
    (run("deep", nested(2_000)), True),
    (run("deep", nested(10_000)), True),
    (run("brackets in strings do not count", '"' + "[{" * 5_000 + '"'), False),
    (run("escaped quotes do not end a string", '"\\"' + "{" * 5_000 + '"'), False),
], ids=["an empty list", "50 levels", "2,000 levels", "10,000 levels", "brackets in a string", "escaped quotes"])
def test_every_body_decodes_and_only_a_deep_one_is_cut(body: str, cut: bool) -> None:
    decoded = decode.loads(body.encode())
    assert decoded.cut is cut
    assert decode.nested_too_deeply(decoded.value) is cut
    if not cut:
        assert decoded.value == json.loads(body)


def test_a_list_keeps_the_metadata_of_a_deep_item_and_every_other_item_whole() -> None:
    body = '{"metadata":{"resourceVersion":"9"},"items":[%s,%s]}' % (run("deep", nested(3_000)),
                                                                      run("fine", nested(3)))
    decoded = decode.loads(body)
    deep, fine = decoded.value["items"]
    assert decoded.cut and decoded.value["metadata"] == {"resourceVersion": "9"}
    assert deep["metadata"] == {"name": "deep", "resourceVersion": "7"} and decode.nested_too_deeply(deep)
    assert fine == json.loads(run("fine", nested(3))) and not decode.nested_too_deeply(fine)


def test_a_malformed_body_is_still_an_error() -> None:
    with pytest.raises(ValueError):
        decode.loads(nested(2_000)[:-1])
