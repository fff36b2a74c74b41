"""nbgrader's Validate and the course: the quick setting is detected, and a cell interrupted by
nbgrader's time limit can never be reported as "Success" (helpers.notebook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.notebook import QUICK_ENV_VAR, guard_validation, quick_setting, validating


def test_the_quick_setting_is_on_under_the_grader_and_under_validation():
    assert not quick_setting({})
    assert quick_setting({QUICK_ENV_VAR: "1"})
    assert quick_setting({"NBGRADER_EXECUTION": "validate"}) and validating({"NBGRADER_VALIDATING": "1"})
    assert not quick_setting({"NBGRADER_EXECUTION": "autograde"})  # our grader sets the variable itself


class _Shell:
    def __init__(self):
        self.events = self
        self.hooks = []

    def register(self, event, hook):
        self.hooks.append((event, hook))


def test_the_guard_is_registered_only_while_validating():
    shell = _Shell()
    assert not guard_validation(shell, environ={})
    assert shell.hooks == []
    assert guard_validation(shell, environ={"NBGRADER_EXECUTION": "validate"})
    assert [event for event, _ in shell.hooks] == ["post_run_cell"]


def _code(source, **nbgrader):
    meta = {"nbgrader": {"schema_version": 3, "solution": False, "task": False, **nbgrader}} if nbgrader else {}
    return {"cell_type": "code", "execution_count": None, "metadata": meta, "outputs": [], "source": source}


def _validate(tmp_path: Path, first_cell: str) -> subprocess.CompletedProcess:
    notebook = {
        "cells": [
            _code(first_cell),
            _code("import time\ntime.sleep(30)  # a long training run, cut by the time limit"),
            _code("assert 1 + 1 == 2", grade=True, grade_id="check", points=1, locked=True),
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    path = tmp_path / "lesson.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    env.pop(QUICK_ENV_VAR, None)
    return subprocess.run([sys.executable, "-m", "nbgrader", "validate", str(path), "--Execute.timeout=3"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.slow
def test_an_interrupted_cell_is_never_reported_as_success(tmp_path):
    # without the course's helpers, nbgrader interrupts the long cell, goes on, and reports success
    bare = _validate(tmp_path, "pass")
    assert "Success" in bare.stdout, bare.stdout + bare.stderr
    # with them (every lesson imports helpers first), the same notebook fails validation
    guarded = _validate(tmp_path, "import helpers")
    assert "Success" not in guarded.stdout, guarded.stdout
    assert guarded.returncode != 0 or "fatal error" in guarded.stdout + guarded.stderr
