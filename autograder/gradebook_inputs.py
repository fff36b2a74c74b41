"""What the gradebook reads from nbgrader's side (``autograder.gradebook``): the course's nbgrader
config, a submission's ``timestamp.txt`` as ``nbgrader collect`` wrote it, and the digest that
decides whether a submission changed since it was graded by hand."""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import datetime
from pathlib import Path

from jupyter_core.paths import jupyter_config_path
from nbgrader.utils import parse_utc
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

COURSE_ID = "transformer-course"
TIMESTAMP = "timestamp.txt"  # beside a submission, written by `nbgrader collect`


def nbgrader_config(root: Path) -> Config:
    """The nbgrader config the course's own nbgrader commands see: every ``nbgrader_config.py`` of
    Jupyter's config path (lowest priority first), then the course root's."""
    config = Config()
    folders = [*reversed(jupyter_config_path()), str(root)]
    for folder in folders:
        if (Path(folder) / "nbgrader_config.py").is_file():
            try:
                config.merge(PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config())
            except Exception as exc:  # noqa: BLE001 - nbgrader, too, warns and goes on
                print(f"warning: {Path(folder) / 'nbgrader_config.py'} could not be read ({exc}); left out",
                      file=sys.stderr)
    return config


def read_timestamp(folder: Path) -> tuple[datetime | None, str]:
    """The submission time in ``folder/timestamp.txt`` as nbgrader reads it (naive UTC), and a
    problem to report ("" when none). No file or an empty one: no time, as in nbgrader."""
    path = folder / TIMESTAMP
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None, ""
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path}: cannot be read ({exc})"
    if not text:
        return None, ""
    try:
        return parse_utc(text), ""
    except (ValueError, OverflowError) as exc:
        return None, f"{path}: not a time nbgrader can read ({text[:60]!r}: {exc})"


def notebook_digest(path: Path | None) -> str:
    """What decides whether a submission changed: its cells' types, nbgrader ids and sources
    (outputs, execution counts and other metadata left out); the file's bytes when it is no
    readable notebook; "absent" when nothing was handed in."""
    if path is None or not path.is_file():
        return "absent"
    data = path.read_bytes()
    try:
        cells = json.loads(data.decode("utf-8"))["cells"]
        summary = [[c.get("cell_type"), ((c.get("metadata") or {}).get("nbgrader") or {}).get("grade_id"),
                    "".join(c["source"]) if isinstance(c.get("source"), list) else c.get("source")] for c in cells]
        return "cells:" + hashlib.sha256(json.dumps(summary, sort_keys=True).encode("utf-8")).hexdigest()
    except (ValueError, KeyError, TypeError, AttributeError):
        return "bytes:" + hashlib.sha256(data).hexdigest()
