"""Settings for the whole test suite."""

import os

# Lessons that train read this: tests run them in their quick setting (seconds, not minutes).
os.environ.setdefault("TRANSFORMER_COURSE_QUICK", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# Tiny tensors on a busy 2-core machine run far faster on one thread; kernels started by the
# notebook tests inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")
