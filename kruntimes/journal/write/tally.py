"""What a writer counts: the numbers ``stats()`` and the metrics report.

Owned by the writer thread (read by ``stats()`` without a lock: ints only); the spool
drain, built by the writer, counts its quarantined records and failed reads here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kruntimes.journal.write import metrics


@dataclass
class Tally:
    written: int = 0
    spilled: int = 0
    dropped: int = 0
    write_errors: int = 0
    #: Records quarantined by the spool drain (their reasons are counted in ``rejected`` too).
    quarantined: int = 0
    rejected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(metrics.REJECT_REASONS, 0))
