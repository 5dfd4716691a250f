"""The spool file: framing, torn tails, one writer at a time."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from kruntimes.journal import errors, records
from kruntimes.journal.write import spool
from tests.journal.factories import record


def encoded(lsns: range) -> list[records.EncodedRecord]:
    return [records.encode(record(lsn, payload={"lsn": lsn, "text": "ünïcødé"})) for lsn in lsns]


def test_spooled_records_read_back_identical(tmp_path: Path) -> None:
    s = spool.Spool.open(tmp_path / "spool")
    s.append(encoded(range(1, 11)))
    s.append(encoded(range(11, 16)))
    assert (len(s), s.last_lsn) == (15, 15)
    first, offset = s.read(0, 10)
    rest, _ = s.read(offset, 10)
    assert first + rest == encoded(range(1, 16))
    s.close()
    again = spool.Spool.open(tmp_path / "spool")
    assert list(again.records()) == encoded(range(1, 16))
    again.clear()
    assert (len(again), again.last_lsn, list(again.records())) == (0, None, [])
    again.close()


@pytest.mark.parametrize(
    "tail",
    [
        struct.pack(">II", 500, 0) + b"partial body",
        struct.pack(">I", 7)[:3],
        "bad crc",
    ],
    ids=["an incomplete frame body", "an incomplete frame header", "a frame with a bad CRC"],
)
def test_a_torn_tail_is_truncated_and_logged_with_its_offset(
    tmp_path: Path, tail: bytes | str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "spool"
    s = spool.Spool.open(path)
    s.append(encoded(range(1, 6)))
    intact_end = s.end
    s.close()
    with path.open("ab") as f:
        if tail == "bad crc":
            body = b"x" * 40
            f.write(struct.pack(">II", len(body), 12345) + body)
        else:
            f.write(tail)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="kruntimes.journal.spool"):
        reopened = spool.Spool.open(path)
    assert f"torn tail at offset {intact_end}" in caplog.text
    assert path.stat().st_size == intact_end
    assert list(reopened.records()) == encoded(range(1, 6))
    reopened.append(encoded(range(6, 8)))  # appends continue cleanly after the cut
    assert [r.lsn for r in reopened.records()] == list(range(1, 8))
    reopened.close()


def test_a_foreign_file_is_not_taken_for_a_spool(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(errors.JournalError, match="not a kruntimes journal spool"):
        spool.Spool.open(path)


def test_two_writers_cannot_share_a_spool(tmp_path: Path) -> None:
    first = spool.Spool.open(tmp_path / "spool")
    try:
        with pytest.raises(errors.JournalError, match="in use by another writer"):
            spool.Spool.open(tmp_path / "spool")
    finally:
        first.close()
