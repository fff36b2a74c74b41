"""Helpers for the Transformer course: plots, data, training utilities, checks and the reference.

Modules (import the one you need; nothing is star-imported):

* ``helpers.plotting``  - pictures of attention: query-key products, weights, masks, head grids
* ``helpers.checks``    - the checks behind every exercise's tests, with their diagnoses
* ``helpers.reference`` - the reference implementation, generated from ``solutions/``
* ``helpers.params``    - counting parameters
"""

__version__ = "0.1.0"
