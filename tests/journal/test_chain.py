"""The chain link: deterministic, sensitive to every field it covers, keyed when a key is given."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kruntimes.journal import chain

AT = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
FIELDS = dict(prev=chain.GENESIS, epoch="e1", lsn=7, recorded_at=AT, kind="cycle", schema_version=1,
              payload_sha256="ab" * 32)


def test_a_link_is_the_same_for_the_same_record_and_instant_in_any_zone():
    other_zone = AT.astimezone(timezone(timedelta(hours=5)))
    assert chain.link(**FIELDS) == chain.link(**{**FIELDS, "recorded_at": other_zone})


@pytest.mark.parametrize("field, value", [
    ("prev", "1" * 64), ("epoch", "e2"), ("lsn", 8), ("recorded_at", AT + timedelta(microseconds=1)),
    ("kind", "bind"), ("schema_version", 2), ("payload_sha256", "cd" * 32),
])
def test_changing_any_covered_field_changes_the_link(field, value):
    assert chain.link(**FIELDS) != chain.link(**{**FIELDS, field: value})


def test_fields_cannot_be_shifted_across_the_separators():
    assert chain.link(**{**FIELDS, "epoch": "e1", "kind": "x1"}) != chain.link(**{**FIELDS, "epoch": "e", "kind": "1x1"})


def test_a_keyed_link_differs_from_the_plain_one_and_depends_on_the_key():
    a, b = chain.ChainKey(b"a" * 32), chain.ChainKey(b"b" * 32)
    assert chain.link(**FIELDS, key=a) != chain.link(**FIELDS)
    assert chain.link(**FIELDS, key=a) != chain.link(**FIELDS, key=b)
    assert a.key_id != b.key_id and "a" * 32 not in repr(a)


def test_a_naive_time_is_refused():
    with pytest.raises(ValueError, match="naive"):
        chain.link(**{**FIELDS, "recorded_at": AT.replace(tzinfo=None)})


def test_a_key_file_is_read_stripped_and_a_short_or_missing_one_is_a_clear_error(tmp_path, monkeypatch):
    good = tmp_path / "key"
    good.write_bytes(b"k" * 40 + b"\n")
    assert chain.load_key(good) == chain.ChainKey(b"k" * 40)
    monkeypatch.setenv(chain.KEY_FILE_ENV, str(good))
    assert chain.load_key() == chain.ChainKey(b"k" * 40)
    short = tmp_path / "short"
    short.write_bytes(b"k" * 8)
    with pytest.raises(chain.ChainKeyError, match="8 bytes; use at least 32"):
        chain.load_key(short)
    with pytest.raises(chain.ChainKeyError, match="cannot read"):
        chain.load_key(tmp_path / "absent")
    monkeypatch.delenv(chain.KEY_FILE_ENV)
    assert chain.load_key() is None


def test_the_link_of_a_known_record_never_changes():
    # Fixed vectors: the writer, the spool drain, verify and journals already stored all
    # depend on this exact message layout; a change is a new algorithm, never an edit.
    assert chain.link(**FIELDS) == "437e132b5f426d80e67cf3655dd0d4926528e131dff6084c8ea2bf4046e1c29b"
    keyed = {**FIELDS, "prev": "1" * 64, "epoch": "ünï", "lsn": 2**62, "kind": "end", "schema_version": 3,
             "payload_sha256": "cd" * 32, "recorded_at": AT.astimezone(timezone(timedelta(hours=5)))}
    assert chain.link(**keyed, key=chain.ChainKey(b"k" * 32)) == \
        "9003cdd6ada53eec068a9152762ba54631409097929417e758f2f1a0c856d7e2"
