"""Pod tables: the planner's per-pod work kept as arrays between cycles.

Consecutive cycles of one Runtime see almost the same pods: a reservation, a
finished Run or a heartbeat changes one pod's view and leaves the others' views the
very same objects (`slots.Group` patches its list of views in place). Most of what
Filter and Score work out per pod is a pure function of that pod's view and the
Run's request shape (can it fit, its utilisation key), so it is kept here and not
recomputed, and a cycle's remaining per-pod work is list operations done in C.

A `PodTable` is kept per (namespace, Runtime, request shape). It holds:

- `views`: the tuple of views it was last brought up to date with, in snapshot order;
- `uids` and `position`: each pod's UID and the UID -> position index, so a plugin
  turns a cycle's small sets of pod UIDs (affinity targets, bound workspaces,
  preferred terms) into positions without walking the pods;
- one column per plugin (`Column`): that plugin's per-pod arrays, aligned with `views`
  (RuntimePodAvailability: each pod's verdict but for the clock and the workspace,
  and the fresh pods sorted by heartbeat; LeastLoaded: each pod's key, and the
  feasible pods' raw and normalised scores);
- `filtered`: the last Filter result (every pod's rejection, the feasible positions
  and names) with what it followed from (`signature`s: the availability column's
  version, the stale pods, the Run's workspace pods and affinity sets, the layout).

**What invalidates an entry.** A view is immutable and replaced whenever anything
about its pod changes (projection, usage, assumptions). The snapshot carries the
group's log of replaced positions (`snapshot.ViewChanges`), so a table reads the
positions replaced since it last looked and hands them to the columns, which
recompute those entries only; with no log to read (another era, a what-if
snapshot) it compares views by identity, in C. Everything is recomputed when the
number of pods changed (a pod joined or left the Runtime), when more than a quarter
of the views changed, or when a column raised while being patched (the table is
dropped). A column's derived state is invalidated by what it follows from: the
Filter result when any signature differs, LeastLoaded's normalised scores when the
feasible positions or the set of distinct keys among them change (else only the
changed pods' scores are rewritten). A table whose pods do not all have distinct
UIDs is not used: the planner then evaluates plugins pod by pod. What depends on
the cycle rather than the view (the heartbeat deadline, the Run's affinity and
workspace sets) is never stored without the value it came from.

Tables are a memo, never observable: a fresh table computes the same arrays
(`tests/unit/test_core_columns.py` plans every cycle both ways). The planner keeps at
most 16 of them (least recently used first out): each holds its lists and at most
one superseded view per pod until it is next used. Like the snapshot it plans on,
the planner is used under the cluster cache lock.
"""

from __future__ import annotations

import operator
from itertools import compress
from typing import Any, Hashable, Protocol, Sequence, runtime_checkable

from kruntimes.scheduler.projection import Amounts
from kruntimes.scheduler.snapshot import ViewChanges
from kruntimes.scheduler.views import PodView

#: When more than this share of the views changed, rebuilding beats patching.
REBUILD_SHARE = 4


@runtime_checkable
class Column(Protocol):
    """One plugin's per-pod arrays for one table, patched as the table's views change.

    A column computes entries for every pod of the table, so a Filter column's
    verdict for a pod must depend only on that pod and the cycle (never on which
    other pods are evaluated), and must not raise for a pod an earlier Filter
    rejected where the plugin's batch method would not have been called."""

    def update(self, table: PodTable, changed: Sequence[int] | None) -> None:
        """Recompute the entries at `changed` (None: every entry, the table was rebuilt)."""


@runtime_checkable
class ColumnPlugin(Protocol):
    """Optional for Filter and Score plugins: evaluate through columns.

    A Filter column also has `verdicts(state, table)`: one verdict per pod of the
    table, or None when every pod passes. A narrowing one (`narrows = True`) has
    `verdicts(state, table, signature, alive)`, judging only the positions `alive` every
    earlier Filter accepted (None: all); its signature None means it passes every pod,
    and it hands back the very same list only when its verdicts did not change.
    A Score column has `scores(state, table, alive)`: the raw and normalised scores of the pods at
    positions `alive` (None: every pod), exactly what `score` then `normalize`
    return for those pods."""

    name: str

    def column(self, requests: Amounts) -> Column: ...


class PodTable:
    """The views of one (namespace, Runtime, request shape) and every plugin's column."""

    __slots__ = ("views", "uids", "position", "unique", "layout", "columns", "era", "mark", "filtered",
                 "prefiltered", "narrowed", "rejections", "_passed")

    def __init__(self, columns: dict[str, Column]) -> None:
        self.views: tuple[PodView, ...] | None = None
        self.uids: list[str] = []
        self.position: dict[str, int] = {}
        self.unique = True
        self.layout = 0  # counts changes of `uids`: positions found from UIDs are stale when it moves
        self.columns = columns
        self.era: object = None  # of the group's change log last read, and how far
        self.mark = 0
        self.filtered: Any = None  # the planner's Filter result, and what it was computed from
        self.prefiltered: Any = None  # (signatures, rejections) of the Filters before a narrowing column
        self.narrowed: Any = None  # (rejections before, verdicts, filter index, rejections after) of a narrowing column
        self.rejections: Any = None  # the list the kept Filter result was made from
        self._passed: tuple[None, ...] = ()

    def update(self, pods: tuple[PodView, ...], changes: ViewChanges | None = None) -> None:
        """Bring every column up to date with `pods`; raises what a column raised."""
        old = self.views
        if pods is not old:
            changed: list[int] | None = None
            if old is not None and len(old) == len(pods) and self.unique:
                if changes is not None and changes.era is self.era:
                    changed = list(set(changes.log[self.mark:changes.length]))
                else:  # no log to read: identity says which views were replaced
                    changed = list(compress(range(len(pods)), map(operator.is_not, old, pods)))
                if len(changed) * REBUILD_SHARE > len(pods):
                    changed = None
            self.views = pods
            if changed is None:
                self.uids = [view.info.uid for view in pods]
                self.position = {uid: i for i, uid in enumerate(self.uids)}
                self.unique = len(self.position) == len(pods)
                self.layout += 1
            else:
                self._move(changed, pods)
            for column in self.columns.values():
                column.update(self, changed)
        self.era, self.mark = (changes.era, changes.length) if changes is not None else (None, 0)

    def _move(self, changed: list[int], pods: tuple[PodView, ...]) -> None:
        """Re-index the UIDs at `changed`: all old ones out first, as pods may have shifted."""
        position, uids = self.position, self.uids
        moved = [i for i in changed if uids[i] != pods[i].info.uid]
        if not moved:
            return
        self.layout += 1
        for i in moved:
            if position.get(uids[i]) == i:
                del position[uids[i]]
        for i in moved:
            uid = uids[i] = pods[i].info.uid
            if uid in position:
                self.unique = False  # stays so until a rebuild re-counts
            position[uid] = i

    def passed(self) -> tuple[None, ...]:
        """Every pod's rejection when no Filter rejected any: one tuple, kept while the length holds."""
        if self.views is None or len(self._passed) != len(self.views):
            self._passed = (None,) * (0 if self.views is None else len(self.views))
        return self._passed

    def positions(self, uids: Any) -> list[int]:
        """Positions of those of `uids` that are pods of this table (others are ignored)."""
        get = self.position.get
        return [i for i in map(get, uids) if i is not None]


class Tables:
    """A bounded map of pod tables, least recently used first out."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self._tables: dict[Hashable, PodTable] = {}

    def get(self, key: Hashable) -> PodTable | None:
        table = self._tables.pop(key, None)
        if table is not None:
            self._tables[key] = table  # most recently used last
        return table

    def put(self, key: Hashable, table: PodTable) -> None:
        self._tables[key] = table
        while len(self._tables) > self.limit:
            del self._tables[next(iter(self._tables))]

    def drop(self, key: Hashable) -> None:
        self._tables.pop(key, None)

    def __len__(self) -> int:
        return len(self._tables)
