"""Lesson 08's filters: what each one should return, and what each classic mistake returns.

``helpers.checks.sampling_filters`` names a mistake only when its output here is the student's in
every case where it differs from the others'; ``helpers.checks.sample_next`` builds the expected
draws from the two ``*_expected`` functions.

Shape legend: V vocabulary size; ``...`` any leading axes (rows, batches of rows).
"""

from __future__ import annotations

import math

import torch

INF = float("inf")


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


def temperature_variants(logits, t, expected):
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
        "you raised the logits to the power 1 / temperature: that is the formula for probabilities, "
        "p ** (1 / T) renormalised; on logits (their logarithms) it becomes a division, logits / temperature":
            logits ** (1 / t),
    }


def top_k_variants(logits, k, expected):
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


def top_p_variants(logits, p, expected):
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    cum = sorted_probs.cumsum(dim=-1)

    def back(drop_sorted, index=order):
        return logits.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, index, drop_sorted), -INF)

    def unnormalised(weights):  # the running sum of weights that are not divided by their sum
        w_sorted, w_order = weights.sort(dim=-1, descending=True)
        return back((w_sorted.cumsum(dim=-1) - w_sorted) >= p, w_order)

    asc_probs, asc_order = probs.sort(dim=-1)
    naive = logits.exp() / logits.exp().sum(dim=-1, keepdim=True)  # in the logits' dtype, as a student's would be
    naive_sorted, naive_order = naive.sort(dim=-1, descending=True)
    variants = {
        "your softmax overflows: without each row's largest logit subtracted first, exp of a logit near 1e4 is inf "
        "(beyond 88.7 in float32, 709.8 in float64) and inf / inf is NaN, so the cumulative sums are NaN and no "
        "comparison with p holds. Subtract each row's maximum before exp (torch.softmax does)":
            back((naive_sorted.cumsum(dim=-1) - naive_sorted) >= p, naive_order),
        "you removed nothing: every logit is returned unchanged": logits,
        "the mass before each token was made by rolling the running sum one place (roll(1, dims=-1)): roll wraps "
        "around, so the most likely token gets the whole row's sum, about 1, instead of 0, and is dropped. The "
        "mass before a token is cumsum - probs (or the sum shifted with a 0 put in front)":
            back(cum.roll(1, dims=-1) >= p),
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
        "you added up exp(logits) without dividing them by their sum: those are not probabilities (they do not add "
        "up to 1), so the running sum reaches p at another token. Take the softmax (each exp divided by its row's "
        "sum) before adding up": unnormalised(logits.double().exp()),
        "you added up exp(logits - the row's maximum) without dividing them by their sum: those are not "
        "probabilities (they do not add up to 1), so the running sum reaches p at another token. Divide by the "
        "row's sum (torch.softmax does both)": unnormalised((logits.double() - logits.double().amax(-1, keepdim=True)).exp()),
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
        down = sorted_probs.cumsum(dim=0)  # each sorted column summed down the rows
        variants["you took the running sum over the rows (cumsum(dim=0)) instead of along each sorted row "
                 "(cumsum(dim=-1)): a token's mass before it must come from its own row"] = back(down - sorted_probs >= p)
        whole = torch.softmax(logits.double().flatten(), dim=0).view_as(probs)  # one softmax over every entry
        s, o = whole.sort(dim=-1, descending=True)
        variants["you took one softmax over the whole batch (flattened) instead of one per row: each row's "
                 "probabilities must add up to 1 on their own (softmax over dim=-1)"] = back(s.cumsum(-1) - s >= p, o)
    return variants
