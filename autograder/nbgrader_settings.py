"""nbgrader settings for this course, applied by ``nbgrader_config.py`` at the course root.

Each setting below exists because nbgrader's default hurts a PyTorch course:

* ``IgnorePattern``: nbgrader scores a test cell 0 when anything is written to stderr; a correct
  answer that triggers a torch ``UserWarning`` would lose its points. Warnings are shown, never scored.
* ``OverwriteCells.add_missing_cells``: a test cell the student deleted is put back and run,
  instead of leaving the exercise as "needs manual grade".
* ``CourseDirectory.ignore``: each lesson's ``catalogue.toml`` (its mistakes, written as edits of
  the solution) stays out of the release, which otherwise takes every file beside the notebook.
* ``Execute.timeout``: a cell that runs longer than this is stopped, so one infinite loop cannot
  hang a whole grading run.
* ``LateSubmissionPlugin.penalty_method``: nbgrader's default, ``none``, records that a submission
  was late and takes nothing off. Here a submission later than its due date (``nbgrader db
  assignment add <assignment> --duedate=...``, plus the student's extension) scores 0, nbgrader's
  ``zero`` method; ``nbgrader autograde`` and ``transformer-course grade --gradebook`` both apply
  it, and ``nbgrader export`` shows it. Set ``none`` in ``nbgrader_config.py`` to keep late work's
  points, or name a plugin of your own in ``c.AssignLatePenalties.plugin_class``.
"""

CELL_TIMEOUT_S = 60


def configure(c) -> None:
    """Fill a traitlets config object ``c`` with the course's nbgrader settings."""
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = "notebooks"
    c.CourseDirectory.submitted_directory = "submitted"
    c.CourseDirectory.autograded_directory = "autograded"
    c.CourseDirectory.feedback_directory = "feedback"
    c.CourseDirectory.course_id = "transformer-course"
    c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "catalogue.toml"]
    c.IgnorePattern.enabled = True
    c.IgnorePattern.pattern = r"[\s\S]"  # any stderr output: warnings never cost points
    c.OverwriteCells.add_missing_cells = True
    c.Execute.timeout = CELL_TIMEOUT_S
    c.Execute.interrupt_on_timeout = True
    c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
    c.ClearSolutions.enforce_metadata = True
    c.LateSubmissionPlugin.penalty_method = "zero"
