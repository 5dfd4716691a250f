"""Scheduler configuration: the one value besides the snapshot that decides a cycle.

It is frozen and canonically encodable so that the journal can record it once per
incarnation (with a hash on every cycle) and replay can run the planner with
exactly the configuration a past cycle ran with - or, for "what if", another one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kruntimes import canonical

#: Bumped whenever a change to planner code may change a decision; recorded on
#: every cycle so that replay can say "this history was made by another planner".
#: A configuration carries the version it was recorded with, and the planner keeps the
#: behaviour of each version it knows, so replaying an older journal still reproduces it:
#:   "1"  Pending messages count the Filter reasons only.
#:   "2"  they also name the resources short on the pods and say when no pod could ever
#:        fit the Run (issue 27); such a Run waits for pod or capacity events only.
PLANNER_VERSION = "2"
PLANNER_VERSIONS = ("1", "2")

DEFAULT_FILTERS: tuple[str, ...] = ("RuntimePodAvailability", "RunAffinity")
DEFAULT_SCORES: tuple[tuple[str, int], ...] = (("PreferredRunAffinity", 1), ("LeastLoaded", 1))


class ConfigError(ValueError):
    """A scheduler setting that cannot work; the message says which and how to fix it."""


@dataclass(frozen=True)
class SchedulerConfig:
    filters: tuple[str, ...] = DEFAULT_FILTERS
    scores: tuple[tuple[str, int], ...] = DEFAULT_SCORES
    heartbeat_staleness_seconds: int = 30
    default_runs_capacity: int = 1
    workers: int = 4
    extra: tuple[tuple[str, str], ...] = field(default=())  # adapter settings recorded for the audit trail
    planner_version: str = PLANNER_VERSION  # a replayed journal's own, so its decisions reproduce

    def __post_init__(self) -> None:
        for name, weight in self.scores:
            if not isinstance(weight, int) or isinstance(weight, bool) or weight < 1:
                raise ConfigError(f"score plugin {name}: weight must be a positive integer (got {weight!r})")
        if len({n for n, _ in self.scores}) != len(self.scores) or len(set(self.filters)) != len(self.filters):
            raise ConfigError("a plugin is listed twice; list each plugin once")
        if self.heartbeat_staleness_seconds < 0:
            raise ConfigError("heartbeat staleness must be >= 0 seconds")
        if self.default_runs_capacity < 0:
            raise ConfigError("default runs capacity must be >= 0")
        if self.workers < 1:
            raise ConfigError("workers must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        return {
            "planner_version": self.planner_version,
            "filters": list(self.filters),
            "scores": [[n, w] for n, w in self.scores],
            "heartbeat_staleness_seconds": self.heartbeat_staleness_seconds,
            "default_runs_capacity": self.default_runs_capacity,
            "workers": self.workers,
            "extra": [[k, v] for k, v in self.extra],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SchedulerConfig:
        return cls(
            filters=tuple(data["filters"]),
            scores=tuple((str(n), int(w)) for n, w in data["scores"]),
            heartbeat_staleness_seconds=int(data["heartbeat_staleness_seconds"]),
            default_runs_capacity=int(data["default_runs_capacity"]),
            workers=int(data["workers"]),
            extra=tuple((str(k), str(v)) for k, v in data.get("extra", ())),
            planner_version=str(data.get("planner_version", PLANNER_VERSION)),
        )

    def digest(self) -> str:
        """SHA-256 of the canonical encoding: equal configurations, equal digests."""
        return canonical.digest(self.to_dict())

    def with_weights(self, weights: dict[str, int]) -> SchedulerConfig:
        unknown = sorted(set(weights) - {n for n, _ in self.scores})
        if unknown:
            raise ConfigError(f"no score plugin named {', '.join(unknown)}; known: "
                              + ", ".join(n for n, _ in self.scores))
        return replace(self, scores=tuple((n, weights.get(n, w)) for n, w in self.scores))

    def without_plugins(self, names: set[str]) -> SchedulerConfig:
        known = set(self.filters) | {n for n, _ in self.scores}
        unknown = sorted(names - known)
        if unknown:
            raise ConfigError(f"no plugin named {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return replace(self, filters=tuple(f for f in self.filters if f not in names),
                       scores=tuple((n, w) for n, w in self.scores if n not in names))
