"""How many threads PyTorch uses: a count that fits the machine, chosen once, when ``helpers`` is imported.

PyTorch starts one thread per core it sees. On a shared machine (a JupyterHub node, a pod whose
CPU quota is below the cores it can see, a laptop compiling something) those threads wait for
each other at every operation, and a training step of lesson 07 was measured 17–25× slower with
2 threads than with 1 on a 2-core machine under load. So the course picks the count itself:

1. ``TRANSFORMER_COURSE_THREADS`` if it is set (a positive integer): your choice wins;
2. otherwise the CPUs this process may use: its CPU affinity, capped by the cgroup's CPU quota
   (``cpu.max`` in cgroup v2, ``cpu.cfs_quota_us`` in v1), rounded down, at least 1;
3. less the load already on them, measured: how many CPUs other processes kept busy during
   0.1 s (``/proc/stat``, while this process sleeps), or the 1-minute load average where that
   cannot be read; ``usable - load`` CPUs are free, and the count is that, rounded to the nearest
   whole, between 1 and the usable CPUs.

``choose_threads`` is pure (it takes the readings); ``apply_threads`` reads the machine, sets
``torch.set_num_threads`` and returns a one-line description that a notebook prints.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["THREADS_ENV_VAR", "ThreadChoice", "apply_threads", "busy_cpus", "cgroup_cpu_limit", "choose_threads",
           "usable_cpus"]

THREADS_ENV_VAR = "TRANSFORMER_COURSE_THREADS"


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count and why: the readings it was chosen from."""

    threads: int
    usable: int  # CPUs this process may use (affinity and quota)
    load: float | None  # CPUs kept busy by others (measured, or the load average); None if unknown
    source: str  # "environment" or "machine"

    def line(self) -> str:
        """One line for a notebook's first cell."""
        if self.source == "environment":
            return f"torch threads: {self.threads} (from {THREADS_ENV_VAR})"
        load = f", {self.load:.1f} busy with other work" if self.load is not None else ""
        return (f"torch threads: {self.threads} ({self.usable} CPUs usable{load}; "
                f"set {THREADS_ENV_VAR} to choose)")


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (2.5 for 250 ms per 100 ms), or None for none."""
    try:  # cgroup v2: "max 100000" or "250000 100000"
        quota, period = (root / "cpu.max").read_text(encoding="ascii").split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text(encoding="ascii"))
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text(encoding="ascii"))
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def usable_cpus(affinity: int, quota: float | None) -> int:
    """The CPUs a process may keep busy: its affinity, capped by the quota rounded down, at least 1."""
    usable = affinity if quota is None else min(affinity, math.floor(quota))
    return max(1, usable)


def choose_threads(affinity: int, quota: float | None, load: float | None,
                   environ: Mapping[str, str] | None = None) -> ThreadChoice:
    """The thread count for these readings (see the module's docstring for the rule)."""
    usable = usable_cpus(affinity, quota)
    value = (environ if environ is not None else os.environ).get(THREADS_ENV_VAR, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{THREADS_ENV_VAR}={value!r}: give a positive whole number of threads")
        return ThreadChoice(int(value), usable, load, "environment")
    free = usable if load is None else usable - load
    threads = min(usable, max(1, math.floor(free + 0.5)))
    return ThreadChoice(threads, usable, load, "machine")


def _cpu_times(stat: Path) -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs together, from the first line of ``/proc/stat``."""
    fields = [int(v) for v in stat.read_text(encoding="ascii").splitlines()[0].split()[1:]]
    return fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields[:8])


def busy_cpus(window_s: float = 0.1, stat: Path = Path("/proc/stat")) -> float | None:
    """How many CPUs were busy during ``window_s`` while this process slept, or None where unknown."""
    try:
        idle0, total0 = _cpu_times(stat)
        time.sleep(window_s)
        idle1, total1 = _cpu_times(stat)
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (1 - (idle1 - idle0) / (total1 - total0)) * (os.cpu_count() or 1)


def _readings() -> tuple[int, float | None, float | None]:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load = busy_cpus()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):
            load = None
    return affinity, cgroup_cpu_limit(), load


def apply_threads(environ: Mapping[str, str] | None = None) -> ThreadChoice:
    """Read the machine, set PyTorch's thread count, and return the choice."""
    import torch

    choice = choose_threads(*_readings(), environ=environ)
    torch.set_num_threads(choice.threads)
    return choice
