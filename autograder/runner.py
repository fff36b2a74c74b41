"""Run a student's notebook in a throw-away process and bring back data, never objects.

The parent (the grader) never imports or runs student code. For each notebook it starts a child
process, forked from a server that has already imported torch (so a job costs milliseconds, not
the seconds of ``import torch``). The child:

* starts a new process group, drops every environment variable but a few harmless ones, works in
  an empty temporary directory, and runs under resource limits set from outside its code:
  CPU seconds, address space, file size (which caps its output), plus a per-cell alarm;
* executes the program it was given (the student's cells, with the course's test cells in place
  of the student's copies), continuing after errors so later exercises can still score;
* runs every test cell with checks in *recording* mode: a check probes the student's object and
  stores plain data (numbers and lists), which the child appends as one JSON line per step to
  ``results.jsonl``.

The parent kills the whole process group when the wall-clock limit passes, then reads the JSON
lines with a size limit and decodes them field by field (``helpers.checks.core.decode``). The
verdict comes from the judges, run in the parent. What this stops and what it does not is
written down in README ("Grading and its threat model").

The fork servers themselves (starting, pooling, stopping them, the job's round trip) are in
``server_pool``; this module is the job: its steps, limits and reruns, and its results read back.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from autograder.protocol import COURSE, MAX_RESULTS_BYTES, OUTPUT, RESULTS, Limits, Step, StepLine
from autograder.sandbox import Isolation
from autograder.server_pool import ServerLost, acquire, release

MAX_STUCK = 3  # steps that swallow their alarm, each removed and the notebook run again
MIN_RERUN_S = 5.0  # a rerun after a stuck step needs at least this much of the notebook's wall-clock limit


@dataclass
class JobResult:
    lines: list[StepLine] = field(default_factory=list)  # the lines read back, in order
    exitcode: int | None = None  # None: killed by the parent; < 0: killed by that signal
    timed_out: bool = False
    wall_s: float = 0.0
    stuck: list[str] = field(default_factory=list)  # steps killed for ignoring their alarm, then left out
    output_tail: str = ""
    lost: str = ""  # the job reached past its sandbox and broke the grader's channel: every result void

    def count(self, step_id: str) -> int:
        return sum(1 for line in self.lines if line.step == step_id)

    def step(self, step_id: str) -> StepLine | None:
        return next((line for line in self.lines if line.step == step_id), None)


def default_isolation() -> Isolation:
    return Isolation("none", ())


def run_steps(
    steps: list[Step],
    limits: Limits | None = None,
    isolation: Isolation | None = None,
    replacements: Mapping[str, str] | None = None,
) -> JobResult:
    """Run ``steps`` in a fresh child process under ``limits``; never raises for student faults.

    A step that ignores its alarm is killed a few seconds later (not at the notebook's wall-clock
    limit); the notebook then runs again without it, so its other exercises still count, and the
    result reports that step as a timeout (at most ``MAX_STUCK`` such steps). A stuck code step
    whose id is in ``replacements`` runs again as that source instead (the course's own answer:
    later exercises that use what it defines can still run); it is reported as a timeout all the
    same. The notebook's wall-clock limit holds for all its runs together: a rerun gets only what is
    left of it, and none when less than ``MIN_RERUN_S`` is."""
    limits = limits or Limits()
    replacements = replacements or {}
    stuck: list[str] = []
    swallowed: set[str] = set()
    spent = 0.0
    left = list(steps)
    while True:
        # the notebook's wall-clock limit holds for all its runs together: a rerun gets what is left
        budget = limits if not stuck else replace(limits, wall_s=max(MIN_RERUN_S, limits.wall_s - spent))
        result, index, went_on = _run_once(left, budget, isolation or default_isolation())
        spent += result.wall_s
        if index is None or not isinstance(index, int) or not 0 <= index < len(left) or len(stuck) >= MAX_STUCK:
            break
        if limits.wall_s - spent < MIN_RERUN_S:  # no time left for a rerun: what did not run timed out
            stuck.append(left[index].id)
            result.timed_out = True
            break
        step = left[index]
        if step.id in stuck:  # the replacement itself got stuck: leave it out this time
            left = left[:index] + left[index + 1:]
            continue
        stuck.append(step.id)
        if went_on:
            swallowed.add(step.id)
        if step.kind == "code" and step.id in replacements:
            left = left[:index] + [Step(COURSE, step.id, replacements[step.id])] + left[index + 1:]
        else:
            left = left[:index] + left[index + 1:]
    result.wall_s = spent
    result.stuck = stuck
    if any(step.kind == COURSE for step in left):  # what the notebook printed could show the course's answer
        result.output_tail = ("(not shown: a stuck answer was replaced by the course's own to grade the rest, and "
                              "what the notebook printed after it could show that answer)")
    # what the parent itself saw: the step ran past its alarm and was killed
    result.lines = [StepLine(sid, "timeout", limit_s=limits.cell_limit(sid), stuck=True, swallowed=sid in swallowed)
                    for sid in stuck] + result.lines
    return result


def _run_once(steps: list[Step], limits: Limits, isolation: Isolation) -> tuple[JobResult, int | None, bool]:
    server = acquire(isolation)
    try:
        with tempfile.TemporaryDirectory(prefix="job-", dir=server.job_base) as workdir:
            os.chmod(workdir, 0o700)
            payload = [(s.kind, s.id, s.source) for s in steps]
            start = time.monotonic()
            try:
                exitcode, timed_out, stuck, swallowed = server.run(payload, workdir, limits)
            except ServerLost as exc:  # the job killed its server or wrote into its channel
                server.close(force=True)
                lost = JobResult(lost=f"stopped or spoke for the grader's own process ({exc}); its results are void")
                lost.wall_s = time.monotonic() - start
                return lost, None, False
            result = JobResult(exitcode=exitcode, timed_out=timed_out and stuck is None)
            result.wall_s = time.monotonic() - start
            result.lines = _read_lines(Path(workdir) / RESULTS)
            result.output_tail = _tail(Path(workdir) / OUTPUT)
    except BaseException:
        server.close(force=True)
        raise
    release(server)
    return result, stuck, swallowed


def _read_lines(path: Path) -> list[StepLine]:
    if not path.exists():
        return []
    with open(path, "rb") as fh:
        raw = fh.read(MAX_RESULTS_BYTES)
    lines = []
    for chunk in raw.split(b"\n"):
        if not chunk.strip():
            continue
        try:
            value = json.loads(chunk)
        except (ValueError, RecursionError):
            continue  # a line cut short by a kill, garbage, or nested too deep: judged as missing data
        line = StepLine.read(value)
        if line is not None:
            lines.append(line)
    return lines


def _tail(path: Path, size: int = 8000) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - size))
        return fh.read().decode("utf-8", "replace")
