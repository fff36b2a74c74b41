"""Known-good count_pairs, merge and train_bpe for lesson 10's BPE checks (``helpers.checks.bpe``,
``helpers.checks.bpe_text``).

The probes must not need the reference (hidden while the lesson is graded): while they run,
``known_helpers`` makes the names count_pairs and merge mean these versions to the student's
function. The judges build each classic mistake's output (the variants) from them.
"""

from __future__ import annotations

from contextlib import contextmanager


def pairs_known(ids, gap=1):
    counts = {}
    for pair in zip(ids, ids[gap:]):  # noqa: B905 - shorter by design
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge_known(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_known(text, n_merges, start=None, pick=None, first_id=256, merged_as=None):
    """The reference's training, or a variant of it: ``start`` (the text to ids), ``pick`` (the pair
    chosen from the counts), ``first_id`` (merge r's id), ``merged_as`` (rank -> the id written into
    the ids, when it is not the one recorded)."""
    ids, merges = list(text.encode("utf-8")) if start is None else start(text), {}
    for rank in range(n_merges):
        if not (counts := pairs_known(ids)):
            break
        pair = (pick or (lambda c: max(c, key=c.get)))(counts)
        merges[pair] = first_id + rank
        ids = merge_known(ids, pair, first_id + rank if merged_as is None else merged_as(rank))
    return merges


@contextmanager
def known_helpers(function):
    """While active, count_pairs and merge mean the known-good versions to ``function``."""
    scope, missing, saved = getattr(function, "__globals__", None), object(), {}
    if isinstance(scope, dict):  # also when the notebook has none (its cell raised): then remove them after
        for name, fn in (("count_pairs", pairs_known), ("merge", merge_known)):
            saved[name] = scope.get(name, missing)
            scope[name] = fn
    try:
        yield
    finally:
        for name, value in saved.items():
            scope.pop(name, None) if value is missing else scope.__setitem__(name, value)
