"""For the Alembic revisions already shipped ONLY (0004, 0005, 0006, 0009): their path to the history derivation.

How records become history rows lives in ``kruntimes.journal.history`` (``derive``,
``tables``); a revision, once shipped, keeps importing ``kruntimes.journal.derived``.
Nothing else imports this module.
"""

from __future__ import annotations

from kruntimes.journal.history.derive import REQUESTS_FROM_RESERVE
from kruntimes.journal.history.tables import left_empty, written_columns_exist

__all__ = ["REQUESTS_FROM_RESERVE", "left_empty", "written_columns_exist"]
