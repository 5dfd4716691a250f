"""The cluster adapter's own errors, each chaining the client's `ApiException` as its cause.

Callers branch on these types, never on HTTP codes: the core's `status.Conflict` and
`status.ApiError` are what the scheduler loop understands, so the binder's errors
subclass them; the informers and the elector use the rest to decide between
"resume", "relist" and "back off".
"""

from __future__ import annotations

import json
from typing import Any

from kruntimes.scheduler import status as st


class ClusterError(Exception):
    """Something went wrong talking to the Kubernetes API."""


class ApiError(ClusterError, st.ApiError):
    """The API answered with an error (or did not answer); retried with backoff.

    `code` is the HTTP status when there was one (None for a timeout or a refused connection).
    """

    def __init__(self, message: str, code: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after


class BindConflict(ClusterError, st.Conflict):
    """The Run changed (409) or vanished (404) since the scheduler read it: re-plan on the newer version."""


class BindAmbiguous(ApiError, st.Ambiguous):
    """A status write that was sent but not answered (timeout, connection lost, 504): it may
    have landed, or may still land. The loop keeps the assumption until the Run is observed."""


class NotLeader(ApiError):
    """A status write refused locally: this instance does not hold the lease right now."""


class Refused(ApiError, st.Refused):
    """The API server refused the object as written (400, 403 or 422): the same body gets the same answer."""


class Gone(ClusterError):
    """410 Gone: the watch's resourceVersion is older than the server's history; relist."""


class WatchError(ApiError):
    """A watch ended with an ERROR event other than 410, or an unexpected HTTP status."""


class LeaseError(ApiError):
    """Reading or writing the leader-election Lease failed."""


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a client exception, if it has one."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and status > 0 else None


def retry_after(exc: BaseException) -> float | None:
    """The seconds of a `Retry-After` header (429/503), if the answer had one in that form."""
    headers: Any = getattr(exc, "headers", None)
    value = headers.get("Retry-After") if headers is not None else None
    try:
        seconds = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None  # the HTTP-date form: the API server never sends it
    return seconds if seconds is not None and 0 <= seconds <= 3600 else None


def describe(exc: BaseException) -> str:
    """One line for logs: the API's Status message when there is one, else the exception."""
    body: Any = getattr(exc, "body", None)
    if isinstance(body, (bytes, str)) and body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            return f"{status_code(exc)}: {message}"
    reason = getattr(exc, "reason", None)
    if status_code(exc) is not None:
        return f"{status_code(exc)}: {reason or type(exc).__name__}"
    return f"{type(exc).__name__}: {exc}"
