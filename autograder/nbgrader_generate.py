"""nbgrader's ``generate_assignment`` for several lessons in one process:
``python -m autograder.nbgrader_generate ROOT OUT_DIR DB_URL ASSIGNMENT...``.

Importing nbgrader costs seconds, more than generating one lesson: ``release.generate_release``
starts this once for every lesson instead of ``nbgrader generate_assignment`` once per lesson.
Each lesson gets a fresh application given the same arguments as that command line (so the
configuration files it reads and the files it writes are the same); the first lesson that fails
ends the run with nbgrader's own message and exit status, after a line that names the lesson.
"""

from __future__ import annotations

import sys

FAILED = "nbgrader could not release "


def generate(root: str, out_dir: str, db_url: str, assignment: str) -> int:
    """Generate one lesson's release; nbgrader's exit status."""
    from nbgrader.apps.generateassignmentapp import (
        GenerateAssignmentApp,  # seconds: not for ``FAILED``'s importers
    )

    app = GenerateAssignmentApp()
    try:
        app.initialize([
            assignment, "--force", "--log-level=WARN",
            f"--CourseDirectory.root={root}",
            f"--CourseDirectory.release_directory={out_dir}",
            f"--CourseDirectory.db_url={db_url}",
        ])
        app.start()
    except SystemExit as exc:  # nbgrader's apps end a failure with sys.exit
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        GenerateAssignmentApp.clear_instance()
    return 0


def main(argv: list[str]) -> int:
    root, out_dir, db_url, *assignments = argv
    for assignment in assignments:
        status = generate(root, out_dir, db_url, assignment)
        if status:
            print(f"{FAILED}{assignment}", file=sys.stderr)
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
