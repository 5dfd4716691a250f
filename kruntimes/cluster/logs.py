"""Structured logs: one JSON object per line, for a cluster's log pipeline.

Fields: `time` (RFC 3339, UTC), `level`, `logger`, `message`, then whatever the call
passed as `extra=` (identity, counts, the lease), and `exception` with the traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import IO, Any

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
                    .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def configure(level: str = "info", stream: IO[str] | None = None) -> None:
    """Route every logger to one JSON handler at `level` (debug, info, warning, error)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # urllib3 logs every dropped keep-alive connection at WARNING; the informers already report what matters.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    # Alembic says a dozen INFO lines per migration ("Context impl ...", one per revision): 14 of 31 lines
    # of a scheduler's start. `migrate.upgrade` says what changed in one line; Alembic's are for debugging.
    logging.getLogger("alembic").setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
