"""The emulator's failures as the API server's ``Status`` bodies, and the committed-change record.

Kept apart from ``store`` so that the modules the store uses (validation, deletion,
paging) can raise them without importing the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.emulator.resources import Resource


class ApiError(Exception):
    """An API failure, turned into a ``Status`` body by the server."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict[str, Any]:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


class Gone(ApiError):
    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(410, "Expired", f"too old resource version: {requested} ({oldest})")


@dataclass
class Event:
    """One committed change. ``old`` is the previous state (selectors need both).

    ``visible_at`` (monotonic seconds) is None until the change is published to watches:
    after the write's response went out, plus the resource's lag (``Store.publish``).
    """

    resource: Resource
    type: str
    rv: int
    obj: dict[str, Any]
    old: dict[str, Any] | None
    visible_at: float | None = None


def not_found(resource: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource.qualified} "{name}" not found',
                    {"name": name, "group": resource.group, "kind": resource.plural})


def conflict(resource: Resource, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource.qualified} "{name}": {why}',
                    {"name": name, "group": resource.group, "kind": resource.plural})
