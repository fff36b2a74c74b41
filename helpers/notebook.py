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
* ``short_errors()``: what a student sees at a blank is one line. A check's verdict shows its
  message without a traceback through the course's code; a cell that calls an exercise not written
  yet says so in one line instead of a bare ``NotImplementedError``, and so does a later cell that
  misses a name such a cell would have defined (instead of a ``NameError``). Every other error keeps
  IPython's traceback; the cell still fails (nbgrader and Validate see an error as before).
"""

from __future__ import annotations

import ast
import linecache
import os
import sys

__all__ = ["QUICK_ENV_VAR", "guard_validation", "quick_setting", "short_errors", "validating"]

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


# ---------------------------------------------------------------------------------------------
# One line for a blank exercise

_RED, _RESET = "\x1b[0;31m", "\x1b[0m"


def _assigned(source: str) -> set[str]:
    """The names a cell's own code binds (assignments, for, with, def, class, import), not inside
    the functions it defines."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    found: set[str] = set()

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                found.add(child.id)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(child.name)
                continue
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                found.update((a.asname or a.name).split(".")[0] for a in child.names)
            elif isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                continue
            visit(child)

    visit(tree)
    return found


def _unwritten(shell, value, tb) -> str | None:
    """The exercise (function or class) whose blank answer raised ``value``, a NotImplementedError
    raised by a notebook cell's own code, not by PyTorch; None for any other error."""
    from helpers.checks.core import _unanswered

    if not isinstance(value, NotImplementedError) or not _unanswered(value):
        return None
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code if tb is not None else None
    cells = getattr(getattr(shell, "compile", None), "_filename_map", {})
    if code is None or code.co_filename not in cells or code.co_name == "<module>":
        return None
    return getattr(code, "co_qualname", code.co_name).split(".")[0]


def _one_line(shell, value, tb, waiting: dict[str, str]) -> str | None:
    """The single line to show for ``value`` (raised by a cell whose code starts ``tb``), or None
    for IPython's own traceback; notes in ``waiting`` the names this cell did not get to define."""
    if type(value).__name__ == "CheckFailed" and type(value).__module__ == "helpers.checks.core":
        return f"{_RED}CheckFailed{_RESET}: {value}"
    exercise = _unwritten(shell, value, tb)
    if exercise is None and isinstance(value, NameError) and getattr(value, "name", None) in waiting:
        exercise = waiting[value.name]
    if exercise is None:
        return None
    cells = getattr(getattr(shell, "compile", None), "_filename_map", {})
    while tb is not None and tb.tb_frame.f_code.co_filename not in cells:  # IPython's own frames come first
        tb = tb.tb_next
    cell = "".join(linecache.getlines(tb.tb_frame.f_code.co_filename)) if tb is not None else ""
    waiting.update({name: exercise for name in _assigned(cell) if name not in shell.user_ns})
    return f"{_RED}({exercise} is an exercise not written yet: this cell will work once it is){_RESET}"


def short_errors(shell=None) -> bool:
    """Show a check's verdict, and a cell held up by an exercise not written yet, in one line each
    (see the module's docstring) in the IPython ``shell``; returns whether it did."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc") or not hasattr(shell, "_showtraceback"):
        return False
    waiting: dict[str, str] = {}  # a name a held-up cell would have defined -> the exercise it waits for

    def handler(self, etype, value, tb, tb_offset=None):
        try:
            line = _one_line(self, value, tb, waiting)
        except Exception:  # noqa: BLE001 - never lose the error itself
            line = None
        if line is None:
            self.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
        else:
            self._showtraceback(etype, value, [line])

    def forget(result) -> None:  # a cell that defines an exercise again: what waited for it is told normally
        if getattr(result, "success", False):
            defined = _assigned(getattr(getattr(result, "info", None), "raw_cell", "") or "")
            for name in [n for n, exercise in waiting.items() if exercise in defined or n in shell.user_ns]:
                del waiting[name]

    shell.set_custom_exc((AssertionError, NotImplementedError, NameError), handler)
    shell.events.register("post_run_cell", forget)
    return True
