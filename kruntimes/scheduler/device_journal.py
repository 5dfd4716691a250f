"""What the journal needs of devices beside pods and Runs (SPEC §7.8): inventory texts and classes.

A pod's `kruntimes.io/devices` annotation is up to 64 KiB, and a thousand pods of one
Runtime share one text; a pod record therefore carries only the text's digest, and the
text is a `DeviceInventory` mutation of its own, recorded the first time a digest is
seen in the epoch and again in every checkpoint. Since replay may start from any
checkpoint, "seen" starts over at each one (with the digests it holds), the live cache
and the replayed one alike: both then record the same inventories at the same LSNs.

RuntimeDeviceClasses are cluster-scoped and a cycle plans with the classes it saw, so
every change a cycle could tell apart is a `DeviceClass` mutation (name, generation,
spec as observed), and the checkpoint holds the current ones.

Everything here runs under the cluster cache lock; the data handed to the recorder is
JSON-exact already (`payloads.mutation_payload` passes it through).
"""

from __future__ import annotations

import hashlib
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from kruntimes import canonical

INVENTORY = "DeviceInventory"
CLASS = "DeviceClass"


def digest_of(text: str) -> str:
    """The key a pod record carries for its inventory text (the journal codec's `inventory_digest`)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def recordable_spec(spec: Any) -> Any:
    """`spec` when it survives the journal's JSON unchanged, else a spec the class parser refuses alike.

    A RuntimeDeviceClass the API accepted holds strings only; anything else (a float, a
    non-str key) makes the class invalid anyway, and `device class invalid` is all a cycle
    reads of an invalid class, so replay judges the substitute exactly as the original.
    """
    try:
        if canonical.plain(spec) == spec and _exact(spec):
            return spec
    except (TypeError, ValueError, RecursionError):
        pass
    return {"config": "not recordable"}


def _exact(node: Any) -> bool:
    if type(node) is dict:
        return all(type(k) is str and _exact(v) for k, v in node.items())
    if type(node) is list:
        return all(_exact(v) for v in node)
    return type(node) in (str, int, bool) or node is None


class DeviceJournal:
    """The inventories recorded since the last checkpoint and the classes as last recorded."""

    def __init__(self) -> None:
        self._recorded: dict[str, str] = {}  # digest → text, since the epoch's latest checkpoint
        self._classes: dict[str, dict[str, Any]] = {}  # name → {name, generation, spec}

    # -- inventories -----------------------------------------------------------------------
    def inventory(self, text: str) -> dict[str, Any] | None:
        """The `DeviceInventory` mutation to record before a pod with `text`, None if this epoch has it."""
        digest = digest_of(text)
        if digest in self._recorded:
            return None
        self._recorded[digest] = text
        return {"kind": INVENTORY, "event": "ADDED", "fields": {"digest": digest, "text": text}}

    @property
    def recorded(self) -> Mapping[str, str]:
        """Digest → text of the inventories recorded since the latest checkpoint: what a pod record may name."""
        return MappingProxyType(self._recorded)

    def held(self, texts: Iterable[str | None]) -> dict[str, str]:
        """Digest → text of the inventories `texts` (the pods' annotations) name."""
        return {digest_of(t): t for t in texts if t is not None}

    def checkpointed(self, texts: Iterable[str | None]) -> dict[str, str]:
        """`held`, and the checkpoint that records them starts "seen" over: replay may start there."""
        self._recorded = self.held(texts)
        return dict(self._recorded)

    def restore(self, inventories: dict[str, str]) -> None:
        self._recorded = dict(inventories)

    # -- classes -----------------------------------------------------------------------------
    def class_changed(self, name: str, generation: Any, spec: Any) -> dict[str, Any]:
        gen = generation if type(generation) is int else None
        entry = {"name": name, "generation": gen, "spec": recordable_spec(spec)}
        self._classes[name] = entry
        return {"kind": CLASS, "event": "MODIFIED", "fields": entry}

    def class_deleted(self, name: str) -> dict[str, Any]:
        self._classes.pop(name, None)
        return {"kind": CLASS, "event": "DELETED", "fields": {"name": name}}

    def classes(self) -> list[dict[str, Any]]:
        """The classes as recorded, by name: what a checkpoint holds."""
        return [dict(self._classes[n]) for n in sorted(self._classes)]
