"""The Runs an executor holds, one execution per Run UID: how a start is recorded and an end settled.

Both executors keep this the same way, whether the process is runtimed's own child
(`executor.Executor`) or the Runtime Server's (`server_client.RemoteExecutor`): a start
is recorded before anything is started, so a second start of the same Run is refused
and a stop arriving while the process starts finds it; an execution is settled (taken
out) exactly once, by whichever of its end, its stop or a failed start sees it first,
and only that one reports the Run's end. `has` and `active` answer from what is held.
`RunExecutor` is the part of the interface `Lifecycle` drives that both executors answer
alike over such a table; each says how it starts (`_start`), stops and ends a Run.

`lock` is reentrant and also the owner's: what an executor keeps beside an execution
(its process, why it is being stopped, ends to drop) changes under the same lock as
whether it is held, so the two are never seen apart.
"""

from __future__ import annotations

import abc
import threading
from typing import Callable, Generic, Iterable, Mapping, Sequence, TypeVar

from kruntimes.runtimed.outcomes import RunRef

E = TypeVar("E")


class Executions(Generic[E]):
    """The executions of one executor by Run UID; `run_of` says which Run an execution is of."""

    def __init__(self, run_of: Callable[[E], RunRef]) -> None:
        self.lock = threading.RLock()
        self._run_of = run_of
        self._by_uid: dict[str, E] = {}

    def has(self, uid: str) -> bool:
        """Whether an execution is held for the Run (restart recovery asks this)."""
        with self.lock:
            return uid in self._by_uid

    def get(self, uid: str) -> E | None:
        with self.lock:
            return self._by_uid.get(uid)

    def held(self) -> list[E]:
        with self.lock:
            return list(self._by_uid.values())

    def active(self) -> list[RunRef]:
        """The Runs held, by namespace and name."""
        with self.lock:
            return sorted((self._run_of(e) for e in self._by_uid.values()), key=lambda r: (r.namespace, r.name))

    def begin(self, run: RunRef, execution: E) -> None:
        """Record a start before anything is started; ValueError when the Run already executes here."""
        with self.lock:
            if run.uid in self._by_uid:
                raise ValueError(f"{run.label} is already executing here")
            self._by_uid[run.uid] = execution

    def adopt(self, run: RunRef, execution: E) -> None:
        """Hold an execution that started before this executor did (restart recovery)."""
        with self.lock:
            self._by_uid[run.uid] = execution

    def settle(self, uid: str, execution: E | None = None) -> E | None:
        """Take the execution out (only if it is still `execution`, when given); None if it was settled already."""
        with self.lock:
            held = self._by_uid.get(uid)
            if held is None or (execution is not None and held is not execution):
                return None
            del self._by_uid[uid]
            return held

    def settle_all_but(self, keep: Iterable[str]) -> list[E]:
        """Take out every execution whose UID is not in `keep`; the ones taken out."""
        keep = set(keep)
        with self.lock:
            gone = [e for uid, e in self._by_uid.items() if uid not in keep]
            for uid in [uid for uid in self._by_uid if uid not in keep]:
                del self._by_uid[uid]
            return gone


class RunExecutor(abc.ABC, Generic[E]):
    """An executor of this pod's Runs, built on the table of its executions."""

    def __init__(self, executions: Executions[E]) -> None:
        self._executions = executions
        self._lock = executions.lock

    def has(self, uid: str) -> bool:
        """Whether this runtimed holds an execution for the Run (restart recovery asks this)."""
        return self._executions.has(uid)

    def active(self) -> list[RunRef]:
        return self._executions.active()

    def start_task(self, run: RunRef, args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Run `args` to completion; its exit code ends the Run. `env`: extra variables (its devices)."""
        self._start(run, list(args), function=False, env=env)

    def start_function(self, run: RunRef, args: Sequence[str] | None = None,
                       env: Mapping[str, str] | None = None) -> None:
        """Keep the Run (and its process, if `args`) until `release`."""
        self._start(run, list(args) if args else None, function=True, env=env)

    @abc.abstractmethod
    def _start(self, run: RunRef, args: list[str] | None, *, function: bool,
               env: Mapping[str, str] | None = None) -> None:
        """Start the Run's execution, recording it first (`Executions.begin`)."""
