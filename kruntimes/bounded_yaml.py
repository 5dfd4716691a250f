"""YAML a user hands us (`simulate -f`, `scheduler --kubeconfig`), read with bounds.

PyYAML's ``safe_load`` is safe from code execution, not from size: a 1 KB file of
nested aliases ("billion laughs") stands for 10**9 nodes. PyYAML itself keeps that a
small shared graph, but anything that walks it - a validator, a message that
serialises the value, a deep copy - expands it, and `kruntimes simulate` ran out of
memory at 3 GB doing so. Other hostile inputs raise what no caller expects: an
integer of more than 4,300 digits (Python's int conversion limit) raises
``ValueError``, deep nesting ``RecursionError``, a binary file ``UnicodeDecodeError``.

So everything read here is bounded before it reaches a caller, and every failure is
one ``Unreadable`` whose message names the file (and document and line, when known):
- at most ``MAX_BYTES`` per file, and it must be UTF-8 text;
- at most ``MAX_NODES_PER_DOCUMENT`` nodes per document and ``MAX_NODES_PER_FILE`` per
  file, counting every alias as the nodes it stands for (what a walk would see);
- an alias may not refer to a node that contains it (a recursive structure);
- at most ``MAX_DEPTH`` levels of nesting;
- integers of at most ``MAX_INT_CHARS`` characters.

Kubernetes objects are far inside these limits: the API server refuses request bodies
over 3 MiB, and a Run or a kubeconfig has a few dozen to a few thousand nodes.
sigs.k8s.io/yaml, which kubectl uses, refuses "excessive aliasing" for the same reason.
The SPEC says nothing of input files; its preamble sends us to what a user of a
Kubernetes scheduler expects, and kubectl answers such files with an error, not a crash.
"""

from __future__ import annotations

from typing import IO, Any, Iterator

import yaml

MAX_BYTES = 16 * 1024 * 1024
MAX_NODES_PER_DOCUMENT = 100_000
MAX_NODES_PER_FILE = 1_000_000
MAX_DEPTH = 100
MAX_INT_CHARS = 4300  # Python's own limit on int(str); a Kubernetes integer has at most 19 digits


class Unreadable(ValueError):
    """Input that is not bounded, UTF-8 YAML; the message names the file and where in it."""


class _Bounded(yaml.MarkedYAMLError):
    """A bound was passed; raised inside the loader so that it carries the mark."""


if yaml.__with_libyaml__:
    class _Events(yaml.cyaml.CParser):
        """Scanning and parsing in C (libyaml): five times faster than PyYAML's own parser,
        which took about ten seconds per megabyte on a shared machine."""
else:  # pragma: no cover - PyYAML built without libyaml
    class _Events(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)


class _BoundedLoader(yaml.composer.Composer, yaml.constructor.SafeConstructor, yaml.resolver.Resolver, _Events):
    """SafeLoader's composer, constructor and resolver over libyaml's events; it counts nodes as
    a walk would see them and limits depth and integers. (libyaml composes in C, out of reach.)"""

    def __init__(self, stream: str) -> None:
        _Events.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self.file_nodes = 0
        self.document_nodes = 0
        self._depth = 0
        self._sizes: dict[str, int] = {}  # anchor -> nodes it stands for, once it is complete

    def compose_document(self) -> Any:
        self.document_nodes = 0
        self._sizes = {}
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.anchors:
                if event.anchor not in self._sizes:
                    raise _Bounded(None, None, f"alias *{event.anchor} refers to a node that contains it "
                                   "(a recursive structure)", event.start_mark)
                self._count(self._sizes[event.anchor], event)
            return super().compose_node(parent, index)  # undefined aliases are PyYAML's error
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Bounded(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        before = self.document_nodes
        self._count(1, event)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._sizes[event.anchor] = self.document_nodes - before
        return node

    def _count(self, nodes: int, event: Any) -> None:
        self.document_nodes += nodes
        self.file_nodes += nodes
        if self.document_nodes > MAX_NODES_PER_DOCUMENT:
            raise _Bounded(None, None, f"a document of more than {MAX_NODES_PER_DOCUMENT:,} nodes "
                           "(aliases counted as the nodes they stand for)", event.start_mark)
        if self.file_nodes > MAX_NODES_PER_FILE:
            raise _Bounded(None, None, f"more than {MAX_NODES_PER_FILE:,} nodes in one file "
                           "(aliases counted as the nodes they stand for)", event.start_mark)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_INT_CHARS:
            raise _Bounded(None, None, f"an integer of {len(node.value):,} characters "
                           f"(at most {MAX_INT_CHARS:,})", node.start_mark)
        return int(super().construct_yaml_int(node))

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # PyYAML's scalar constructors trust the resolver's patterns, so an explicit tag
        # (`!!int ""`, `!!bool maybe`) or an impossible date (2026-02-30) raises whatever
        # Python raises; the innermost node that fails is the one named.
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            shown = node.value[:40] if isinstance(node.value, str) else ""
            tag = node.tag.removeprefix("tag:yaml.org,2002:")[:40]
            reason = " ".join(str(exc).split())[:80]  # int("...") repeats the whole value
            raise yaml.constructor.ConstructorError(None, None, f"cannot read {shown!r} as !!{tag} ({reason})",
                                                    node.start_mark) from exc


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


def read_text(name: str, stream: IO[bytes] | None = None) -> str:
    """The UTF-8 text of file ``name`` (or of the binary ``stream``), at most MAX_BYTES of it."""
    try:
        if stream is not None:
            data = stream.read(MAX_BYTES + 1)
        else:
            with open(name, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise Unreadable(f"{name}: cannot read ({exc.strerror or exc})") from exc
    if len(data) > MAX_BYTES:
        raise Unreadable(f"{name}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{name}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}); "
                         "is it a binary file?") from exc


def load_all(name: str, text: str) -> Iterator[tuple[int, Any]]:
    """(document number from 1, value) for every document of ``text``, empty ones as None."""
    try:
        loader = _BoundedLoader(text)  # the reader refuses control characters here, at once
    except yaml.YAMLError as exc:
        raise Unreadable(_message(name, 0, exc)) from exc
    except UnicodeEncodeError as exc:  # a lone surrogate: only text built in Python, never a file, has one
        raise Unreadable(f"{name}: not valid YAML (character U+{ord(exc.object[exc.start]):04X} at offset "
                         f"{exc.start} is not allowed in YAML)") from exc
    number = 0
    try:
        while True:
            try:
                if not loader.check_node():
                    return
                number += 1
                value = loader.get_data()
            except yaml.YAMLError as exc:
                raise Unreadable(_message(name, number, exc)) from exc
            yield number, value
    finally:
        loader.dispose()


def load(name: str, text: str) -> Any:
    """The value of a single-document ``text`` (None when empty)."""
    values = [value for _, value in load_all(name, text)]
    if len(values) > 1:
        raise Unreadable(f"{name}: expected one YAML document, found {len(values)}")
    return values[0] if values else None


def _message(name: str, number: int, exc: yaml.YAMLError) -> str:
    """One line: PyYAML's own messages span several lines and quote the whole stream's name."""
    if isinstance(exc, yaml.reader.ReaderError):
        char = exc.character
        shown = f"U+{char:04X}" if isinstance(char, int) else repr(char)
        return f"{name}: not valid YAML (character {shown} at offset {exc.position} is not allowed in YAML)"
    mark = getattr(exc, "problem_mark", None)
    where = f"{name} line {mark.line + 1}" if mark is not None else name
    if isinstance(exc, _Bounded):
        return f"{where}: {exc.problem} (document {number})"
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    problem = " ".join("; ".join(p for p in parts if p).split()) or type(exc).__name__
    if len(problem) > 200:  # PyYAML quotes tags and anchors whole, and a file may hold a 16 MiB one
        problem = problem[:199] + "…"
    return f"{where}: not valid YAML ({problem})"


__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_INT_CHARS", "MAX_NODES_PER_DOCUMENT", "MAX_NODES_PER_FILE",
           "Unreadable", "load", "load_all", "read_text"]
