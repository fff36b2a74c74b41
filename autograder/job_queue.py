"""The order in which the local threads take their jobs: as few fork servers started as will do.

Starting a fork server costs seconds of CPU (it imports torch and every check), more than many a
notebook takes to grade, and each lesson needs servers of its own (its own references hidden).
So a thread that is free takes, in this order:

1. a job of a lesson that has a server idle now (or a job that needs none: nothing handed in);
2. a job of a lesson that has no server yet (one must start anyway);
3. a job of a lesson whose servers are all busy, starting another, only when at least
   ``SPARE_SERVER_JOBS`` of its notebooks are still waiting: the parallel run then saves more than
   the start costs;
4. otherwise it waits for a running job to end, and chooses again.

A class of many lessons thus gets about one server per lesson, and a big lesson one per thread.
Within each rule the jobs keep the order they were given in. Servers left idle by an earlier run
of the process (``servers``: the limits' measurement, an earlier class) count as the lesson's own.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

#: waiting notebooks of one lesson that justify a second server while the first is busy
SPARE_SERVER_JOBS = 4

J = TypeVar("J")


class JobQueue(Generic[J]):
    """Jobs handed to threads one at a time; ``key(job)`` is the job's server group (None: it needs no
    server). Thread-safe; ``take`` blocks while waiting is the better choice."""

    def __init__(self, jobs: Sequence[J], key: Callable[[J], Hashable | None], spare: int = SPARE_SERVER_JOBS,
                 servers: Mapping[Hashable, int] | None = None):
        self._waiting = list(jobs)
        self._key = key
        self._spare = spare
        self._running: Counter = Counter()  # jobs of each group in flight
        # servers each group has: those idle before the run (``servers``), or the most jobs it ran at once
        self._servers: Counter = Counter(servers or {})
        self._stopped = False
        self._cond = threading.Condition()

    def _choose(self) -> int | None:
        queued = Counter(self._key(job) for job in self._waiting)
        for rule in (
            lambda k: k is None or self._running[k] < self._servers[k],  # a server idle now, or none needed
            lambda k: self._servers[k] == 0,  # the lesson's first server
            lambda k: queued[k] >= self._spare,  # another server, worth its start
        ):
            for index, job in enumerate(self._waiting):
                if rule(self._key(job)):
                    return index
        return None

    def take(self) -> J | None:
        """The next job for this thread, or None when there is none left (or the queue was stopped)."""
        with self._cond:
            while True:
                if self._stopped or not self._waiting:
                    return None
                index = self._choose()
                if index is not None:
                    job = self._waiting.pop(index)
                    key = self._key(job)
                    if key is not None:
                        self._running[key] += 1
                        self._servers[key] = max(self._servers[key], self._running[key])
                    return job
                self._cond.wait()

    def done(self, job: J) -> None:
        """``job`` has ended (whatever its result): its server is idle again."""
        with self._cond:
            key = self._key(job)
            if key is not None:
                self._running[key] -= 1
            self._cond.notify_all()

    def stop(self) -> None:
        """No job is handed out any more; threads waiting in ``take`` get None."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def servers(self) -> dict[Hashable, int]:
        """How many servers each group has needed so far."""
        with self._cond:
            return dict(self._servers)
