"""The course's own commands of ``transformer-course`` (see ``autograder.cli``): ``release`` (and
``release --check``), ``check`` (a student's own notebook) and ``lab`` (the student's or the
instructor's JupyterLab); and the one-line usage error every command may raise."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.course import RELEASE, find_course_root


class UsageError(Exception):
    """A wrong argument: printed as one line, exit code 2."""


def cmd_release(args) -> int:
    from autograder.release import release

    root = find_course_root()
    if args.check:
        return _release_check(root)
    changes = release(root)
    print("\n".join(changes) if changes else "notebooks/ and helpers/reference/ are up to date")
    return 0


def _release_check(root: Path) -> int:
    from autograder.release import reference_modules, release

    stale = [str(rel) for rel, text in reference_modules(root).items()
             if not (root / rel).exists() or (root / rel).read_text(encoding="utf-8") != text]
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / RELEASE
        fresh.mkdir()
        release(root, out_dir=fresh, write_reference=False)  # also refuses leaks; writes only into tmp
        committed = root / RELEASE
        for path in sorted(fresh.rglob("*")):
            if path.is_file():
                rel = path.relative_to(fresh)
                mine = committed / rel
                if not mine.exists() or mine.read_bytes() != path.read_bytes():
                    stale.append(f"{RELEASE}/{rel}")
        for path in sorted(committed.rglob("*")) if committed.exists() else []:
            if path.is_file() and not (fresh / path.relative_to(committed)).exists():
                stale.append(f"{RELEASE}/{path.relative_to(committed)} (not generated)")
    if stale:
        print("stale, run `transformer-course release`:\n  " + "\n  ".join(stale))
        return 1
    print("notebooks/ and helpers/reference/ match solutions/; no solution line leaks")
    return 0


def cmd_check(args) -> int:
    from autograder.selfcheck import report

    return report(args.notebook, cell_s=args.cell_timeout)


def cmd_lab(args) -> int:
    from autograder.environment import tool_env
    from autograder.lab import (
        environment_app_settings_dir,
        lab_plan,
        write_app_settings,
        write_student_config,
    )
    from autograder.lab_exchange import choose_exchange, configured_exchange
    from autograder.lab_workspace import resolve_workspace, sync_workspace

    root = find_course_root()
    jupyter = shutil.which("jupyter", path=tool_env()["PATH"])
    if jupyter is None:
        raise UsageError("jupyter is not installed in this environment (pip install -e .)")
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    options = dict(port=args.port, no_browser=args.no_browser, as_root=as_root)
    if args.instructor:
        if args.workspace is not None:
            raise UsageError("--workspace is the student's folder; the instructor's lab opens the course root")
        plan = lab_plan(jupyter, root, instructor=True, **options)
    else:
        workspace = resolve_workspace(root, args.workspace)
        print(sync_workspace(root / RELEASE, workspace).message())
        plan = lab_plan(jupyter, root, workspace=workspace, **options)
        exchange = choose_exchange(configured_exchange(root, workspace, skip=(plan.config_dir,)), workspace)
        write_student_config(plan.config_dir, exchange)
        print(exchange.message())
    write_app_settings(plan.app_settings_dir, environment_app_settings_dir(plan.env))
    print("starting:", " ".join(plan.cmd), file=sys.stderr)
    sys.stdout.flush()  # the lines above before the lab's own, also where stdout is a file
    return subprocess.call(plan.cmd, cwd=plan.cwd, env=plan.env)
