"""For the Alembic revisions already shipped ONLY (0003, 0008): their path to ``UtcDateTime``.

The journal's tables live in ``kruntimes.journal.store.schema``; a revision, once shipped,
keeps importing ``kruntimes.journal.schema``. Nothing else imports this module.
"""

from __future__ import annotations

from kruntimes.journal.store.schema import UtcDateTime

__all__ = ["UtcDateTime"]
