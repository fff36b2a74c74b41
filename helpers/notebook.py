"""What the course does inside a notebook's kernel: the quick setting, and honest validation.

* ``quick_setting()`` is true when a lesson should run its tiny setting: under
  ``TRANSFORMER_COURSE_QUICK=1`` (CI and the grader set it) and while nbgrader validates the
  notebook (the Validate button, ``nbgrader validate``), which sets ``NBGRADER_EXECUTION=validate``
  in the kernel's environment. Validation checks the answers, not the training runs, so it
  finishes in well under a minute instead of running minutes of training under nbgrader's 30 s
  cell limit. The student configures nothing.
* ``guard_validation()``: nbgrader interrupts a cell that runs past its time limit and goes on
  with the next one, and its verdict looks only at graded cells: a notebook whose training cell
  was cut short could be reported as "Success". While nbgrader validates, the course stops the
  kernel as soon as a cell ends interrupted, so nbgrader reports a failure instead.
"""

from __future__ import annotations

import os
import sys

__all__ = ["QUICK_ENV_VAR", "guard_validation", "quick_setting", "validating"]

QUICK_ENV_VAR = "TRANSFORMER_COURSE_QUICK"

#: the exit status of a kernel stopped because a cell was interrupted during validation
INTERRUPTED_EXIT = 3


def validating(environ: dict[str, str] | None = None) -> bool:
    """True while nbgrader's Validate runs the notebook (nbgrader sets these in the kernel's environment)."""
    env = os.environ if environ is None else environ
    return env.get("NBGRADER_EXECUTION") == "validate" or env.get("NBGRADER_VALIDATING") == "1"


def quick_setting(environ: dict[str, str] | None = None) -> bool:
    """True when a lesson should run its quick setting: ``TRANSFORMER_COURSE_QUICK=1``, or validation."""
    env = os.environ if environ is None else environ
    return env.get(QUICK_ENV_VAR) == "1" or validating(env)


def _stop_if_interrupted(result) -> None:
    """IPython's post_run_cell hook: a cell that ended in KeyboardInterrupt stops the kernel."""
    if isinstance(getattr(result, "error_in_exec", None), KeyboardInterrupt):
        print("\nThis cell was interrupted (nbgrader's time limit for a cell?), so the notebook did not run "
              "to the end: stopping the kernel so that validation cannot report success.", file=sys.stderr,
              flush=True)
        os._exit(INTERRUPTED_EXIT)


def guard_validation(shell=None, environ: dict[str, str] | None = None) -> bool:
    """While validating, register the hook above on the IPython ``shell``; returns whether it did."""
    if not validating(environ):
        return False
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None or not hasattr(shell, "events"):
        return False
    shell.events.register("post_run_cell", _stop_if_interrupted)
    return True
