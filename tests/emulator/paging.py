"""Lists in pages: ``limit`` and ``continue``, as the API server serves them from etcd.

"API Concepts", retrieving large results sets in chunks: a list with ``limit`` returns
at most that many items and, when more remain, ``metadata.continue``; the next request
passes it back and gets the following items *as they were at the first page's
resourceVersion* (a consistent snapshot), with ``metadata.resourceVersion`` unchanged.
``remainingItemCount`` is set when no selector filtered the list. Once that version
was compacted away the token is expired: 410 Gone, reason ``Expired``. A token that
does not decode is a 400.

The emulator rebuilds the snapshot from its event history (undoing, newest first,
every change after the token's version), so a token outlives exactly as much history
as a watch from the same version would.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from tests.emulator import deep
from tests.emulator.resources import Resource
from tests.emulator.statuses import ApiError, Gone

if TYPE_CHECKING:
    from tests.emulator.store import Key, Store

EXPIRED = ("The provided continue parameter is too old to display a consistent list result. You can start a new "
           "list without the continue parameter, or use the continue token in this response to retrieve the "
           "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
           "that were created, modified, or deleted between the time the first chunk was returned and now may show "
           "up in the list.")


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: int
    continue_token: str | None = None
    remaining: int | None = None


def page(store: "Store", resource: Resource, namespace: str | None, keep: Callable[[dict[str, Any]], bool],
         limit: int | None, token: str | None) -> Page:
    """(Lock held.) One page of the matching objects, sorted by namespace/name."""
    if token:
        rv, after = _decode(token)
        objects = _snapshot(store, resource, rv)
    else:
        rv, after, objects = store._rv, None, store.objects(resource)
    matching = [obj for key, obj in sorted(objects.items())
                if namespace in (None, key[1]) and (after is None or key[1:] > after) and keep(obj)]
    if limit is None or limit <= 0 or len(matching) <= limit:
        return Page([deep.copy(obj) for obj in matching], rv)
    shown = matching[:limit]
    last = shown[-1]["metadata"]
    return Page([deep.copy(obj) for obj in shown], rv,
                _encode(rv, (last.get("namespace", ""), last["name"])), len(matching) - limit)


def _snapshot(store: "Store", resource: Resource, rv: int) -> dict["Key", dict[str, Any]]:
    try:
        newer = store.events_after(rv)
    except Gone:
        raise ApiError(410, "Expired", EXPIRED) from None
    objects = dict(store.objects(resource))
    for event in reversed(newer):
        if event.resource is not resource:
            continue
        meta = event.obj["metadata"]
        key = (resource.qualified, meta.get("namespace", ""), meta["name"])
        if event.old is None:
            objects.pop(key, None)
        else:
            objects[key] = event.old
    return objects


def _encode(rv: int, after: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps({"v": "emulator/1", "rv": rv, "after": list(after)}).encode()).decode()


def _decode(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["after"][0]), str(data["after"][1]))
    except (ValueError, KeyError, IndexError, TypeError, binascii.Error):
        raise ApiError(400, "BadRequest", "continue key is not valid: incorrect encoded start resourceVersion "
                                          "(version meta.k8s.io/v1)") from None
