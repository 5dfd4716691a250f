"""For the Alembic environment ONLY (migrations/env.py): its path to the declared history views.

The views are declared in ``kruntimes.journal.history.views``; the shipped
``migrations/env.py`` keeps importing ``kruntimes.journal.views``. Nothing else imports
this module.
"""

from __future__ import annotations

from kruntimes.journal.history.views import include_object, metadata

__all__ = ["include_object", "metadata"]
