"""The three PATCH flavours the Python client sends, applied to plain JSON objects.

- JSON merge patch (RFC 7386): maps merge, ``null`` deletes, lists are replaced. What
  ``CustomObjectsApi.patch_*`` sends.
- Strategic merge patch: what ``CoreV1Api``/``CoordinationV1Api`` ``patch_*`` send for a
  dict body. Like merge patch, except that the lists a resource declares with a merge
  key (``status.conditions`` by ``type``...) merge item by item, ``$patch: delete``
  removes an item, ``$patch: replace`` replaces a map, and ``$setElementOrder`` is
  accepted and ignored. Other directives are refused rather than half-applied.
- JSON patch (RFC 6902): ``add``, ``remove``, ``replace``, ``test`` (a failed test is a
  422 on a real server too), ``move`` and ``copy``.
"""

from __future__ import annotations

from typing import Any

from tests.emulator import deep


class PatchError(ValueError):
    """The patch cannot be applied; ``code`` is the HTTP status the API server uses."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, walked with a stack of its own: a patch may nest as deep as a body (10,000 levels)."""
    if not isinstance(patch, dict):
        return deep.copy(patch)
    root = dict(target) if isinstance(target, dict) else {}
    pending = [(root, patch)]
    while pending:
        out, part = pending.pop()
        for key, value in part.items():
            if value is None:
                out.pop(key, None)
            elif isinstance(value, dict):
                child = out.get(key)
                out[key] = dict(child) if isinstance(child, dict) else {}
                pending.append((out[key], value))
            else:
                out[key] = deep.copy(value)
    return root


def strategic_merge_patch(target: Any, patch: Any, merge_keys: dict[tuple[str, ...], str | None],
                          path: tuple[str, ...] = ()) -> Any:
    if not isinstance(patch, dict):
        return deep.copy(patch)
    patch = dict(patch)
    directive = patch.pop("$patch", None)
    if directive == "replace":
        return deep.copy(patch)
    if directive is not None:
        raise PatchError(f"unsupported $patch directive {directive!r} at {'.'.join(path) or '<root>'}", 400)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$"):
            raise PatchError(f"the emulator does not implement the {key.split('/')[0]} directive", 400)
        child = path + (key,)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and child in merge_keys:
            out[key] = _merge_list(out.get(key) or [], value, merge_keys[child], merge_keys, child)
        else:
            out[key] = strategic_merge_patch(out.get(key), value, merge_keys, child)
    return out


def _merge_list(current: list[Any], patch: list[Any], key: str | None,
                merge_keys: dict[tuple[str, ...], str | None], path: tuple[str, ...]) -> list[Any]:
    result = deep.copy(current)
    if key is None:  # a set of scalars: union, in order
        return result + [item for item in patch if item not in result]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"{'.'.join(path)}: every item needs the merge key {key!r}")
        index = next((i for i, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item[key]),
                     None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(strategic_merge_patch({}, item, merge_keys, path))
        else:
            result[index] = strategic_merge_patch(result[index], item, merge_keys, path)
    return result


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations", 400)
    document = deep.copy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"malformed JSON patch operation {operation!r}", 400)
        op, path = operation["op"], _pointer(operation["path"])
        if op == "test":
            if _get(document, path) != operation.get("value"):
                raise PatchError(f"testing value {operation['path']} failed")
        elif op == "remove":
            _remove(document, path)
        elif op in ("add", "replace"):
            if op == "replace":
                _remove(document, path)
            document = _add(document, path, deep.copy(operation.get("value")))
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from", ""))
            value = deep.copy(_get(document, source))
            if op == "move":
                _remove(document, source)
            document = _add(document, path, value)
        else:
            raise PatchError(f"unknown JSON patch operation {op!r}", 400)
    return document


def _pointer(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise PatchError(f"invalid JSON pointer {text!r}", 400)
    return [part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/")]


def _get(document: Any, path: list[str]) -> Any:
    for part in path:
        try:
            document = document[int(part)] if isinstance(document, list) else document[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise PatchError(f"path /{'/'.join(path)} does not exist") from None
    return document


def _remove(document: Any, path: list[str]) -> None:
    if not path:
        raise PatchError("cannot remove the whole document")
    parent = _get(document, path[:-1])
    try:
        if isinstance(parent, list):
            del parent[int(path[-1])]
        else:
            del parent[path[-1]]
    except (KeyError, IndexError, ValueError, TypeError):
        raise PatchError(f"path /{'/'.join(path)} does not exist") from None


def _add(document: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(document, path[:-1])
    last = path[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise PatchError(f"index {last} out of range")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise PatchError(f"path /{'/'.join(path[:-1])} is not a container")
    return document
