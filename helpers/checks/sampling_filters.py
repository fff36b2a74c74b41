"""Checks for lesson 08 (generation): the filters, temperature, top-k and top-p.

The filters are checked on fixed logits, chosen so that every classic mistake gives a different
answer: ties at the k-th value, cumulative probabilities well away from p (but for one hidden
case, where the first of two equally likely tokens reaches p exactly; which of the two a sort puts
first is free), rows whose most likely tokens are not in vocabulary order. A mistake is named only
when its output is the student's in every case where that mistake's output differs from the
others'; otherwise the message says which
tokens are kept or removed wrongly, or what the diagnosis layer establishes about the values.
The expected outputs and the classic mistakes' outputs are in ``helpers.checks.sampling_mistakes``;
drawing the next token, ``sample_next``, is checked in ``helpers.checks.sample_next``.

Shape legend: V vocabulary size, N rows (a batch of positions), B a batch of such batches.
"""

from __future__ import annotations

import torch

from helpers.checks.core import (
    CheckFailed,
    close,
    expect_callable,
    first_mismatch,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import caught, raise_caught
from helpers.checks.invariants import FAR
from helpers.checks.sampling_mistakes import temperature_variants, top_k_variants, top_p_variants
from helpers.reference import sampling as ref

INF = float("inf")


def _logits(probs, dtype=torch.float64) -> torch.Tensor:
    """Logits whose softmax is ``probs`` (up to rounding), shifted so they are not just log-probs."""
    return (torch.tensor(probs, dtype=torch.float64).log() + 1.7).to(dtype)


def _sizes(shape) -> dict[str, int]:
    """The case's sizes by legend letter: (V,), (N, V) or (B, N, V)."""
    return dict(zip(("B", "N", "V")[3 - len(shape):], shape, strict=True))


# ---------------------------------------------------------------------------------------------
# The three filters: one probe and one judge, each filter with its cases and classic mistakes


def _probe_filter(name: str, cases):
    def probe(fn) -> dict:
        expect_callable(fn, name)
        runs = []
        for _, logits, arg in cases:
            x = logits.clone()
            with case_sizes(_sizes(x.shape)):
                try:
                    out = fn(x, arg)
                    run = {"out": out, "same_object": out is x}
                except Exception as exc:  # noqa: BLE001 - the judge explains the error
                    run = caught(exc, _sizes(x.shape))
            runs.append({**run, "input_after": x})
        return {"runs": runs}

    return probe


def _kept(what: str, logits, expected, out) -> str:
    """Which tokens the filter kept, against the reference's, or what is wrong with the values."""
    if out.dtype == expected.dtype and out.shape == expected.shape:
        removed, kept = expected == -INF, out != -INF
        stand_in = out[removed & kept]
        if removed.any() and (out[~removed] == expected[~removed]).all() and stand_in.numel() == removed.sum() \
                and (stand_in == stand_in[0]).all():
            return (f"{what}: you put {stand_in[0].item():g} instead of -inf on the removed tokens: after the "
                    "softmax they keep some probability (exp of a finite number is not 0); use float('-inf').")
        if (out[kept] == logits[kept]).all() and (kept != ~removed).any():
            row = int((kept != ~removed).reshape(-1, logits.shape[-1]).any(dim=-1).nonzero()[0])
            mine = kept.reshape(-1, logits.shape[-1])[row].nonzero().flatten().tolist()
            want = (~removed).reshape(-1, logits.shape[-1])[row].nonzero().flatten().tolist()
            how = "too few" if set(mine) < set(want) else "too many" if set(mine) > set(want) else "other tokens"
            if len(mine) == logits.shape[-1]:
                how = "all of them: nothing was removed"
            every = (" Every token must be kept here (none is past the threshold). Is the threshold changed (capped, "
                     "rounded or bounded) before it is used?" if not removed.any() else "")
            return (f"{what}: the kept logits are unchanged, but the wrong tokens are kept ({how}): row {row} "
                    f"keeps the tokens {mine}, it should keep {want} (from the most likely: "
                    f"{logits.reshape(-1, logits.shape[-1])[row].argsort(descending=True).tolist()}).{every}")
        if (kept == ~removed).all():
            return explain_mismatch(expected[kept], out[kept], what=f"{what}: the right tokens are kept, but their "
                                    "logits changed (they must stay as they are); the kept logits", atol=0, rtol=1e-6)
    return explain_mismatch(expected, out, what=what, atol=0, rtol=1e-6, axes=tuple(_sizes(logits.shape)),
                            sizes=_sizes(logits.shape), dtype=logits.dtype)


def _same(expected, out, logits, atol, rtol, ties: bool) -> bool:
    """``out`` is ``expected``; with ``ties``, also when tokens of equal logits trade places (which of
    two equally likely tokens a sort puts first is not specified): the same values in each row and
    every value that is not -inf the input's own at its place."""
    if close(expected, out, atol, rtol):
        return True
    if not ties or out.shape != logits.shape:
        return False
    kept = out != -INF
    return close(expected.sort(dim=-1).values, out.sort(dim=-1).values, atol, rtol) and close(
        out[kept], logits[kept], atol, rtol)


def _judge_filter(name: str, arg: str, cases, reference, variants, hints, summary: str, tol=None, kept=True,
                  ties=False):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        seen, wrong = [], []  # every case's (labels of the variants that give its output, variants); the wrong cases
        for (label, logits, value), run in zip(cases, found, strict=True):
            what = f"{name}(logits, {arg}={value}) on {label}, shape {tuple(logits.shape)}"
            raise_caught(what, run, hints(logits, value))
            after = run.get("input_after")
            if isinstance(after, torch.Tensor) and after.shape == logits.shape and not close(logits, after, 0, 0):
                raise CheckFailed(
                    f"{what} changed its input in place ({first_mismatch(logits, after, 0, 0)}). Return a new "
                    "tensor: the caller still needs the original logits (the next filter, the next sample)."
                )
            out, expected = run.get("out"), reference(logits.clone(), value)
            if not isinstance(out, torch.Tensor) or out.shape != logits.shape:
                raise CheckFailed(explain_mismatch(expected, out, what=what, atol=0, rtol=0, sizes=_sizes(logits.shape)))
            atol = (tol or {}).get(logits.dtype, 0)
            right = _same(expected, out, logits, atol, atol, ties) and out.dtype == logits.dtype
            if right and run.get("same_object"):
                raise CheckFailed(f"{what} returned its input itself, not a new tensor: a caller that changes the "
                                  "result would change the logits too. Return a new tensor (logits / temperature, "
                                  "masked_fill, clone).")
            options = {k: v for k, v in variants(logits, value, expected).items() if v.shape == out.shape}
            seen.append(([k for k, v in options.items()
                          if out.dtype == logits.dtype and _same(v, out, logits, atol, max(atol, 1e-6), ties)],
                         options))
            if not right:
                wrong.append((what, logits, expected, out, seen[-1][0]))
        if not wrong:
            return summary
        # a mistake is named when its output is the student's in every case (right ones included)
        what, logits, expected, out, found = wrong[0]
        named = [k for k in found if all(k in f for f, options in seen if k in options)]
        if named:
            evidence = first_mismatch(expected, out, atol=1e-6, rtol=1e-6)
            if len(named) == 1:
                raise CheckFailed(f"{what}: {named[0]}. Evidence: {evidence}.")
            raise CheckFailed(f"{what}: your output is what each of these mistakes gives, in every case of this "
                              f"check: {'; or '.join(named[:3])}. Evidence: {evidence}.")
        if kept:
            raise CheckFailed(_kept(what, logits, expected, out))
        raise CheckFailed(explain_mismatch(expected, out, what=what, atol=1e-6, rtol=1e-6, sizes=_sizes(logits.shape),
                                           axes=tuple(_sizes(logits.shape)), dtype=logits.dtype))

    return judge


def _shuffled(case, rng):
    """While grading: each row's logits in another order, all shifted by one constant (exact in
    binary): the same ties and the same kept set as written, other numbers in other places."""
    what, logits, value = case
    order = torch.rand(logits.shape, generator=torch.Generator().manual_seed(rng.randrange(2**31))).argsort(dim=-1)
    return what, logits.gather(-1, order) + rng.choice([-1.5, -0.5, 0.25, 1.0, 2.0]), value


def _filter_checks(name: str, fn: str, arg: str, cases, hidden_cases, reference, variants, summary, hints=None, **kw):
    def judge(group):
        text = f"{fn}: " + ", ".join(f"{c[0]} ({arg}={c[2]})" for c in group) + f": {summary}"
        return _judge_filter(fn, arg, group, reference, variants, hints or (lambda *_: ()), text, **kw)

    return visible_and_hidden(f"check_{name}", lambda group: _probe_filter(fn, group), judge, cases, hidden_cases, _shuffled)


TEMPERATURE_CASES = [
    ("one row", _logits([0.5, 0.2, 0.15, 0.1, 0.05]), 0.5),
    ("two rows", _logits([[0.1, 0.6, 0.3], [0.3, 0.3, 0.4]], torch.float32), 2.5),
]
TEMPERATURE_HIDDEN_CASES = [
    ("a (2, 3, 4) batch", torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64), 0.7),
    ("an int temperature", _logits([0.05, 0.7, 0.25]), 3),
    ("float32 logits", _logits([0.2, 0.3, 0.1, 0.4], torch.float32), 1.0),
    ("a temperature near 0", _logits([0.5, 0.3, 0.2]), 0.001),  # divided as it is: no floor under it
]
check_temperature, check_temperature_hidden = _filter_checks(
    "temperature", "apply_temperature", "temperature", TEMPERATURE_CASES, TEMPERATURE_HIDDEN_CASES,
    ref.apply_temperature, temperature_variants, "logits / temperature, input untouched.",
    tol={torch.float64: 1e-12, torch.float32: 1e-6}, kept=False)


def _top_k_hints(logits, k):
    V = logits.shape[-1]
    if k > V:
        return [("out of range", f"k = {k} is more than the {V} tokens of a row: then keep them all "
                                 "(k = min(k, logits.shape[-1])).")]
    return [(("float64 ().", "float32 ()."), "a tensor on that line is 0-d (shape (), a single number): a loop over a "
             "tensor walks its first axis, so looping over the rows of a (V,) row gives numbers, not rows. Filter the "
             "whole tensor along its last axis (dim=-1), which works for (V,) and (N, V) alike."),
            ("out of range", f"k = {k} is at most the V = {V} tokens of a row, so the topk (or sort) ran along "
                             "a shorter dimension: the tokens are the last one, dim=-1.")]


TOP_K_CASES = [
    ("one row", torch.tensor([1.0, 3.5, -0.5, 2.0, 0.25, 3.0, -2.0], dtype=torch.float64), 3),
    ("two rows with a tie at the k-th value", torch.tensor(
        [[0.3, 2.0, 1.1, 1.1, -1.0, 0.9], [2.5, -0.2, 0.4, 1.7, 0.4, 0.0]], dtype=torch.float32), 3),
]
TOP_K_HIDDEN_CASES = [
    ("k = 1, with a tie", torch.tensor([[0.1, -0.3, 0.7, 0.2], [1.2, 0.4, -0.1, 1.2], [0.0, 0.3, 0.5, 0.45]]), 1),
    ("k larger than the vocabulary", torch.tensor([0.4, -1.0, 2.0], dtype=torch.float64), 5),
    ("a (2, 3, 5) batch", torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(8), dtype=torch.float64), 2),
]
check_top_k, check_top_k_hidden = _filter_checks(
    "top_k", "top_k_filter", "k", TOP_K_CASES, TOP_K_HIDDEN_CASES, ref.top_k_filter, top_k_variants,
    "every logit >= the row's k-th largest kept unchanged, ties included, the rest -inf.", _top_k_hints)


TOP_P_CASES = [  # no cumulative probability is within 1e-3 of p
    ("one row", _logits([0.1, 0.4, 0.06, 0.15, 0.25, 0.04]), 0.7),
    ("two rows", _logits([[0.05, 0.3, 0.2, 0.45], [0.22, 0.28, 0.26, 0.24]], torch.float32), 0.6),
    ("logits near ±1e4", torch.tensor([[0.0, -1.5, 0.75, -0.25, -2 * FAR + 3, -2 * FAR],  # extreme: exp overflows
                                       [-0.5, -2 * FAR, 1.0, 0.25, -1.25, 0.5]], dtype=torch.float32) + FAR, 0.8),
]
TOP_P_HIDDEN_CASES = [
    ("p below the top probability", _logits([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]]), 0.35),
    ("a (2, 2, 5) batch", _logits([[[0.1, 0.2, 0.3, 0.15, 0.25], [0.5, 0.05, 0.05, 0.3, 0.1]],
                                   [[0.02, 0.08, 0.6, 0.2, 0.1], [0.3, 0.3, 0.1, 0.2, 0.1]]]), 0.85),
    ("p = 0.95", _logits([0.01, 0.5, 0.02, 0.3, 0.17], torch.float32), 0.95),
    # the least likely token comes after 99.5 % of the mass: p = 1 keeps it, as it keeps every token
    ("p = 1, every token kept", _logits([[0.5, 0.3, 0.195, 0.005], [0.25, 0.25, 0.497, 0.003]]), 1.0),
    # exact in binary whatever the softmax's form: one of the two reaches p = 0.5 on its own, which of
    # them is kept is the sort's choice, so the two may trade places (ties=True)
    ("two equally likely tokens per row, p = 0.5 exactly", torch.tensor([[0.0, 0.0], [1.25, 1.25]]), 0.5),
]
check_top_p, check_top_p_hidden = _filter_checks(
    "top_p", "top_p_filter", "p", TOP_P_CASES, TOP_P_HIDDEN_CASES, ref.top_p_filter, top_p_variants,
    "the most likely tokens up to and including the one that takes the mass to p kept unchanged, the rest -inf.",
    ties=True)
