"""Spooled records back into the database: the drain, its checks and quarantine, and recovery.

What a ``JournalWriter``'s thread (its ``committer.Committer``) does with records that
wait in the spool, and with epochs a killed process left open: a ``SpoolDrain`` object
the committer builds and calls.

The drain (SPEC §5 "Integrity"): once the database answers, spooled records go in
first, oldest first, with ``skip_existing`` (a crash mid-drain never duplicates).
Each is checked before it is stored: payload hash, and a link that follows from its
epoch's stored head. One that fails is never stored; it and the rest of its epoch in
the spool go to a quarantine file (``<spool>.quarantine``), counted and logged with
epoch and LSN. A key stored with other content or link goes there too.

Epoch recovery: a writer told its epoch (``settings.Epochs.epoch``) notes it in ``<spool>.epochs``
until the epoch's ``end`` record is durable. A writer that finds an earlier epoch in
that note, or unended in its spool (its process was killed mid-term), closes it once
the spool is drained: an ``end`` {"reason": "recovered"} chained from its stored head,
or, when none of its records was stored, from its start, naming the LSNs it lost.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from kruntimes.journal import chain, errors, linker, records
from kruntimes.journal.write import backoff, handover, metrics, settings, spool
from kruntimes.journal.store import backends, deadline

# Logged under the writer's name: operators' log configuration knows these lines by it (as the committer's).
log = logging.getLogger("kruntimes.journal.writer")


class SpoolDrain:
    """The drain, quarantine and epoch recovery of one writer's spool, on the writer's thread.

    Built by the committer with what it needs: the spool and the journal behind their
    deadline, the writer's ``Linker``, ``Backoff`` and counts (``WriterStats``), ``store``
    (the committer's write, which spools again on failure), ``log_head`` (the head's log
    line) and the writer's ``Epochs``.
    """

    def __init__(self, spool: spool.Spool, journal: backends.Journal, deadline: deadline.Deadline,
                 linker: linker.Linker, backoff: backoff.Backoff, tally: metrics.WriterStats, *,
                 store: Callable[..., bool], log_head: Callable[[str, int, str], None],
                 wall_clock: Callable[[], datetime], max_batch: int, epochs: settings.Epochs) -> None:
        self._spool = spool
        self._journal = journal
        self._deadline = deadline
        self._linker = linker
        self._backoff = backoff
        self._tally = tally
        self._write = store
        self._log_head = log_head
        self._clock = backoff.clock
        self._wall_clock = wall_clock
        self._max_batch = max_batch
        self._epoch = epochs.epoch
        self._recover_all = epochs.recover_all  # no epoch of its own: every epoch found is an earlier one to close
        self.quarantine_path = Path(f"{spool.path}.quarantine")
        self.note_path = Path(f"{spool.path}.epochs")
        self._quarantined: set[str] = set()  # epochs whose rest of the spool goes to quarantine
        self._drain_offset = 0
        self.to_recover = self._epochs_to_recover()

    # -- the drain, its checks and the quarantine ------------------------------------------

    def quarantine_from(self, rows: list[records.EncodedRecord], first_bad: dict[str, int], reason: str,
                         why: str) -> list[records.EncodedRecord]:
        """Move each epoch's rows from its ``first_bad`` LSN on to the quarantine file; the rest of ``rows``."""
        self._quarantined.update(first_bad)
        keep: list[records.EncodedRecord] = []
        moved: list[records.EncodedRecord] = []
        for r in rows:
            bad = first_bad.get(r.incarnation)
            (moved if bad is not None and r.lsn >= bad else keep).append(r)
        self._to_quarantine(moved, reason)
        for epoch, lsn in sorted(first_bad.items(), key=lambda item: item[1]):
            log.error(
                "journal: record epoch %s LSN %d %s; it and the rest of epoch %s in this batch are NOT stored:"
                " moved to %s (rejected{reason=%s})", epoch, lsn, why, epoch, self.quarantine_path, reason,
                extra={"epoch": epoch, "lsn": lsn, "reason": reason, "quarantine": str(self.quarantine_path)})
        return keep

    def _to_quarantine(self, rows: list[records.EncodedRecord], reason: str) -> None:
        if not rows:
            return
        self._tally.rejected[reason] = self._tally.rejected.get(reason, 0) + len(rows)
        self._tally.quarantined += len(rows)
        try:
            spool.quarantine(self.quarantine_path, rows)
        except (OSError, errors.JournalError) as exc:
            log.error("journal: cannot write the quarantine file %s, %d record(s) lost: %s",
                      self.quarantine_path, len(rows), exc)

    def _checked(self, rows: list[records.EncodedRecord]) -> list[records.EncodedRecord]:
        """Spooled ``rows`` that may be stored, each linked; the others go to the quarantine.

        A row must match its payload hash and its link must follow from its epoch's
        stored head (or GENESIS for an epoch the database does not have). Rows at or
        below the stored head are left to ``skip_existing``, which stores nothing of
        them and refuses one that differs. A row without a link (a format 1 spool, or
        an epoch whose head the writer did not know) gets it here.
        """
        stored = self._deadline.call("read of the epochs' heads", self._journal.epochs, {r.incarnation for r in rows})
        state = {epoch: (h.head_lsn, h.head_hash) for epoch, h in stored.items()}
        first_bad: dict[str, tuple[int, str]] = {}
        out = []
        key = self._linker.key
        for r in rows:
            epoch = r.incarnation
            if epoch in self._quarantined:
                first_bad.setdefault(epoch, (r.lsn, "follows a quarantined record of its epoch"))
                continue
            if epoch in first_bad:
                continue
            if records.content_hash(r.payload) != r.payload_sha256:
                first_bad[epoch] = (r.lsn, "does not match its payload SHA-256")
                continue
            head = state.get(epoch)
            if head is not None and r.lsn <= head[0]:
                out.append(r)  # stored already, or a conflict skip_existing reports
                continue
            expected = self._linker.after(chain.GENESIS if head is None else head[1], r)
            if r.chain_hash and not chain.same(r.chain_hash, expected):
                first_bad[epoch] = (r.lsn, "has a link that does not follow from its epoch's stored head"
                                           + (" (or the spool was written with another key)" if key else ""))
                continue
            if not r.chain_hash:
                r = r._replace(chain_hash=expected)
            state[epoch] = (r.lsn, r.chain_hash)
            out.append(r)
        if first_bad:
            bad = [r for r in rows if r.incarnation in first_bad and r.lsn >= first_bad[r.incarnation][0]]
            for epoch, (lsn, why) in first_bad.items():
                self.quarantine_from(bad, {epoch: lsn}, "chain", why)
            self._quarantined.update(first_bad)
        return out

    def drain(self) -> bool:
        """Move spooled records into the database, oldest first, if a retry is due; True once the spool is empty."""
        if not self._backoff.due():
            return False
        deadline = self._clock() + 1.0  # give the buffer a turn at least every second
        while True:
            rows, next_offset = self._spool.read(self._drain_offset, self._max_batch)
            if not rows:
                log.info("journal spool %s drained into the database", self._spool.path)
                self._spool.clear()
                self._drain_offset = 0
                self._quarantined.clear()
                self._backoff.reset()
                return True
            try:
                rows = self._checked(rows)
            except errors.JournalUnavailable as exc:
                self._tally.write_errors += 1
                log.warning("journal spool drain: the database cannot say the epochs' heads: %s", exc)
                self._backoff.fail()
                return False
            if rows and not self._write(rows, skip_existing=True):
                return False
            self._drain_offset = next_offset
            if self._clock() > deadline:
                self._backoff.next_at = self._clock()  # continue right after this batch is spooled
                return False

    # -- epochs a killed process left open ---------------------------------------------------

    def _epochs_to_recover(self) -> list[str]:
        """Earlier epochs of this spool that never wrote their end: noted, or unended in the spool.

        Only a writer told its own epoch can tell an earlier one from its own (a writer
        process restarted mid-epoch continues it).
        """
        if self._epoch is None and not self._recover_all:
            return []
        noted = read_note(self.note_path)
        unended = [epoch for epoch, h in self._spool.heads.items() if h.kind != "end"]
        found = [e for e in dict.fromkeys([*noted, *unended]) if e != self._epoch]
        write_note(self.note_path, [*found, *([self._epoch] if self._epoch else [])])
        if found:
            log.warning("journal: %d earlier epoch(s) of this spool did not end (a killed process): %s;"
                        " closing them once the spool is drained", len(found), ", ".join(found))
        return found

    def recover(self) -> None:
        """Close every epoch to recover with an ``end`` {"reason": "recovered"} after its stored head."""
        try:
            heads = self._deadline.call("read of the epochs' heads", self._journal.epochs, self.to_recover)
        except errors.JournalUnavailable as exc:
            log.warning("journal: cannot read the heads of epochs to recover yet: %s", exc)
            self._backoff.fail()
            return
        for epoch in list(self.to_recover):
            head = heads.get(epoch)
            # The handed-over mark: records its process received past the stored head are lost, and the
            # end record comes after them, so that verify names the gap (SPEC §5 "Crash vs loss").
            handed = handover.handed(self._spool.path, epoch)
            if head is not None and head.end_lsn is None:
                payload: dict[str, Any] = {"reason": "recovered"}
                if handed is not None:
                    payload["handed_lsn"] = handed
                end = records.encode_fields(epoch, max(head.head_lsn, handed or 0) + 1, self._wall_clock(), "end",
                                            payload)
                end = end._replace(chain_hash=self._linker.after(head.head_hash, end))
                if not self._write([end], skip_existing=True):
                    return  # spilling now; recovery waits for the spool to drain again
                log.info("journal: closed epoch %s (its process was killed) after LSN %d", epoch, head.head_lsn,
                         extra={"epoch": epoch, "lsn": end.lsn})
                if end.lsn > head.head_lsn + 1:
                    log.error("journal: epoch %s lost LSNs %d..%d when its process was killed: handed to its writer, "
                              "never stored", epoch, head.head_lsn + 1, end.lsn - 1,
                              extra={"epoch": epoch, "lsn": head.head_lsn + 1, "handed_lsn": handed})
                self._log_head(epoch, end.lsn, end.chain_hash)
            elif head is None:
                first = handover.first_numbered(self._spool.path, epoch)
                if handed is not None and first is not None and first <= handed:
                    if not self._end_lost(epoch, first, handed):
                        return  # spilling now; recovery waits for the spool to drain again
                else:
                    log.warning("journal: epoch %s to recover has no record in the database; nothing to close%s",
                                epoch, "" if handed is None else f" (its records up to LSN {handed} were lost)")
            handover.forget_all(self._spool.path, epoch)
            self.to_recover.remove(epoch)
            write_note(self.note_path, [*self.to_recover, *([self._epoch] if self._epoch else [])])

    def _end_lost(self, epoch: str, first: int, handed: int) -> bool:
        """Close an epoch none of whose records was stored: its ``end`` names the LSNs lost (``first_lsn``
        to ``handed_lsn``), chained from the epoch's start, so that verify names them (SPEC §5 "Crash vs
        loss"). Recorded when the epoch's marks last changed, about when it died: its one record is also
        its first, which places the epoch among the others (``history.order``), before any begun after the
        crash. False if it went to the spool."""
        at = handover.marked_at(self._spool.path, epoch) or self._wall_clock()
        payload = {"reason": "recovered", "handed_lsn": handed, "first_lsn": first}
        end = records.encode_fields(epoch, handed + 1, min(at, self._wall_clock()), "end", payload)
        end = end._replace(chain_hash=self._linker.after(chain.GENESIS, end))
        if not self._write([end], skip_existing=True):
            return False
        log.error("journal: epoch %s lost LSNs %d..%d when its process was killed: handed to its writer, none "
                  "stored; closed it with an end record naming them", epoch, first, handed,
                  extra={"epoch": epoch, "lsn": first, "handed_lsn": handed})
        self._log_head(epoch, end.lsn, end.chain_hash)
        return True


def read_note(path: Path) -> list[str]:
    """The epochs noted open in the note at ``path`` (none if it is missing or unreadable)."""
    try:
        noted = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.error("journal: cannot read the epochs note %s (%s); ignoring it", path, exc)
        return []
    return [e for e in noted if type(e) is str] if type(noted) is list else []


def write_note(path: Path, epochs: list[str]) -> None:
    """Replace the note atomically (write, fsync, rename); an empty note is removed."""
    try:
        if not epochs:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(epochs, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.error("journal: cannot write the epochs note %s: %s", path, exc)
