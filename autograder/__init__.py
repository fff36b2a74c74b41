"""Release, grading and self-checks for the Transformer course (the ``transformer-course`` tool)."""
