"""Checks for lesson 03 (self-attention): the causal mask and a single attention head.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), hs head size (head_dim).
Every input is chosen so that no two of B, T, C, hs are equal: bugs hide when shapes agree.
No mistake costs two exercises: while the head's check runs, a head that calls the notebook's
``apply_causal_mask`` gets the course's own mask, so a wrong mask costs the mask exercise alone.
What it shares with lesson 04's checks (running and judging a causal layer) is in ``causal.py``.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from functools import partial

import torch

from helpers.checks.causal import (
    attend,
    attention_variants,
    judge_causal,
    legend,
    run_causal,
    student_case,
)
from helpers.checks.core import (
    CheckFailed,
    close,
    expect_callable,
    expect_default_dtype,
    first_mismatch,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import explain_mismatch
from helpers.checks.errors import caught, raise_caught
from helpers.checks.invariants import (
    input_gradients,
    judge_input_gradients,
    kept_between_calls,
    kept_told,
    with_zero_position,
    with_zeros,
)
from helpers.checks.verdict import load_weights, settled, tolerance
from helpers.reference import attention as ref

# ---------------------------------------------------------------------------------------------
# apply_causal_mask(scores) -> masked scores

# (seed, batch shape, T, dtype): two plain matrices of other sizes (a second call must fit its own T),
# then batched ones; about a quarter of every case's scores are exactly 0, a score like any other
MASK_CASES = [(0, (), 6, torch.float32), (5, (), 8, torch.float32)]
MASK_HIDDEN_CASES = [(1, (2,), 5, torch.float64), (2, (3, 2), 9, torch.float32), (3, (), 1, torch.float64),
                     (4, (), 70, torch.float32),  # longer than a table of a usual size (64)
                     (6, (2,), 5, torch.bfloat16)]  # half precision, as under autocast: the scores' dtype is kept


def _scores(seed: int, batch: tuple, T: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return with_zeros(3 * torch.randn(*batch, T, T, generator=g, dtype=torch.float64), g).to(dtype)


def _probe_mask(cases):
    def probe(apply_causal_mask) -> dict:
        expect_callable(apply_causal_mask, "apply_causal_mask")
        runs, facts = [], kept_between_calls(apply_causal_mask)
        for k, case in enumerate(cases):
            scores, batch = _scores(*case), case[1]
            try:
                with student_case(legend(batch, T=case[2])):
                    out = apply_causal_mask(scores)
                    again = apply_causal_mask(_scores(*case))  # the same input once more
                    alone = [apply_causal_mask(_scores(*case)[b : b + 1]) for b in range(batch[0])] if batch else None
            except Exception as exc:  # a later call: what the first one left behind may be the cause
                if k == 0 or isinstance(exc, (NotImplementedError, CheckFailed)):
                    raise
                runs.append({**caught(exc, legend(batch, T=case[2])), "kept": facts(_scores(*case))})
                continue
            runs.append({"out": out, "scores_after": scores, "again": again, "alone": alone,
                         "grads": input_gradients(apply_causal_mask, _scores(*case)),
                         "kept": facts(_scores(*case)) if k else {}})
        return {"runs": runs}

    return probe


def _judge_mask(cases):
    def judge(data: dict) -> str:
        for (seed, batch, T, dtype), run in zip(cases, runs(data, len(cases)), strict=True):
            scores = _scores(seed, batch, T, dtype)
            shape = tuple(scores.shape)
            what = f"apply_causal_mask(scores) for scores of shape {shape}"
            after = run.get("scores_after")
            if isinstance(after, torch.Tensor) and after.shape == scores.shape and not close(scores, after, 0, 0):
                raise CheckFailed(
                    f"{what} changed its input in place ({first_mismatch(scores, after, 0, 0)}). Return a new tensor "
                    "(masked_fill, not masked_fill_ or item assignment): the caller may still need the unmasked scores."
                )
            expected = ref.apply_causal_mask(scores)
            kept = kept_told(run.get("kept"), expected, 0)
            raise_caught(what, run, hint=kept or "")
            if kept and not (isinstance(run.get("out"), torch.Tensor) and close(expected, run["out"], 0, 0)):
                raise CheckFailed(f"{what}: wrong on this call, though right on the first: {kept}")
            diagnosis = {"what": what, "atol": 0, "rtol": 0, "axes": ("B",) * len(batch) + ("i", "j"),
                         "sizes": legend(batch, T=T), "again": run.get("again"), "alone": run.get("alone"),
                         "dtype": dtype}
            out = run.get("out")
            settled(out, expected, diagnosis, dtype_too=True)
            future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1).expand(shape)
            past = ~future
            hidden = out == float("-inf")
            if (hidden & past).any() and not (hidden & future).any() and T > 1:
                i, j = (hidden & past).nonzero()[0][-2:].tolist()
                raise CheckFailed(
                    f"{what}: the mask is inverted. Query {i} cannot see key {j} (j <= i, the past), while the future "
                    "is left visible. Hide the entries above the diagonal (the future), not those on and below it: check "
                    "which entries your mask marks (torch.triu(..., diagonal=1) marks the future), and which of them get "
                    "-inf (masked_fill fills where the mask is True; torch.where(cond, a, b) takes a where cond is True)."
                )
            if (hidden & past).any() and bool((scores[hidden & past] == 0).all()) and (hidden & past).sum() == (
                    (scores == 0) & past).sum():
                idx = tuple((hidden & past).nonzero()[0].tolist())
                raise CheckFailed(
                    f"{what}: every score of the past (j <= i) that is exactly 0 is hidden, {int((hidden & past).sum())} "
                    f"of them, and no other (first: query {idx[-2]}, key {idx[-1]}, entry {idx}, is -inf but should be "
                    "the score 0.0). A mask read from the values, such as scores.tril() == 0 or scores == 0, takes "
                    "a real score of 0 for a masked place: build the mask from the positions alone (j > i).")
            if (hidden & past).any():
                idx = (hidden & past).nonzero()[0].tolist()
                i, j = idx[-2:]
                if i == j:
                    raise CheckFailed(f"{what}: query {i} cannot see key {j}, itself. A token may attend to its own "
                                      "position; only keys after it (j > i) are hidden: use diagonal=1 with torch.triu.")
                raise CheckFailed(
                    f"{what}: query {i} cannot see key {j}, although key {j} is not in its future "
                    f"(entry {tuple(idx)} is -inf but should be the score {scores[tuple(idx)].item():.4g})."
                )
            leaked = future & ~hidden
            if leaked.any():
                idx = tuple(leaked.nonzero()[0].tolist())
                i, j = idx[-2:]
                value = out[idx].item()
                if math.isfinite(value) and value < -1e3:
                    raise CheckFailed(
                        f"{what}: entry {idx} (query {i}, key {j}) is {value:.3g}, a finite number. Use float('-inf'): "
                        "exp(-inf) is exactly 0, a finite 'very negative' value is not guaranteed to be (half precision "
                        "cannot even store -1e9), and scores can be more negative than you think."
                    )
                weights = torch.softmax(expected.double(), dim=-1)
                if out.shape == expected.shape and close(weights, out.double(), 1e-6, 1e-6):
                    raise CheckFailed(f"{what} returned the attention weights, the softmax of the masked scores (every "
                                      "row sums to 1, each future entry is 0): apply_causal_mask returns the masked "
                                      "scores themselves, -inf in the future; the softmax comes after it.")
                raise CheckFailed(f"{what}: query {i} attends to key {j}: the mask lets the future in "
                                  f"(entry {idx} should be -inf, got {value:.4g}).")
            if not close(expected, out, 0, 0):  # every future entry is -inf: some kept one differs
                kept = {**diagnosis, "what": f"{what}, on the scores to keep (j <= i)", "again": None, "alone": None}
                raise CheckFailed(explain_mismatch(expected.masked_fill(future, 0), out.masked_fill(future, 0), **kept))
            judge_input_gradients(run.get("grads"), ref.apply_causal_mask, (scores,), ("scores",), what, dtype,
                                  hint=" The head learns through the masked scores: the mask must keep them in the graph.")
        shapes = ", ".join(str(tuple(_scores(*c).shape)) for c in cases)
        return (f"apply_causal_mask: scores of shape {shapes}, zeros among them: every future key is -inf, every other "
                "score unchanged and its gradient kept, the input untouched.")

    return judge


check_causal_mask, check_causal_mask_hidden = visible_and_hidden(
    "check_causal_mask", _probe_mask, _judge_mask, MASK_CASES, MASK_HIDDEN_CASES)

# ---------------------------------------------------------------------------------------------
# AttentionHead(emb_dim, head_dim): x (..., T, C) -> (..., T, hs)

# (seed, batch shape, T, C, hs, dtype)
HEAD_CASES = [(10, (2,), 6, 7, 3, torch.float64)]
# a batch of one and a one-token sequence keep their axes
HEAD_HIDDEN_CASES = [(11, (), 8, 5, 4, torch.float64), (12, (3,), 5, 9, 2, torch.float32),
                     (13, (1,), 4, 6, 3, torch.float64), (14, (2,), 1, 5, 2, torch.float64)]
HEAD_PARAMS = ("query.weight", "key.weight", "value.weight")
#: the hidden case whose input has a position of exact zeros (``invariants.with_zero_position``)
ZERO_POSITION_SEED = 13


def _head_inputs(seed, batch, T, C, hs, dtype):
    g = torch.Generator().manual_seed(seed)
    weights = {name: torch.randn(hs, C, generator=g, dtype=torch.float64) for name in HEAD_PARAMS}
    x, replacement = (torch.randn(*batch, T, C, generator=g, dtype=torch.float64) for _ in range(2))
    if seed == ZERO_POSITION_SEED:
        x = with_zero_position(x)
    return {k: v.to(dtype) for k, v in weights.items()}, x.to(dtype), replacement.to(dtype)


def known_good_causal_mask(scores: torch.Tensor) -> torch.Tensor:
    """The course's ``apply_causal_mask``: the reference's arithmetic, written out here because
    the reference module of lesson 03 is hidden while lesson 03 is graded (probes cannot use it).
    ``tests/test_lesson03.py`` checks that the two agree."""
    T = scores.shape[-1]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=scores.device), diagonal=1)  # (T, T)
    return scores.masked_fill(future, float("-inf"))  # (..., T, T)


def _namespaces(cls) -> list[dict]:
    """The global namespaces of the functions written in ``cls`` and its own base classes: where
    a name such as ``apply_causal_mask`` is looked up when its methods run (the notebook's)."""
    found: dict[int, dict] = {}
    for klass in getattr(cls, "__mro__", ()):
        if klass is object or klass.__module__.startswith("torch."):
            continue
        for value in vars(klass).values():
            scope = getattr(getattr(value, "__func__", value), "__globals__", None)  # (static/class)methods too
            if isinstance(scope, dict):
                found.setdefault(id(scope), scope)
    return list(found.values())


@contextmanager
def course_mask_in(cls):
    """While active, ``apply_causal_mask`` means the course's mask to the methods of ``cls``, so that
    a mistake in the notebook's mask is counted by its own exercise, not a second time by the head's.
    A call with more arguments than the exercise's ``(scores)`` goes to the student's own function."""
    saved = []
    for scope in _namespaces(cls):
        original = scope.get("apply_causal_mask")
        if original is None:
            continue

        def masked(scores, *args, _original=original, **kwargs):
            return _original(scores, *args, **kwargs) if args or kwargs else known_good_causal_mask(scores)

        saved.append((scope, original))
        scope["apply_causal_mask"] = masked
    try:
        yield
    finally:
        for scope, original in reversed(saved):
            scope["apply_causal_mask"] = original


def _probe_head(cases):
    def probe(head_class) -> dict:
        runs = []
        with course_mask_in(head_class):
            for seed, batch, T, C, hs, dtype in cases:
                weights, x, replacement = _head_inputs(seed, batch, T, C, hs, dtype)
                with student_case(legend(batch, T=T, C=C, hs=hs)):
                    head = head_class(C, hs)
                    expect_default_dtype(head, f"{head_class.__name__}({C}, {hs})")
                    head = head.to(dtype)
                    load_weights(head, weights, f"{head_class.__name__}({C}, {hs})", "three bias-free nn.Linear layers")
                    runs.append(run_causal(head, x, replacement))
        return {"runs": runs}

    return probe


def head_variants(weights, x, hs: int, got=None) -> dict[str, torch.Tensor]:
    """What a head computes under each classic mistake (same weights and input); ``got``, the
    student's output, for a scale no mistake lists."""
    q, k, v = (x @ weights[f"{p}.weight"].T for p in ("query", "key", "value"))  # (B, T, hs)
    over = (0, "the batch") if x.dim() == 3 else None
    return attention_variants(partial(attend, q, k, v), C=x.shape[-1], T=x.shape[-2], hs=hs, over=over, got=got)


def _judge_head(cases):
    def judge(data: dict) -> str:
        for (seed, batch, T, C, hs, dtype), run in zip(cases, runs(data, len(cases)), strict=True):
            weights, x, _ = _head_inputs(seed, batch, T, C, hs, dtype)
            what = f"AttentionHead(emb_dim={C}, head_dim={hs}) on x of shape {tuple(x.shape)}"
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} modified its input x in place; a layer must leave x alone.")
            if isinstance(run.get("out"), torch.Tensor) and tuple(run["out"].shape) == (*batch, T, C):
                raise CheckFailed(
                    f"{what} should return shape {(*batch, T, hs)} (…, T, head_dim), got {tuple(run['out'].shape)} "
                    "(…, T, emb_dim): did you multiply the weights by x instead of by the values v?"
                )
            with torch.no_grad():
                head = ref.AttentionHead(C, hs).double()
                for name, param in head.named_parameters():
                    param.copy_(weights[name].double())
                xd, tol = x.double(), tolerance(dtype)
                diagnosis = {"what": what, "atol": tol, "rtol": tol, "axes": (*("B" * len(batch)), "T", "hs"),
                             "sizes": legend(batch, T=T, C=C, hs=hs), "again": run.get("again"),
                             "alone": run.get("alone"), "dtype": dtype}
                variants = partial(head_variants, {k: w.double() for k, w in weights.items()}, xd, hs, run.get("out"))
                judge_causal(run, head(xd), variants, diagnosis, reference=head, x=xd, noun="the head")
        shapes = ", ".join(f"x{(*c[1], c[2], c[3])}→{(*c[1], c[2], c[4])}" for c in cases)
        return f"AttentionHead: {shapes} match the reference, and no output moves when a later token changes."

    return judge


check_attention_head, check_attention_head_hidden = visible_and_hidden(
    "check_attention_head", _probe_head, _judge_head, HEAD_CASES, HEAD_HIDDEN_CASES)
