"""How journal records cross from the scheduler to the writer process: pickle, made cheap.

The scheduler pays for every byte it serialises, so the hot types get a reducer
that hands pickle their fields as one tuple, read in C by an `attrgetter`, instead
of the per-field Python walk that slotted dataclasses and named tuples otherwise
take (measured on the demo workload: a Run mutation 11 -> 3.5 us, a checkpoint of
5,200 Runs 18 -> 9 ms). The other end rebuilds them by calling the class with those
fields; none of these classes validates or normalises in `__init__`, so the copy is
equal to the original.

Only the two ends of one journal writer use this, never files or the network: both
run the same code, and a pickle from anywhere else is never loaded.
"""

from __future__ import annotations

import copyreg
import dataclasses
import io
import operator
import pickle
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kruntimes.journal import records
from kruntimes.scheduler import outcome, projection

PROTOCOL = 5

_DATACLASSES = (
    projection.Requirement, projection.Selector, projection.Term, projection.WeightedTerm, projection.Affinity,
    projection.RunInfo, projection.PodInfo, projection.Assumption,
    outcome.PluginScores, records.JournalRecord,
)


def _fields_reducer(cls: type) -> Callable[[Any], tuple[type, tuple[Any, ...]]]:
    names = [f.name for f in dataclasses.fields(cls)]
    get = operator.attrgetter(*names)
    if len(names) == 1:
        return lambda obj: (cls, (get(obj),))
    return lambda obj: (cls, get(obj))


def _tuple_reducer(cls: type) -> Callable[[Any], tuple[type, tuple[Any, ...]]]:
    return lambda obj: (cls, tuple(obj))


_TABLE: dict[type, Any] = dict(copyreg.dispatch_table)
_TABLE.update({cls: _fields_reducer(cls) for cls in _DATACLASSES})
# Deferred records cross as plain tuples (ProcessJournalWriter._encode), so only
# EncodedRecord needs its named-tuple reducer here.
_TABLE[records.EncodedRecord] = _tuple_reducer(records.EncodedRecord)


_OUTCOME_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(outcome.CycleOutcome)))
_SCORES_AT = tuple(f.name for f in dataclasses.fields(outcome.CycleOutcome)).index("scores")
_PER_POD = tuple(i for i, f in enumerate(dataclasses.fields(outcome.CycleOutcome))
                 if f.name in ("rejections", "feasible", "totals"))


class _Outcomes:
    """The CycleOutcome reducer of one pickle: per-pod vectors equal to the previous
    outcome's over the same pods are sent as that outcome's objects (verdicts, the
    feasible pods, totals and normalised scores: vectors whose element types the
    framework fixes, so equal means the same encoding).

    A cycle outcome is ~700 values (every pod's verdict and scores), most of them the
    same as the last cycle of the same Runtime saw: usually only the pod that took
    the last Run scores differently. Pickle writes an object it has already written
    as a reference of a few bytes, so handing it the earlier, equal tuple turns a
    100-element vector into one reference. Equality is what the copy preserves; the
    unpickled outcome compares equal to the original, field by field.
    """

    def __init__(self) -> None:
        self._last: dict[int, tuple[Any, ...]] = {}  # id(pods) -> the last fields sent for them

    def __call__(self, o: outcome.CycleOutcome) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        fields = list(_OUTCOME_FIELDS(o))
        scores = [(s.plugin, s.weight, s.raw, s.normalized) for s in o.scores]
        last = self._last.get(id(o.pods))
        if last is not None:
            for i in _PER_POD:
                if fields[i] == last[i]:
                    fields[i] = last[i]
            before = last[_SCORES_AT]
            if len(before) == len(scores):
                # Normalised scores only: the framework holds them to exact ints, while a
                # plugin's raw scores could hold a bool that equals an int and encodes
                # otherwise (true, not 1) - an equal substitute must be the same value.
                for j, (s, b) in enumerate(zip(scores, before)):
                    if s[3] == b[3]:
                        scores[j] = (s[0], s[1], s[2], b[3])
        fields[_SCORES_AT] = scores
        self._last[id(o.pods)] = tuple(fields)  # the pickle's memo keeps o.pods alive: ids stay unique
        return _outcome, tuple(fields)


def _outcome(*fields: Any) -> outcome.CycleOutcome:
    """The receiving end of ``_Outcomes``."""
    values = list(fields)
    values[_SCORES_AT] = tuple(outcome.PluginScores(*s) for s in values[_SCORES_AT])
    return outcome.CycleOutcome(*values)


def dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, PROTOCOL)
    table = _TABLE.copy()
    table[outcome.CycleOutcome] = _Outcomes()
    pickler.dispatch_table = table
    pickler.dump(obj)
    return buffer.getvalue()


loads = pickle.loads

#: The first byte of a message of record chunks (FLUSH: and someone waits for them
#: to be durable); every other message is one pickle, which starts with the PROTO
#: opcode (0x80).
CHUNKS = b"C"
FLUSH = b"F"
_LENGTH = struct.Struct(">I")


def is_chunks(message: bytes) -> bool:
    return message[:1] in (CHUNKS, FLUSH)


def chunks_message(chunks: Iterable[bytes], *, flush: bool = False) -> bytes:
    """One message carrying several pickled record chunks, each as it was sealed."""
    parts = [FLUSH if flush else CHUNKS]
    for chunk in chunks:
        parts.append(_LENGTH.pack(len(chunk)))
        parts.append(chunk)
    return b"".join(parts)


def chunks_of(message: bytes) -> Iterator[list[Any]]:
    """The record lists of a ``chunks_message``, in order."""
    view = memoryview(message)
    at, end = 1, len(message)
    while at < end:
        (n,) = _LENGTH.unpack_from(view, at)
        at += _LENGTH.size
        yield loads(view[at : at + n])
        at += n
