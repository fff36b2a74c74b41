"""The diagnosis layer: what a wrong output, or an error, establishes about its cause.

Every rule here runs a probe on the data it is given (the reference's output, the student's, the
student's output on the same input a second time, on each batch element alone) and says only
what that probe established, with its evidence, in a ``Finding`` that also says which cause it
names (``None``: it establishes nothing, or only where). When no rule establishes anything, the
message is the plain comparison.

* :func:`explain_mismatch` / :func:`diagnose` (judge side, ``mismatch``): why a tensor differs
  from the reference's, by the rules of ``rules_form``, ``rules_values`` and ``rules_structure``.
* :func:`explain_exception` (student side, inside ``Check.record`` and ``Check.__call__``,
  ``exceptions``): where the student's code raised, what the tensors on that line were
  (``student_code``), what PyTorch's message means (``meanings``, with a broadcasting clash's
  hints in ``clashes``).
* :func:`trace` / :func:`first_divergence` (``tracing``): the intermediate outputs of a module's
  submodules, and the first one that departs from the reference's.

The modules import only those below them: ``words`` and ``finding`` at the bottom, then ``case``,
the rules, ``mismatch``; ``student_code``, ``outside``, ``clashes``, ``meanings``, ``exceptions``;
``tracing``. None imports ``helpers.checks.core`` (core imports this package).

Shape legend: B batch, T time (sequence length), C embedding size (emb_dim), V vocabulary size
(n_vocab), nh heads (n_heads), hs head size (head_dim), H hidden size (n_hidden).
"""

from helpers.checks.diagnose.case import _Case, _where
from helpers.checks.diagnose.clashes import (
    ALTERNATIVES,
    BROADCAST_HINTS,
    STAR_FOR_MATMUL,
    Clash,
    broadcast_hints,
)
from helpers.checks.diagnose.exceptions import (
    ESTABLISHED,
    SIZE_WRITTEN_IN,
    Explained,
    _sizes_written_in,
    _tensor_in_list,
    explain_error,
    explain_exception,
    explain_exception_cause,
    explain_parts,
)
from helpers.checks.diagnose.finding import NOTHING, Finding
from helpers.checks.diagnose.meanings import _meaning
from helpers.checks.diagnose.mismatch import (
    DESCRIBE_ONLY,
    RULES,
    diagnose,
    explain_mismatch,
    precision_lost,
)
from helpers.checks.diagnose.outside import outside_modules, outside_told
from helpers.checks.diagnose.rules_form import rule_dtype, rule_shape
from helpers.checks.diagnose.rules_structure import (
    _correct,
    rule_fibre_factors,
    rule_localised,
    rule_permuted,
    rule_scrambled,
    rule_shifted,
    rule_slice_factors,
    rule_slice_offsets,
    rule_transposed,
)
from helpers.checks.diagnose.rules_values import (
    rule_batch,
    rule_determinism,
    rule_factor,
    rule_float32_precision,
    rule_nonfinite,
    rule_normalised_axis,
    rule_rounded,
)
from helpers.checks.diagnose.student_code import _is_student, case_sizes
from helpers.checks.diagnose.tracing import (
    _gloss,
    difference_from,
    first_divergence,
    trace,
    unused_outputs,
    unused_told,
)
from helpers.checks.diagnose.words import LEGEND, legend_shape

__all__ = [
    "ALTERNATIVES",
    "BROADCAST_HINTS",
    "DESCRIBE_ONLY",
    "ESTABLISHED",
    "STAR_FOR_MATMUL",
    "LEGEND",
    "NOTHING",
    "RULES",
    "SIZE_WRITTEN_IN",
    "Clash",
    "Explained",
    "Finding",
    "_Case",
    "_correct",
    "_gloss",
    "_is_student",
    "_meaning",
    "_sizes_written_in",
    "_tensor_in_list",
    "_where",
    "broadcast_hints",
    "case_sizes",
    "diagnose",
    "difference_from",
    "explain_error",
    "explain_exception",
    "explain_exception_cause",
    "explain_mismatch",
    "explain_parts",
    "first_divergence",
    "legend_shape",
    "outside_modules",
    "outside_told",
    "precision_lost",
    "rule_batch",
    "rule_determinism",
    "rule_dtype",
    "rule_factor",
    "rule_float32_precision",
    "rule_fibre_factors",
    "rule_localised",
    "rule_nonfinite",
    "rule_normalised_axis",
    "rule_permuted",
    "rule_rounded",
    "rule_scrambled",
    "rule_shape",
    "rule_shifted",
    "rule_slice_factors",
    "rule_slice_offsets",
    "rule_transposed",
    "trace",
    "unused_outputs",
    "unused_told",
]
