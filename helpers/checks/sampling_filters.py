"""Checks for lesson 08 (generation): the filters, temperature, top-k and top-p.

The filters are checked on fixed logits, chosen so that every classic mistake gives a different
answer: ties at the k-th value, cumulative probabilities well away from p, rows whose most likely
tokens are not in vocabulary order. A mistake is named only when its output is the student's in
every case where that mistake's output differs from the others'; otherwise the message says which
tokens are kept or removed wrongly, or what the diagnosis layer establishes about the values.
Drawing the next token, ``sample_next``, is checked in ``helpers.checks.sample_next``.

Shape legend: V vocabulary size, N rows (a batch of positions), B a batch of such batches.
"""

from __future__ import annotations

import math

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
from helpers.reference import sampling as ref

INF = float("inf")


def _logits(probs, dtype=torch.float64) -> torch.Tensor:
    """Logits whose softmax is ``probs`` (up to rounding), shifted so they are not just log-probs."""
    return (torch.tensor(probs, dtype=torch.float64).log() + 1.7).to(dtype)


def _sizes(shape) -> dict[str, int]:
    """The case's sizes by legend letter: (V,), (N, V) or (B, N, V)."""
    return dict(zip(("B", "N", "V")[3 - len(shape):], shape, strict=True))


def top_k_expected(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep every logit at least as large as the k-th largest of its row (ties at the k-th kept)."""
    k = min(k, logits.shape[-1])
    kth = logits.sort(dim=-1, descending=True).values[..., k - 1 : k]  # (..., 1)
    return logits.masked_fill(logits < kth, -INF)


def top_p_expected(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens, in order, until their probabilities add up to p or more."""
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # (..., V): mass of the more likely tokens
    drop = torch.zeros_like(order, dtype=torch.bool).scatter(-1, order, mass_before >= p)  # vocabulary order
    return logits.masked_fill(drop, -INF)


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
            return (f"{what}: the kept logits are unchanged, but the wrong tokens are kept ({how}): row {row} "
                    f"keeps the tokens {mine}, it should keep {want} (from the most likely: "
                    f"{logits.reshape(-1, logits.shape[-1])[row].argsort(descending=True).tolist()}).")
        if (kept == ~removed).all():
            return explain_mismatch(expected[kept], out[kept], what=f"{what}: the right tokens are kept, but their "
                                    "logits changed (they must stay as they are); the kept logits", atol=0, rtol=1e-6)
    return explain_mismatch(expected, out, what=what, atol=0, rtol=1e-6, axes=tuple(_sizes(logits.shape)),
                            sizes=_sizes(logits.shape), dtype=logits.dtype)


def _same(expected, out, logits, atol, ties: bool) -> bool:
    """``out`` is ``expected``; with ``ties``, also when tokens of equal logits trade places (which of
    two equally likely tokens a sort puts first is not specified): the same values in each row and
    every value that is not -inf the input's own at its place."""
    if close(expected, out, atol, atol):
        return True
    if not ties or out.shape != logits.shape:
        return False
    kept = out != -INF
    return close(expected.sort(dim=-1).values, out.sort(dim=-1).values, atol, atol) and close(
        out[kept], logits[kept], atol, atol)


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
            right = _same(expected, out, logits, atol, ties) and out.dtype == logits.dtype
            if right and run.get("same_object"):
                raise CheckFailed(f"{what} returned its input itself, not a new tensor: a caller that changes the "
                                  "result would change the logits too. Return a new tensor (logits / temperature, "
                                  "masked_fill, clone).")
            options = {k: v for k, v in variants(logits, value, expected).items() if v.shape == out.shape}
            seen.append(([k for k, v in options.items()
                          if out.dtype == logits.dtype and _same(v, out, logits, max(atol, 1e-6), ties)],
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


def _temperature_variants(logits, t, expected):
    return {
        "you multiplied by the temperature instead of dividing: a high temperature must flatten "
        "the distribution (logits / temperature shrinks their differences)": logits * t,
        "you returned probabilities (a softmax): return logits, divided by the temperature; "
        "the softmax comes later, after the filters": torch.softmax(expected, dim=-1),
        "you divided the probabilities, not the logits: softmax(logits) / temperature is a rescaled "
        "distribution that renormalises to the same one, so the temperature has no effect": torch.softmax(logits, dim=-1) / t,
        "you returned log-probabilities (log_softmax): return the logits divided by the temperature":
            torch.log_softmax(expected, dim=-1),
        "you returned exp(logits / temperature): return the logits themselves, divided": expected.exp(),
        "you subtracted the temperature: divide the logits by it": logits - t,
        "you divided by the temperature squared: divide by the temperature once": logits / t**2,
        "you divided by the square root of the temperature: divide by the temperature itself": logits / math.sqrt(t),
        "you rounded the temperature to an integer (int(temperature)) before dividing": logits / int(t) if int(t) else logits * INF,
        "you returned the logits unchanged": logits,
    }


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
    ref.apply_temperature, _temperature_variants, "logits / temperature, input untouched.",
    tol={torch.float64: 1e-12, torch.float32: 1e-6}, kept=False)


def _top_k_variants(logits, k, expected):
    V = logits.shape[-1]
    kth_smallest = logits.sort(dim=-1).values[..., min(k, V) - 1 : min(k, V)]
    only_k = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, logits.topk(min(k, V), dim=-1).indices, True)
    variants = {
        f"you kept k+1 = {k + 1} tokens per row (an off-by-one: the k-th largest value is at "
        "index k-1 of the sorted logits)": top_k_expected(logits, k + 1),
        "you dropped the k-th largest token itself (a strict > comparison with the k-th value): keep the "
        "logits >= the k-th largest": expected.masked_fill(expected == logits.topk(min(k, V), -1).values[..., -1:], -INF),
        "you dropped the k-th largest token itself (index k-1 one too far: the k-1 largest stay): keep the "
        "logits >= the k-th largest": top_k_expected(logits, k - 1) if k > 1 else torch.full_like(logits, -INF),
        "you kept exactly k tokens by index, so a token tied with the k-th largest value was "
        "dropped; keep every logit >= the k-th largest value (ties all stay)": logits.masked_fill(~only_k, -INF),
        "you kept the k smallest logits: sort in descending order (or use torch.topk)":
            logits.masked_fill(logits > kth_smallest, -INF),
        "you compared with the k-th smallest logit instead of the k-th largest (torch.kthvalue, an ascending "
        "sort, or topk(largest=False) count from the smallest): sort in descending order, or use torch.topk":
            logits.masked_fill(logits < kth_smallest, -INF),
        "you kept only the largest logit of each row: the threshold is the k-th largest (the last of topk's "
        "k values, [..., -1:]), not the first": top_k_expected(logits, 1),
        "you compared the logits with the k-th largest token's index (topk(...).indices) instead of its value "
        "(topk(...).values)": logits.masked_fill(
            logits < logits.topk(min(k, V), dim=-1).indices[..., -1:].to(logits.dtype), -INF),
        "you put 0 instead of -inf on the removed tokens: exp(0) = 1 still gives them "
        "probability after the softmax": expected.masked_fill(expected == -INF, 0.0),
        "you returned probabilities: return the logits with -inf on the removed tokens": torch.softmax(expected, dim=-1),
        "you returned the probabilities (0 on the removed tokens): return the logits with -inf on the removed "
        "tokens": torch.softmax(logits, dim=-1).masked_fill(expected == -INF, 0.0),
    }
    row_kth = logits.topk(min(k, V), dim=-1).values[..., -1:]  # (..., 1): each row's k-th largest
    variants["you used one threshold for every row, the smallest of the rows' k-th largest values (a min() "
             "over the whole batch): each row keeps its own k largest, compare with values[..., -1:]"] = \
        logits.masked_fill(logits < row_kth.min(), -INF)
    if logits.dim() > 1:
        variants[f"you clamped k by logits.shape[0] = {logits.shape[0]}, the number of rows, instead of the "
                 f"vocabulary size logits.shape[-1] = {V}"] = top_k_expected(logits, min(k, logits.shape[0]))
    flat_kth = logits.reshape(-1).sort(descending=True).values[min(k, V) - 1]
    variants["you took the k-th largest value of the whole batch instead of each row's: "
             "sort or topk along the last dimension (dim=-1)"] = logits.masked_fill(logits < flat_kth, -INF)
    return variants


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
    "top_k", "top_k_filter", "k", TOP_K_CASES, TOP_K_HIDDEN_CASES, ref.top_k_filter, _top_k_variants,
    "every logit >= the row's k-th largest kept unchanged, ties included, the rest -inf.", _top_k_hints)


def _top_p_variants(logits, p, expected):
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    cum = sorted_probs.cumsum(dim=-1)

    def back(drop_sorted, index=order):
        return logits.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, index, drop_sorted), -INF)

    asc_probs, asc_order = probs.sort(dim=-1)
    naive = logits.exp() / logits.exp().sum(dim=-1, keepdim=True)  # in the logits' dtype, as a student's would be
    naive_sorted, naive_order = naive.sort(dim=-1, descending=True)
    variants = {
        "your softmax overflows: without each row's largest logit subtracted first, exp of a logit near 1e4 is inf "
        "(beyond 88.7 in float32, 709.8 in float64) and inf / inf is NaN, so the cumulative sums are NaN and no "
        "comparison with p holds. Subtract each row's maximum before exp (torch.softmax does)":
            back((naive_sorted.cumsum(dim=-1) - naive_sorted) >= p, naive_order),
        "you removed nothing: every logit is returned unchanged": logits,
        "you kept a token whose more likely tokens already add up to exactly p (a strict > where >= belongs): "
        "the fewest tokens whose mass is p or more stop at the token that brings the mass to p, so drop every "
        "token whose mass before it is >= p": back((cum - sorted_probs) > p),
        "you dropped the token that crosses p (an off-by-one): keep tokens until the kept mass "
        "reaches p, including the one that takes it over p; drop a token only when the tokens "
        "before it already add up to p": back(cum > p),
        "you did not sort: the cumulative sum must run over the tokens from most to least likely, "
        "not in vocabulary order": logits.masked_fill((probs.cumsum(dim=-1) - probs) >= p, -INF),
        "you applied the mask computed in sorted order to the logits in vocabulary order; map it "
        "back with scatter (or index with the sort's indices)": logits.masked_fill((cum - sorted_probs) >= p, -INF),
        "you mapped the sorted mask back with gather, which applies the sort's permutation a second time "
        "instead of undoing it: use scatter(-1, order, mask)": logits.masked_fill((cum - sorted_probs >= p).gather(-1, order), -INF),
        "you sorted in ascending order: the nucleus is made of the most likely tokens":
            back((asc_probs.cumsum(dim=-1) - asc_probs) >= p, asc_order),
        "you kept the tokens that should be removed and removed the nucleus (the comparison is the wrong "
        "way round)": back((cum - sorted_probs) < p),
        "you compared each token's own probability with p: top-p keeps the most likely tokens until their "
        "cumulative (running) sum reaches p, whatever each one's own probability": logits.masked_fill(probs < p, -INF),
        "you kept the tokens whose own probability is below p: top-p keeps the most likely tokens until their "
        "cumulative (running) sum reaches p": logits.masked_fill(probs >= p, -INF),
        "you summed the logits, not the probabilities: take the softmax first, and add up probabilities":
            back((logits.sort(dim=-1, descending=True).values.cumsum(-1) - logits.sort(dim=-1, descending=True).values) >= p),
        "you put 0 instead of -inf on the removed tokens: exp(0) = 1 still gives them probability "
        "after the softmax": expected.masked_fill(expected == -INF, 0.0),
        "you returned probabilities: return the logits with -inf on the removed tokens":
            torch.softmax(expected.double(), dim=-1).to(logits.dtype),
        "you returned the probabilities (0 on the removed tokens): return the logits with -inf on the removed "
        "tokens": torch.softmax(logits, dim=-1).masked_fill(expected == -INF, 0.0),
    }
    if logits.dim() > 1:
        across = torch.softmax(logits.double(), dim=0)
        s, o = across.sort(dim=-1, descending=True)
        variants["you took the softmax over the rows (dim=0) instead of over the tokens (dim=-1)"] = back(
            s.cumsum(-1) - s >= p, o)
        whole = torch.softmax(logits.double().flatten(), dim=0).view_as(probs)  # one softmax over every entry
        s, o = whole.sort(dim=-1, descending=True)
        variants["you took one softmax over the whole batch (flattened) instead of one per row: each row's "
                 "probabilities must add up to 1 on their own (softmax over dim=-1)"] = back(s.cumsum(-1) - s >= p, o)
    return variants


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
    # exact in binary whatever the softmax's form: one of the two reaches p = 0.5 on its own, which of
    # them is kept is the sort's choice, so the two may trade places (ties=True)
    ("two equally likely tokens per row, p = 0.5 exactly", torch.tensor([[0.0, 0.0], [1.25, 1.25]]), 0.5),
]
check_top_p, check_top_p_hidden = _filter_checks(
    "top_p", "top_p_filter", "p", TOP_P_CASES, TOP_P_HIDDEN_CASES, ref.top_p_filter, _top_p_variants,
    "the most likely tokens up to and including the one that takes the mass to p kept unchanged, the rest -inf.",
    ties=True)
