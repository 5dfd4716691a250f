"""The canonical encoding: what is accepted, what is refused and why."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kruntimes import canonical
from kruntimes.journal import errors, records
from tests.journal.factories import record

json_exact = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(st.dictionaries(st.text(), json_exact, max_size=6))
def test_the_fast_encoder_writes_exactly_canonical_json(payload: dict[str, Any]) -> None:
    try:
        encoded = records.encode(record(1, payload=payload))
    except errors.RecordRejected as exc:  # lone surrogates cannot be UTF-8
        assert "not encodable" in str(exc)
        return
    assert encoded.payload == records.canonical_json(payload)
    assert encoded.payload_sha256 == records.content_hash(encoded.payload)
    assert records.decode(encoded) == record(1, payload=payload)
    # The digest path encodes to bytes only; it must hash exactly that text.
    assert canonical.digest(payload) == encoded.payload_sha256


def test_canonical_json_sorts_keys_drops_whitespace_and_keeps_unicode() -> None:
    assert records.canonical_json({"b": 1, "a": ["ü", {"d": None, "c": True}]}) == '{"a":["ü",{"c":true,"d":null}],"b":1}'


def test_key_order_of_the_input_does_not_change_the_stored_text() -> None:
    one = records.encode(record(1, payload={"x": 1, "y": {"b": 2, "a": 1}}))
    two = records.encode(record(1, payload={"y": {"a": 1, "b": 2}, "x": 1}))
    assert (one.payload, one.payload_sha256) == (two.payload, two.payload_sha256)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"score": 0.5}, "payload['score'] is the float 0.5; floats are not exact"),
        ({"top": [{"total": 1e3}]}, "payload['top'][0]['total'] is the float 1000.0"),
        ({"pods": ("a", "b")}, "payload['pods'] is a tuple; use a list"),
        ({1: "one"}, "payload has key 1 of type int; keys must be str"),
        ({"at": datetime(2026, 1, 1)}, "payload['at'] has type datetime"),
        ({"nan": float("nan")}, "payload['nan'] is the float nan"),
    ],
    ids=["a float is refused", "a nested float is found by path", "a tuple is refused",
         "a non-str key is refused", "a datetime is refused", "NaN is refused"],
)
def test_values_that_would_not_round_trip_exactly_are_rejected(payload: dict[Any, Any], message: str) -> None:
    with pytest.raises(errors.RecordRejected, match=message.replace("[", r"\[").replace("(", r"\(")) as info:
        records.encode(record(7, payload=payload))
    assert info.value.reason == "malformed" and info.value.lsn == 7


def test_a_self_containing_payload_is_rejected_not_looped_over() -> None:
    payload: dict[str, Any] = {}
    payload["me"] = payload
    with pytest.raises(errors.RecordRejected, match="nests too deeply"):
        records.encode(record(1, payload=payload))


def test_an_oversized_payload_is_rejected_with_its_size_and_the_limit() -> None:
    big = {"blob": "x" * 2000}
    with pytest.raises(errors.RecordRejected, match=r"payload is 2\d\d\d bytes .* the limit is 1024") as info:
        records.encode(record(1, payload=big), max_payload_bytes=1024)
    assert info.value.reason == "oversized"
    assert records.encode(record(1, payload=big)).payload == records.canonical_json(big)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "cycles"}, "kind 'cycles' is not one of"),
        ({"lsn": 0}, "lsn must be an int"),
        ({"lsn": True}, "lsn must be an int"),
        ({"recorded_at": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"incarnation": ""}, "incarnation must be a printable str"),
        ({"incarnation": "x" * 65}, "incarnation must be a printable str"),
        ({"schema_version": 0}, "schema_version must be a positive int"),
    ],
    ids=lambda v: str(v),
)
def test_envelope_fields_are_validated(change: dict[str, Any], message: str) -> None:
    fields = {"incarnation": "i", "lsn": 1, "recorded_at": datetime.now(timezone.utc), "kind": "cycle", "payload": {}}
    with pytest.raises(errors.RecordRejected, match=message):
        records.encode(records.JournalRecord(**{**fields, **change}))


def test_an_incarnation_record_must_name_its_version_and_config_hash() -> None:
    with pytest.raises(errors.RecordRejected, match="config_hash"):
        records.encode(record(1, "incarnation", {"version": "0.1.0"}))
    records.encode(record(1, "incarnation", {"version": "0.1.0", "config_hash": "ab" * 32}))


def test_recorded_at_is_normalised_to_utc() -> None:
    cest = timezone(timedelta(hours=2))
    encoded = records.encode(record(1, recorded_at=datetime(2026, 5, 9, 9, 0, tzinfo=cest)))
    assert encoded.recorded_at == datetime(2026, 5, 9, 7, 0, tzinfo=timezone.utc)
    assert encoded.recorded_at.tzinfo is timezone.utc


def test_decode_refuses_a_payload_that_does_not_match_its_hash() -> None:
    encoded = records.encode(record(1))
    with pytest.raises(errors.CorruptRecord, match="lsn=1"):
        records.decode(encoded._replace(payload=json.dumps({"lsn": 2})))


@pytest.mark.parametrize("fast", [True, False], ids=["with orjson if installed", "stdlib only"])
def test_the_stored_text_does_not_depend_on_orjson(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not fast:
        monkeypatch.setattr(canonical, "_orjson", None)
    payload = {"ü": ["\x00\x1f\x7f\u2028", 2**70, -(2**63), True, None], "a": {"z": "", "b": [[[]]]}}
    encoded = records.encode(record(1, payload=payload))
    assert encoded.payload == records.canonical_json(payload)


def test_a_checkpoint_may_exceed_the_payload_limit_that_bounds_every_other_record() -> None:
    big = {"pods": ["x" * 1000] * 100}
    records.encode(record(1, kind="checkpoint", payload=big), max_payload_bytes=1000)
    with pytest.raises(errors.RecordRejected, match="limit is 1000"):
        records.encode(record(2, kind="cycle", payload=big), max_payload_bytes=1000)
