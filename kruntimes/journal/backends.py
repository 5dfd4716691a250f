"""For the Alembic revisions already shipped ONLY (0004, 0005, 0006, 0009): their path to ``rebuild_history``.

The journal store lives in ``kruntimes.journal.store`` (``Journal`` in ``store.backends``);
a revision, once shipped, keeps importing ``kruntimes.journal.backends``. Nothing else
imports this module - new code imports ``journal.history.indexer`` or ``journal.store``.
"""

from __future__ import annotations

from kruntimes.journal.history import indexer

#: Revisions 0004-0006 and 0009 call it by this name.
rebuild_history = indexer.rebuild_history
