"""The REST verbs of the emulator: a routed request to the store call it means, and the answer.

Kept apart from ``server`` (sockets, faults, watches) so each stays one concept:

- list: label and field selectors (the fields the resource supports, ``selectors``),
  ``limit``/``continue`` paging (``paging``); typed lists carry ``kind``/``apiVersion``
  only at the top, as the API server encodes them;
- create, get, update (PUT), patch (the content type picks the flavour), delete;
- DELETE reads DeleteOptions from the body and from the query string
  (``gracePeriodSeconds``, ``propagationPolicy``, the client sends either), and answers
  the object while it still exists (marked, finalizers or a grace period pending), else
  the deleted object or a Status of Success, depending on the resource, as the
  registries answer.
"""

from __future__ import annotations

from typing import Any, Callable

from tests.emulator import resources, selectors
from tests.emulator.statuses import ApiError
from tests.emulator.store import Store


def field_selector(store: Store, resource: resources.Resource, text: str | None) -> tuple[tuple[str, bool, str], ...]:
    """The parsed ``fieldSelector``, over the fields ``resource`` supports (400 for any other)."""
    if resource.plural == "pods":
        supported = selectors.POD_FIELDS
    elif resource.plural == "namespaces":
        supported = selectors.NAMESPACE_FIELDS
    else:
        schema = store.schemas.get((resource.group, resource.plural)) if resource.custom else None
        supported = selectors.COMMON_FIELDS + (schema.selectable_fields if schema is not None else ())
    return selectors.parse_fields(text, supported, custom=resource.custom)


def dispatch(store: Store, method: str, route: resources.Route, query: dict[str, str], body: Any,
             content_type: str, count: Callable[[str], None]) -> tuple[int, dict[str, Any]]:
    resource = route.resource
    if route.subresource not in (None, "status"):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    status = route.subresource == "status"
    if route.name is None:
        if method == "GET" and not status:
            count("list")
            return 200, _list(store, route, query)
        if method == "POST" and not status:
            count("create")
            return 201, store.create(resource, route.namespace, body)
    else:
        namespace = route.namespace or ""
        if method == "GET":
            count("get")
            return 200, store.get(resource, namespace, route.name)
        if method == "PUT":
            count("update")
            return 200, store.update(resource, namespace, route.name, body, status=status)
        if method == "PATCH":
            count("patch")
            return 200, store.patch(resource, namespace, route.name, content_type, body, status=status)
        if method == "DELETE" and not status:
            count("delete")
            return 200, _delete(store, route, query, body)
    raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def _list(store: Store, route: resources.Route, query: dict[str, str]) -> dict[str, Any]:
    resource = route.resource
    labels = selectors.parse_labels(query.get("labelSelector"))
    fields = field_selector(store, resource, query.get("fieldSelector"))
    limit = _integer(query, "limit")
    page = store.list(resource, route.namespace,
                      lambda o: selectors.matches(labels, o) and selectors.fields_match(fields, o),
                      limit=limit, token=query.get("continue") or None)
    if not resource.custom:  # typed lists carry kind/apiVersion only at the top
        for item in page.items:
            item.pop("kind", None)
            item.pop("apiVersion", None)
    metadata: dict[str, Any] = {"resourceVersion": str(page.resource_version)}
    if page.continue_token:
        metadata["continue"] = page.continue_token
        if not labels and not fields:
            metadata["remainingItemCount"] = page.remaining
    return {"kind": resource.list_kind, "apiVersion": resource.api_version, "metadata": metadata,
            "items": page.items}


def _delete(store: Store, route: resources.Route, query: dict[str, str], body: Any) -> dict[str, Any]:
    resource, name = route.resource, route.name
    assert name is not None
    options = dict(body) if isinstance(body, dict) else {}
    if "gracePeriodSeconds" in query:
        options["gracePeriodSeconds"] = _integer(query, "gracePeriodSeconds")
    if query.get("propagationPolicy"):
        options["propagationPolicy"] = query["propagationPolicy"]
    deleted = store.delete(resource, route.namespace, name, options)
    try:
        store.get(resource, route.namespace or "", name)
        still_there = True
    except ApiError:
        still_there = False
    if resource.delete_returns_object or still_there:
        return deleted
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "group": resource.group, "kind": resource.plural,
                        "uid": deleted["metadata"]["uid"]}}


def _integer(query: dict[str, str], name: str) -> int | None:
    if name not in query or query[name] == "":
        return None
    try:
        return int(query[name])
    except ValueError:
        raise ApiError(400, "BadRequest", f'{name}: Invalid value: "{query[name]}": not an integer') from None
