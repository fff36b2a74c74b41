"""The environment of every Jupyter or nbgrader process the course starts.

nbgrader runs some of its own tools by name: its gradebook calls ``alembic`` through PATH when it
creates a database (without it, ``gradebook.db`` lacks its ``alembic_version`` table and
Formgrader answers HTTP 500 on its first page). The course's commands may be started by their
full path (``.venv/bin/transformer-course``) with the environment not activated, so PATH does not
have that folder; :func:`tool_env` puts it first for every process they start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path


def this_python_bin() -> str:
    """The folder of this Python's scripts (``jupyter``, ``nbgrader``, ``alembic``); not resolved,
    so a virtual environment's ``bin/`` stays itself and is not the base Python's."""
    return str(Path(sys.executable).parent)


def tool_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``environ`` (default: this process's) with :func:`this_python_bin` first on PATH."""
    env = dict(os.environ if environ is None else environ)
    here = this_python_bin()
    rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != here]
    env["PATH"] = os.pathsep.join([here, *rest])
    return env
