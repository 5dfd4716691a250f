"""DeviceAllocation's column: a Run's device claim judged on the pod table (SPEC §7.5, §7.6).

A narrowing column (`columns.ColumnPlugin`): the planner hands it the positions every
earlier Filter accepted, so the step budget is charged only for those pods, in name
order, exactly as `DeviceAllocation.filter` charges it on the pod-by-pod path. The
column keeps each position's usage id across cycles, recomputed only for the pods
whose view now holds another pod object and those the targets' device log names, and
each id's first position; a cycle searches once per distinct usage among the accepted
pods, in order of first appearance (the order the pod-by-pod path reaches them in).
An outcome found with the full search limit is kept per usage id while the prepared
claim, the engine, the search memo and its generation stay: it is what the memo would
recall, charged and counted as the memo's hit would be. What the column found is read
through `DeviceCycle.found_on`.

The plugin and its cycle state (`device_allocation.DeviceCycle`) are handed in, not
imported: the plugin builds this column.
"""

from __future__ import annotations

from typing import Any, Sequence

from kruntimes.devices import allocation
from kruntimes.scheduler import device_state
from kruntimes.scheduler.columns import PodTable
from kruntimes.scheduler.interface import CycleState
from kruntimes.scheduler.targets import NamespaceTargets

NONE, INVALID = -1, -2  # a position's usage id when its pod has no inventory, or a malformed one


class DeviceColumn:
    """The Filter on a pod table: each position's usage id kept, one search per distinct usage."""

    narrows = True  # judges only the positions every earlier Filter accepted (`Planner._plan_columns`)

    def __init__(self, plugin: Any) -> None:
        self.plugin = plugin
        self.ids: list[int] = []  # per position: its `PodDevices.usage_id`, NONE or INVALID
        self.dirty: set[int] | None = None  # positions to recompute before the next claim (None: all)
        self.volatile: set[int] = set()  # pods that are not current: never kept, so recomputed every cycle
        self.devices: dict[int, device_state.PodDevices] = {}  # usage id → what its search needs
        self.targets: NamespaceTargets | None = None  # whose device log was read, and how far
        self.seen = 0
        self.layout = -1  # the table's layout `positions` was built for
        self.positions: dict[str, int] = {}  # pod name → position
        self.version = 0  # moves whenever an id changes
        self.first: dict[int, int] = {}  # usage id → its first position, and how many positions have it
        self.count: dict[int, int] = {}
        self.order: tuple[int, list[int] | None, list[int]] = (-1, None, [])  # (version, alive, distinct ids)
        self.moved: list[int] = []  # positions whose id changed since the latest verdicts
        self.infos: list[Any] = []  # per position: the pod (`PodInfo`) its id was computed from
        self.said: tuple[Any, ...] | None = None  # (what decided them, accepted positions, verdicts)
        # The latest cycle answered from kept outcomes alone: (order, owner, budget at start, by_usage,
        # seen, remaining, memo hits, rejects, whether every search had the full limit, `summarise(seen)`).
        self.answered: tuple[Any, ...] | None = None

    def update(self, table: PodTable, changed: Sequence[int] | None) -> None:
        if changed is None or self.dirty is None:
            self.dirty = None
        else:
            self.dirty.update(changed)

    def signature(self, state: CycleState, table: PodTable) -> object:
        cycle = state.of(self.plugin.name)
        return None if cycle is None else object()  # a claim: never reuse a stored Filter result

    def verdicts(self, state: CycleState, table: PodTable, signature: object,
                 alive: list[int] | None = None) -> list[str | None] | None:
        """Verdicts for the positions `alive` (None: all); other positions' verdicts mean nothing."""
        cycle: Any = state.of(self.plugin.name)
        if cycle is None:
            return None
        views = table.views
        assert views is not None
        if self.layout != table.layout:
            self._index(table)
        if not cycle.use_kept or isinstance(cycle.prepared, allocation.Rejection) or \
                len(self.positions) != len(views):  # rare: judged pod by pod, exactly as the Filter
            at = range(len(views)) if alive is None else alive
            judged = self.plugin.filter(state, [views[i] for i in at])
            if alive is None:
                return judged
            verdicts: list[str | None] = [None] * len(views)
            for i, verdict in zip(alive, judged):
                verdicts[i] = verdict
            return verdicts
        self._catch_up(cycle, table)
        ids = self.ids
        cycle.positions, cycle.usage_ids = self.positions, ids
        rejects, whole = self._answer(cycle, alive)
        moved, self.moved = self.moved, []
        if not rejects:
            self.said = None
            return None
        said = {u: known[0] for u, known in cycle.by_usage.items()}
        said[NONE], said[INVALID] = allocation.NO_INVENTORY, allocation.INVALID_INVENTORY
        # With every search at the full limit a usage id's verdict is a pure function of the prepared
        # claim and engine: from one such cycle to the next over the same accepted positions, a
        # position's verdict can change only where its id did. Unchanged, the list is the same
        # object, which the planner then need not read again.
        decides = (cycle.prepared, cycle.engine, cycle.budget.search_steps)
        kept = self.said
        if whole and kept is not None and kept[0] == decides and kept[1] is alive:
            verdicts = kept[2]
            get = said.get
            changed = [i for i in moved if verdicts[i] != get(ids[i])]
            if changed:
                verdicts = verdicts.copy()
                for i in changed:
                    verdicts[i] = get(ids[i])
        else:
            verdicts = list(map(said.get, ids))
        self.said = (decides, alive, verdicts) if whole else None
        return verdicts

    def _order(self, alive: list[int] | None) -> list[int]:
        """The distinct usage ids in order of first appearance among the accepted positions."""
        version, kept_alive, order = self.order
        if version != self.version or kept_alive != alive:
            first, ids = self.first, self.ids
            order = sorted(first, key=first.__getitem__) if alive is None else \
                list(dict.fromkeys(map(ids.__getitem__, alive)))
            self.order = (self.version, alive, order)
        return order

    def _answer(self, cycle: Any, alive: list[int] | None) -> tuple[bool, bool]:
        """Fill `cycle.by_usage` for the usage ids at the accepted positions, in order of first appearance,
        charging as `DeviceAllocation.filter` would; whether some pod is rejected, and whether every
        search had the full step limit."""
        plugin, prepared, budget = self.plugin, cycle.prepared, cycle.budget
        assert isinstance(prepared, allocation.Prepared)
        memo, full = plugin.memo, budget.search_steps
        generation = memo.generation
        owner = (prepared, cycle.engine, memo, generation, full)
        if plugin.answers_for != owner or len(plugin.answers) > allocation.SearchMemo.LIMIT:
            plugin.answers.clear()
            plugin.answers_for = owner
        answers, seen, by_usage = plugin.answers, budget.seen, cycle.by_usage
        start = budget.remaining
        again = self._again(cycle, alive, owner)
        if again is not None:
            return again
        fresh = not seen and not by_usage
        order = self._order(alive)
        hits = memo.hits
        recalled = 0  # memo hits the kept outcomes stand for
        searched = rejects = False
        whole_limit = True
        for u in order:
            if u < 0:
                rejects = True
                continue
            entry = answers.get(u)
            if budget.remaining < full:
                whole_limit = False
            elif entry is not None and not searched:  # (a search may have made the memo forget)
                # Kept from a full-limit search of this very key: what the memo would recall now.
                key, outcome, said = entry
                if key in seen:  # another id of the same usage, searched this cycle: not charged again
                    said = _said(self.devices[u], seen[key])
                else:
                    seen[key] = outcome
                    budget.remaining -= outcome.steps
                    recalled += 1
                by_usage[u] = said
                rejects = rejects or said[0] is not None
                continue
            pod = self.devices[u]
            key = allocation.search_key(prepared, pod.inventory, pod.fingerprint)
            whole = budget.remaining >= full and key not in seen
            outcome = allocation.on_pod(prepared, pod.inventory, pod.holders, cycle.engine,  # type: ignore[arg-type]
                                        budget, memo, pod.fingerprint)
            searched = searched or memo.generation != generation
            said = by_usage[u] = _said(pod, outcome)
            rejects = rejects or said[0] is not None
            if whole and not searched:  # else the memo forgot: keep nothing
                answers[u] = (key, outcome, said)
        memo.hits += recalled
        if not fresh or memo.generation != generation or memo.hits - hits != len(seen):
            self.answered = None
        else:
            any_order = alive is None and budget.remaining >= full
            self.answered = (frozenset(order) if any_order else order, owner, start, dict(by_usage), dict(seen),
                             budget.remaining, memo.hits - hits, rejects, whole_limit, summarise(seen))
        return rejects, whole_limit

    def _again(self, cycle: Any, alive: list[int] | None, owner: tuple[Any, ...]) -> tuple[bool, bool] | None:
        """`_answer`'s result when the latest cycle was answered from kept outcomes alone and this one
        would be answered the same, its charges made; None: answer afresh."""
        last, budget, by_usage = self.answered, cycle.budget, cycle.by_usage
        # The same again: for the same usages in the same order; or, when every pod was accepted and
        # the budget never fell below one search's limit (so no search had a smaller limit, whatever
        # the order), for the same set of usages. Then only the insertion order of `by_usage` and
        # `budget.seen` may differ, which nothing reads.
        if last is None or last[1] != owner or last[2] != budget.remaining or budget.seen or by_usage or not (
                last[0] == self.count.keys() if isinstance(last[0], frozenset) and alive is None
                else last[0] == self._order(alive)):
            return None
        _, _, _, known, charged, remaining, hits, rejects, whole_limit, summary = last
        # The kept dictionaries themselves, not copies: nothing adds to a cycle's answers or charges
        # after its column, and the next cycle begins with new ones (`DeviceCycle.begin`).
        cycle.by_usage, budget.seen = known, charged
        budget.remaining = remaining
        self.plugin.memo.hits += hits
        cycle.summary = summary
        return rejects, whole_limit

    def _index(self, table: PodTable) -> None:
        """Pod name → position, rebuilt when the table's positions moved."""
        if self.layout != table.layout:
            assert table.views is not None
            self.positions = {view.info.name: i for i, view in enumerate(table.views)}
            self.layout = table.layout

    def _catch_up(self, cycle: Any, table: PodTable) -> None:
        """Recompute the usage ids of the pods whose view was replaced or whose holders or currency changed."""
        views, targets = table.views, cycle.targets
        assert views is not None
        n = len(views)
        self._mark_dirty(targets, table)
        infos = self.infos
        rebuild = self.dirty is None
        if rebuild:
            self.said = None
            self.infos = infos = [None] * n
            self.ids = [NONE] * n
            self.volatile = set()
            self.devices = {}
            self.version += 1
        at_all = range(n) if rebuild else self.dirty
        ids, devices, volatile, kept, current = self.ids, self.devices, self.volatile, cycle.kept, targets.current
        first, count = self.first, self.count
        for i in at_all:
            info = infos[i] = views[i].info
            new = NONE
            if info.devices is not None:
                pod = device_state.pod_devices(targets, kept, info, cycle.run_uid, True)
                if pod is None:
                    new = INVALID
                else:
                    new = pod.usage_id
                    devices[new] = pod
            if current(info.name, None) == info.uid:
                volatile.discard(i)
            else:
                volatile.add(i)
            old = ids[i]
            if old != new:
                ids[i] = new
                self.version += 1
                if rebuild:
                    continue
                self.moved.append(i)
                if count[old] == 1:
                    del count[old], first[old]
                else:
                    count[old] -= 1
                    if first[old] == i:
                        first[old] = ids.index(old, i + 1)
                count[new] = count.get(new, 0) + 1
                if first.get(new, n) > i:
                    first[new] = i
        if rebuild:
            self.count = count = {}
            self.first = first = {}
            for i, u in enumerate(ids):
                count[u] = count.get(u, 0) + 1
                first.setdefault(u, i)
        self.dirty = set()
        if len(devices) > 2 * n + 64:  # usages no pod has any more
            present = set(ids)
            self.devices = {u: pod for u, pod in devices.items() if u in present}

    def _mark_dirty(self, targets: NamespaceTargets, table: PodTable) -> None:
        """Add to `dirty` the positions whose pod changed and those the device log names since the last
        cycle (None: all, when the table or the targets are not the ones the ids follow)."""
        views, infos = table.views, self.infos
        assert views is not None
        start, log = targets.device_log_start, targets.device_log
        if len(self.ids) != len(views) or targets is not self.targets or self.seen < start:
            self.dirty = None
        if self.dirty is not None:
            # A replaced view whose pod is the very same object (a Run came or went) keeps its id
            # unless the log names the pod: its inventory text, UID and name are the pod's.
            dirty = {i for i in self.dirty if views[i].info is not infos[i]}
            by_uid, by_name = table.position.get, self.positions.get
            for uid_key, key in log[self.seen - start:]:
                at = by_uid(key) if uid_key else by_name(key)
                if at is not None:
                    dirty.add(at)
            self.dirty = dirty | self.volatile
        self.targets, self.seen = targets, start + len(log)


def summarise(seen: dict[Any, allocation.Allocation | allocation.Rejection]) -> tuple[int, int, int, int]:
    """A cycle's searches as the metrics count them (SPEC §7.8): steps, allocated, exhausted, limit."""
    steps = allocated = exhausted = limit = 0
    for result in seen.values():
        steps += result.steps
        if isinstance(result, allocation.Allocation):
            allocated += 1
        elif result.reason == allocation.SEARCH_LIMIT:
            limit += 1
        else:
            exhausted += 1
    return steps, allocated, exhausted, limit


def _said(pod: device_state.PodDevices, outcome: allocation.Allocation | allocation.Rejection
          ) -> tuple[str | None, tuple[str, allocation.Allocation] | None]:
    """A usage's `DeviceCycle.by_usage` entry: its verdict and, when allocated, its `found` entry."""
    if isinstance(outcome, allocation.Rejection):
        return (outcome.reason, None)
    return (None, (pod.inventory.digest, outcome))
