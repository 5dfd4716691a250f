"""The planner: runs the configured plugins through one pure scheduling cycle.

The runtime half of the framework (the interface half, what plugins implement and
are handed, is `interface`). `Planner.plan` is a pure function of the snapshot (and
the configuration it carries): no clock, no randomness, no I/O, no global state.
Plugins' results come back as values and the planner assembles them into a
`CycleOutcome`; a plugin that raises or breaks its contract aborts the cycle with
an error outcome, never the worker.

When every configured plugin offers a column (`columns.ColumnPlugin`, as the
built-in ones do), a cycle evaluates through pod tables kept between cycles: each
pod's per-shape verdict and score key is stored, patched only for the pods whose
views changed, and a cycle's per-pod work is list operations done in C (copies,
`map` over bound methods, `compress`, `set`, `max`). Every pod is still evaluated
and the outcome is the same value, bit for bit, as the pod-by-pod path, which plugins
without columns (and `Planner(columns=False)`) take. In the column path each Filter
column judges every pod and a pod's rejection is the first plugin's, in order:
the same as handing each plugin only the pods earlier plugins accepted, because a
verdict depends only on its pod and the cycle. A *narrowing* column (`narrows`, as
DeviceAllocation's) is the exception: its verdicts also depend on which pods it
judges (a claim's step budget is charged for those pods only, in name order), so it
is handed the positions every earlier Filter accepted and judges only those.
"""

from __future__ import annotations

import operator
from itertools import compress
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from kruntimes.scheduler import columns as cols
from kruntimes.scheduler import outcome as out
from kruntimes.scheduler import validation
from kruntimes.scheduler.config import PLANNER_VERSIONS, ConfigError, SchedulerConfig
from kruntimes.scheduler.interface import (WAKE_EVENTS, CycleState, EnqueueExtensions, FilterExtensions,
                                           FilterPlugin, PluginError, PreFilterPlugin, ScoreExtensions,
                                           ScorePlugin)
from kruntimes.scheduler.projection import RunInfo
from kruntimes.scheduler.registry import REGISTRY
from kruntimes.scheduler.snapshot import Snapshot
from kruntimes.scheduler.views import PodView


class Planner:
    """The plugins named by a configuration, in order, and the cycle that runs them."""

    def __init__(self, config: SchedulerConfig, registry: Mapping[str, Any] | None = None, *,
                 columns: bool = True) -> None:
        registry = REGISTRY if registry is None else registry
        if config.planner_version not in PLANNER_VERSIONS:
            # Read from a journal a newer kruntimes wrote: a planner-version difference, not damage.
            raise ConfigError(f"planner version {config.planner_version!r} is not one this kruntimes knows "
                              f"({', '.join(PLANNER_VERSIONS)}): replay it with the kruntimes that recorded it")
        self.config = config
        self.config_digest = config.digest()
        self._explains = config.planner_version != "1"  # version 1's Pending messages only count reasons

        def make(name: str) -> Any:
            if name not in registry:
                raise ConfigError(f"unknown plugin {name!r}; known plugins: {', '.join(sorted(registry))}")
            return registry[name]()

        self.filters: tuple[FilterPlugin, ...] = tuple(make(n) for n in config.filters)
        self.scores: tuple[tuple[ScorePlugin, int], ...] = tuple((make(n), w) for n, w in config.scores)
        for f in self.filters:
            if not isinstance(f, FilterPlugin):
                raise ConfigError(f"plugin {f.name} is not a Filter plugin")
        for s, _ in self.scores:
            if not isinstance(s, ScorePlugin):
                raise ConfigError(f"plugin {s.name} is not a Score plugin")
        seen: list[Any] = []
        for p in [*self.filters, *(s for s, _ in self.scores)]:
            if isinstance(p, PreFilterPlugin) and p not in seen:
                seen.append(p)
        self.pre_filters: tuple[PreFilterPlugin, ...] = tuple(seen)
        # One (plugin, reason) tuple per declared reason, shared by every rejection that
        # gives it: no allocation per rejected pod, and a journal writer pickles it once.
        self._rejection = {f.name: {r: (f.name, r) for r in f.reasons} for f in self.filters}
        # Protocol isinstance checks are slow; decide once which plugins normalise.
        self._score_steps = tuple((s, w, s.normalize if isinstance(s, ScoreExtensions) else None)
                                  for s, w in self.scores)
        self._plugins = (*self.filters, *(s for s, _ in self.scores))
        self._explainers = tuple(f for f in self.filters if isinstance(f, FilterExtensions))
        self.columnar = columns and all(_has_own_column(p) for p in self._plugins)
        self._tables = cols.Tables()
        # (plugin, reason) -> itself: `keep.get(earlier, later)` is the first rejection, in C.
        self._keep = {r: r for by_reason in self._rejection.values() for r in by_reason.values()}
        self._wakes = _wake_events(self.filters)
        self.device_filter: Any = next((f for f in self.filters if f.name == "DeviceAllocation"), None)

    def wake_events(self, rejections: Iterable[tuple[str, str] | None]) -> frozenset[str]:
        """The events beyond its Runtime's pods and released capacity that can make a Run with these
        rejections schedulable: what its Filter plugins declared (`interface.EnqueueExtensions`)."""
        wakes = self._wakes
        return frozenset().union(*[wakes[r] for r in set(rejections) if r in wakes]) if wakes else frozenset()

    def plan(self, snapshot: Snapshot) -> out.CycleOutcome:
        run = snapshot.run
        base = dict(namespace=run.namespace, run_name=run.name, run_uid=run.uid,
                    snapshot_lsn=snapshot.lsn, now=snapshot.now, config_digest=self.config_digest,
                    planner_version=self.config.planner_version)
        # 1. PreFilter: validate once, then let plugins compile selectors and request state.
        problem = validation.validate_run(run)
        if problem is not None:
            return out.CycleOutcome(status=out.INVALID, message=problem, **base)
        try:
            data = {p.name: p.pre_filter(snapshot, run) for p in self.pre_filters}
        except Exception as exc:  # noqa: BLE001 - a plugin failure aborts the cycle, never the worker
            return out.CycleOutcome(status=out.ERROR, message=_error("PreFilter", exc), **base)
        state = CycleState(snapshot=snapshot, run=run, requests=run.requests, data=MappingProxyType(data))
        pods = snapshot.pods
        names = snapshot.names if snapshot.names is not None else tuple([p.info.name for p in pods])
        try:
            if self.columnar and (table := self._table(snapshot)) is not None:
                return self._plan_columns(state, table, names, base)
            # 2. Filter: each plugin sees only the pods every earlier plugin accepted.
            rejections, alive, feasible = self._filter_pods(state, pods)
            feasible_names = names if len(alive) == len(pods) else tuple([names[i] for i in alive])
            common = dict(pods=names, rejections=tuple(rejections), feasible=feasible_names)
            if not feasible:
                return self._unschedulable(state, tuple(rejections), common, base)
            # 3. Score: raw, framework-owned normalisation to 0..100, weight, sum.
            results, totals = self._score_pods(state, feasible)
        except _PluginFailed as failed:
            return out.CycleOutcome(status=out.ERROR, message=_error(*failed.args), **base)
        # 4. Choose: highest total; `max` keeps the first of equal totals and the
        #    feasible pods are in name order, so ties go to the smallest name.
        best = totals.index(max(totals))
        return out.CycleOutcome(status=out.SCHEDULED, **common, scores=tuple(results), totals=tuple(totals),
                                chosen=feasible[best].info.name, chosen_uid=feasible[best].info.uid, **base)

    def _filter_pods(self, state: CycleState, pods: Sequence[PodView]
                     ) -> tuple[list[tuple[str, str] | None], list[int], list[PodView]]:
        """`plan`'s step 2 pod by pod: each pod's rejection, the accepted positions and their pods."""
        rejections: list[tuple[str, str] | None] = [None] * len(pods)
        alive = list(range(len(pods)))
        candidates: Sequence[PodView] = pods
        for plugin in self.filters:
            if not alive:
                break
            try:
                verdicts = plugin.filter(state, candidates)
                _check_verdicts(plugin, verdicts, len(alive))
            except Exception as exc:  # noqa: BLE001
                raise _PluginFailed(plugin.name, exc) from exc
            if verdicts.count(None) == len(verdicts):
                continue  # the common case: nothing rejected, nothing to narrow
            survivors = []
            rejection = self._rejection[plugin.name]
            for i, verdict in zip(alive, verdicts):
                if verdict is None:
                    survivors.append(i)
                else:
                    rejections[i] = rejection[verdict]
            alive = survivors
            candidates = [pods[i] for i in alive]
        return rejections, alive, list(candidates)

    def _score_pods(self, state: CycleState, feasible: list[PodView]) -> tuple[list[out.PluginScores], list[Any]]:
        """`plan`'s step 3 pod by pod: each plugin's scores and the weighted totals."""
        results = []
        totals = [0] * len(feasible)
        for plugin, weight, normalize in self._score_steps:
            try:
                raw = plugin.score(state, feasible)
                norm = normalize(state, raw) if normalize is not None else raw
                _check_scores(plugin, raw, norm, len(feasible))
            except Exception as exc:  # noqa: BLE001
                raise _PluginFailed(plugin.name, exc) from exc
            results.append(out.PluginScores(plugin=plugin.name, weight=weight, raw=tuple(raw),
                                            normalized=tuple(norm)))  # type: ignore[arg-type]
            if weight != 1:
                norm = [weight * s for s in norm]  # type: ignore[operator]
            totals = list(map(operator.add, totals, norm))
        return results, totals

    def device_results(self, run: RunInfo, pod_name: str) -> tuple[str, Any] | None:
        """(inventory digest, allocation) the latest cycle of `run` found on `pod_name`, for Reserve and
        Bind (SPEC §7.6); None for a Run without a claim. Read under the lock the cycle planned in."""
        last = getattr(self.device_filter, "last", None)
        if last is None or last.run_uid != run.uid:
            return None
        return last.found_on(pod_name)  # type: ignore[no-any-return]

    def _table(self, snapshot: Snapshot) -> cols.PodTable | None:
        """The pod table of the Run's Runtime and request shape, up to date; None: plan pod by pod."""
        run = snapshot.run
        key = (run.namespace, run.runtime, run.requests)
        table = self._tables.get(key)
        if table is None:
            table = cols.PodTable({p.name: p.column(run.requests) for p in self._plugins})
            self._tables.put(key, table)
        try:
            table.update(snapshot.pods, snapshot.changes)
        except Exception:  # noqa: BLE001 - half patched: rebuilt next time; the pod-by-pod path decides
            self._tables.drop(key)
            return None
        return table if table.unique else None

    def _plan_columns(self, state: CycleState, table: cols.PodTable, names: tuple[str, ...],
                      base: dict[str, Any]) -> out.CycleOutcome:
        """`plan`'s steps 2-4 over the pod table: the same outcome, per-pod work in C."""
        # 2. Filter: every column judges every pod; a pod keeps its first rejection.
        rejected, alive, feasible_names = self._filter_columns(state, table, names)
        common = dict(pods=names, rejections=rejected, feasible=feasible_names)
        if not feasible_names:
            return self._unschedulable(state, rejected, common, base)
        # 3. Score: raw, normalised and the distinct normalised values from the columns.
        results, totals, top = self._score_columns(state, table, alive, len(feasible_names))
        # 4. Choose: the first highest total, as in `plan`.
        best = totals.index(top if top >= 0 else max(totals))
        at = best if alive is None else alive[best]
        return out.CycleOutcome(status=out.SCHEDULED, **common, scores=tuple(results), totals=tuple(totals),
                                chosen=names[at], chosen_uid=table.uids[at], **base)

    def _filter_columns(self, state: CycleState, table: cols.PodTable, names: tuple[str, ...]
                        ) -> tuple[tuple[tuple[str, str] | None, ...], list[int] | None, tuple[str, ...]]:
        """Step 2 on the table: (every pod's rejection, the feasible positions (None: all), their names).
        The result is kept on the table while what it follows from stays the same."""
        columns = table.columns
        signatures: list[Any] = [table.layout]
        for plugin in self.filters:
            try:
                signatures.append(columns[plugin.name].signature(state, table))  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001
                raise _PluginFailed(plugin.name, exc) from exc
        if table.filtered is not None and table.filtered[0] == signatures:
            _, rejected, alive, feasible_names = table.filtered
            return rejected, alive, feasible_names
        rejections = self._column_rejections(state, table, signatures, len(names))
        if rejections is None:
            alive, rejected, feasible_names = None, table.passed(), names
        else:
            # The same pods rejected for the same reasons as the kept result (the very list, or an
            # equal one): its very lists, so that score columns keep what they derived from the
            # feasible positions (`alive is` them).
            last = table.filtered
            same = last is not None and last[0][0] == table.layout and (
                table.rejections is rejections or last[1] == tuple(rejections))
            if same:
                _, rejected, alive, feasible_names = last
            else:
                rejected = tuple(rejections)
                alive = list(compress(range(len(names)), map(operator.not_, rejections)))
                feasible_names = tuple(map(names.__getitem__, alive))
        table.filtered = (signatures, rejected, alive, feasible_names)
        table.rejections = rejections
        return rejected, alive, feasible_names

    def _column_rejections(self, state: CycleState, table: cols.PodTable, signatures: list[Any],
                           n: int) -> list[tuple[str, str] | None] | None:
        """Each pod's first rejection from the Filter columns, in order (None: nothing rejected)."""
        columns = table.columns
        rejections: list[tuple[str, str] | None] | None = None
        first = 0
        # What the Filters before a narrowing column decided is kept apart: a narrowing
        # column's own signature never repeats (DeviceAllocation's, for a claim).
        prefix = table.prefiltered
        kept = prefix is not None and signatures[:len(prefix[0])] == prefix[0]
        if kept:
            rejections, first = prefix[1], len(prefix[0]) - 1
        for k in range(first, len(self.filters)):
            plugin, signature, column = self.filters[k], signatures[k + 1], columns[self.filters[k].name]
            narrowing = getattr(column, "narrows", False)
            try:
                if narrowing:
                    if signature is None:
                        continue  # passes every pod this cycle
                    if not kept:
                        table.prefiltered = (signatures[:k + 1], rejections)
                        kept = True
                    accepted = None if rejections is None else list(compress(range(n), map(operator.not_, rejections)))
                    verdicts = column.verdicts(state, table, signature, accepted)  # type: ignore[attr-defined]
                    narrowed = table.narrowed
                    if narrowed is not None and narrowed[0] is rejections and narrowed[1] is verdicts \
                            and narrowed[2] == k:
                        rejections = narrowed[3]  # the very verdicts on the very same rejections
                        continue
                    before = rejections
                else:
                    verdicts = column.verdicts(state, table, signature)  # type: ignore[attr-defined]
                if verdicts is None or verdicts.count(None) == n:
                    continue
                _check_verdicts(plugin, verdicts, n)
            except Exception as exc:  # noqa: BLE001
                raise _PluginFailed(plugin.name, exc) from exc
            these = map(self._rejection[plugin.name].get, verdicts)  # None stays None
            rejections = list(these) if rejections is None else list(map(self._keep.get, rejections, these))
            if narrowing:
                table.narrowed = (before, verdicts, k, rejections)
        return rejections

    def _score_columns(self, state: CycleState, table: cols.PodTable, alive: list[int] | None,
                       m: int) -> tuple[list[out.PluginScores], Sequence[int], int]:
        """Step 3 on the table: each plugin's scores, the totals and the highest total when known (else -1)."""
        columns = table.columns
        results = []
        totals: Sequence[int] | None = None
        top = 0
        for plugin, weight, _ in self._score_steps:
            try:
                raw, norm, values = columns[plugin.name].scores(state, table, alive)  # type: ignore[attr-defined]
                _check_column_scores(plugin, raw, norm, values, m)
            except Exception as exc:  # noqa: BLE001
                raise _PluginFailed(plugin.name, exc) from exc
            normalized = tuple(norm)  # the very tuple when the column hands one
            results.append(out.PluginScores(plugin=plugin.name, weight=weight, raw=tuple(raw), normalized=normalized))
            if values == {0}:
                continue  # adding zeros changes no total
            weighted = normalized if weight == 1 else tuple(map(operator.mul, normalized, [weight] * m))
            # With one contributing plugin the totals are its weighted scores, the highest known.
            top = weight * max(values) if totals is None else -1
            totals = weighted if totals is None else tuple(map(operator.add, totals, weighted))
        return results, (0,) * m if totals is None else totals, top

    def _unschedulable(self, state: CycleState, rejections: tuple[tuple[str, str] | None, ...],
                       common: dict[str, Any], base: dict[str, Any]) -> out.CycleOutcome:
        """The Pending outcome: the reasons counted and, from version 2, explained (SPEC §3.2)."""
        pods = state.snapshot.pods
        if not self._explains:
            return out.CycleOutcome(status=out.UNSCHEDULABLE, **common,
                                    message=out.pending_message(len(pods), rejections), **base)
        named: list[tuple[str, tuple[str, ...]]] = []
        notes: list[str] = []
        waits_for_pods = False
        for plugin in self._explainers:
            verdicts = [r[1] if r is not None and r[0] == plugin.name else None for r in rejections]
            if verdicts.count(None) == len(verdicts):
                continue
            try:
                explained = plugin.explain(state, pods, verdicts)
            except Exception as exc:  # noqa: BLE001
                return out.CycleOutcome(status=out.ERROR, message=_error(plugin.name, exc), **base)
            named += explained.named
            notes += [explained.note] if explained.note else []
            waits_for_pods = waits_for_pods or explained.waits_for_pods
        return out.CycleOutcome(status=out.UNSCHEDULABLE, **common, waits_for_pods=waits_for_pods,
                                message=out.pending_message(len(pods), rejections, named, notes), **base)


class _PluginFailed(Exception):
    """A plugin raised or broke its contract mid-cycle, as (stage, error): `plan` gives the error outcome."""


def _wake_events(filters: Sequence[FilterPlugin]) -> dict[tuple[str, str], frozenset[str]]:
    """(plugin, reason) -> the events its plugin declared for it; refuses a hint for a reason the
    plugin never gives, or an event nothing sends (it would wait for nothing)."""
    wakes: dict[tuple[str, str], frozenset[str]] = {}
    for f in filters:
        if not isinstance(f, EnqueueExtensions):
            continue
        for reason, events in f.wake_events().items():
            if reason not in f.reasons or not set(events) <= set(WAKE_EVENTS):
                raise ConfigError(f"plugin {f.name} declares wake-up events {sorted(events)} for {reason!r}: "
                                  f"a reason must be one of its own, an event one of {', '.join(WAKE_EVENTS)}")
            wakes[(f.name, reason)] = frozenset(events)
    return wakes


def _has_own_column(plugin: Any) -> bool:
    """A column answers for the batch methods of the class that defines it: a subclass that
    overrides `filter`, `score`, `normalize` or `pre_filter` but not `column` is planned pod by pod."""
    if not isinstance(plugin, cols.ColumnPlugin):
        return False
    mro = type(plugin).__mro__

    def owner(attr: str) -> type | None:
        return next((k for k in mro if attr in vars(k)), None)

    return all(owner(a) in (None, owner("column")) for a in ("filter", "score", "normalize", "pre_filter"))


def _check_column_scores(plugin: ScorePlugin, raw: Sequence[Any], norm: Sequence[Any], values: set[Any],
                         n: int) -> None:
    """`_check_scores`, over the distinct normalised values the column reports."""
    if len(raw) != n or len(norm) != n:
        raise PluginError(f"returned {len(raw)} raw / {len(norm)} normalised scores for {n} pods")
    if n and (set(map(type, values)) != {int} or min(values) < 0 or max(values) > 100):
        raise PluginError("normalised scores must be integers in 0..100")


def _check_verdicts(plugin: FilterPlugin, verdicts: list[str | None], n: int) -> None:
    if len(verdicts) != n:
        raise PluginError(f"returned {len(verdicts)} verdicts for {n} pods")
    stray = set(verdicts) - {None, *plugin.reasons}
    if stray:
        raise PluginError(f"returned a reason outside its bounded set: {sorted(map(repr, stray))}")


def _check_scores(plugin: ScorePlugin, raw: Sequence[Any], norm: Sequence[Any], n: int) -> None:
    if len(raw) != n or len(norm) != n:
        raise PluginError(f"returned {len(raw)} raw / {len(norm)} normalised scores for {n} pods")
    if n and (set(map(type, norm)) != {int} or min(norm) < 0 or max(norm) > 100):
        raise PluginError("normalised scores must be integers in 0..100")


def _error(stage: str, exc: Exception) -> str:
    # Bounded: the plugin/stage name and the exception type, never user data.
    return f"plugin {stage} failed: {type(exc).__name__}"
