"""Settings for the whole test suite."""

import os

# Lessons that train read this: tests run them in their quick setting (seconds, not minutes).
os.environ.setdefault("TRANSFORMER_COURSE_QUICK", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
