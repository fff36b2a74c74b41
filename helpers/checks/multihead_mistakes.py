"""Lesson 04's classic mistakes as arithmetic: the inputs of a case (per-head weights, rounded to the
case's dtype) and what ``MultiHeadAttention`` and ``CausalSelfAttention`` return under each mistake, in
float64, for ``helpers/checks/multihead.py`` to compare with a student's output.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), nh heads (n_heads), hs head
size (head_dim).
"""

from __future__ import annotations

import itertools
import math

import torch

from helpers.checks import causal
from helpers.checks.invariants import with_zero_position

F64 = torch.float64
PROJECTIONS = ("query", "key", "value")

# ---------------------------------------------------------------------------------------------
# Inputs and the arithmetic of mistakes (float64)


#: the hidden cases (by seed: one of MultiHeadAttention's, one of CausalSelfAttention's) whose input
#: has a position of exact zeros (``invariants.with_zero_position``)
ZERO_POSITION_SEEDS = (42, 56)


def case_inputs(seed, batch, T, C, hs, nh, dtype):
    """Per-head weights, the stacked projection and two inputs, all rounded to ``dtype``.

    Query, key and value weights are (nh, hs, C); to_output is (C, nh*hs). The weights are scaled
    so that scores stay moderate (softmax neither flat nor one-hot): every mistake shows.
    """
    g = torch.Generator().manual_seed(seed)
    weights = {name: torch.randn(nh, hs, C, generator=g, dtype=F64) / math.sqrt(C) for name in PROJECTIONS}
    weights["to_output"] = torch.randn(C, nh * hs, generator=g, dtype=F64) / math.sqrt(nh * hs)
    x = torch.randn(*batch, T, C, generator=g, dtype=F64)
    replacement = torch.randn(*batch, T, C, generator=g, dtype=F64)
    if seed in ZERO_POSITION_SEEDS:
        x = with_zero_position(x)
    rounded = {k: v.to(dtype).double() for k, v in weights.items()}
    return rounded, x.to(dtype), replacement.to(dtype)


def stacked(weights, name):
    nh, hs, C = weights[name].shape
    return weights[name].reshape(nh * hs, C)  # (nh*hs, C): head h in rows h*hs:(h+1)*hs


def merge_heads(heads: torch.Tensor) -> torch.Tensor:
    """(..., nh, T, hs) -> (..., T, nh*hs): the heads side by side, in order."""
    return heads.transpose(-3, -2).flatten(-2)


def head_outputs(weights, x) -> torch.Tensor:
    """Every head's correct output, (..., nh, T, hs), in float64."""
    x = x.double().unsqueeze(-3)  # (..., 1, T, C)
    q, k, v = (x @ weights[name].transpose(-2, -1) for name in PROJECTIONS)  # (..., nh, T, hs)
    hs = q.shape[-1]
    return causal.attend(q, k, v, scale=1 / math.sqrt(hs))


def mha_variants(weights, x, nh: int, hs: int, ran=None) -> dict[str, torch.Tensor]:
    """What the loop version returns under each classic mistake (same weights and input); ``ran``: the
    heads whose forward ran (recorded by the probe), which tells one head run for all from one output reused."""
    heads = head_outputs(weights, x)  # (..., nh, T, hs)
    W_o = weights["to_output"]  # (C, nh*hs)
    C = W_o.shape[0]

    def project(cat):
        return cat @ W_o.T

    order = tuple(range(nh))
    variants = {}
    rev = tuple(reversed(order))
    variants[f"the heads are concatenated in reverse order {rev}, not {order}"] = project(merge_heads(heads[..., rev, :, :]))
    for perm in itertools.permutations(order) if nh <= 4 else []:
        if perm not in (order, rev):
            variants[f"the heads are concatenated in the order {perm}, not {order}"] = project(merge_heads(heads[..., perm, :, :]))
    for h in range(nh):
        why = ("one tensor was filled in place for every head (buffer[...] = head(x), or out= / copy_), so the list "
               "holds the same tensor nh times and the last head's write wins (or every head uses the last one's "
               "weights): append each head's own output, head(x)" if h == nh - 1 else
               (f"every head ran, and head {h}'s output went into every block (is one entry of the list of outputs, "
                f"head_outputs[{h}], used for all of them?): concatenate each head's own output" if ran is not None
                and len(ran) == nh else "the heads share one set of weights (call each head of self.heads once, on x)"))
        variants[f"every head's block of the concatenation holds head {h}'s output: {why}"] = project(
            merge_heads(heads[..., [h] * nh, :, :]))
    variants[
        "the heads are interleaved (feature i of head h landed in column i*nh + h, not h*hs + i): "
        "stacking on the last dimension and flattening is not a concatenation"
    ] = project(heads.movedim(-3, -1).flatten(-2))
    batch, T = x.shape[:-2], x.shape[-2]
    cat = heads.new_zeros(*batch, T, nh * hs)  # head h written from column h: the blocks overlap
    for h in range(nh):
        cat[..., h : h + hs] = heads[..., h, :, :]
    variants[f"head h's columns start at h instead of h * head_dim = h * {hs}: the blocks overlap and later heads "
             "overwrite earlier ones"] = project(cat)
    variants[
        "the heads were stacked in front, (nh, ..., T, hs), and reshaped straight to (..., T, nh*hs): "
        "that mixes heads, time steps and batch entries"
    ] = project(heads.movedim(-3, 0).reshape(*batch, T, nh * hs))
    if nh * hs == C:
        variants[
            "you forgot the output projection: this is the plain concatenation of the heads "
            f"(nh*hs = {nh * hs} = emb_dim here, so the shape could not tell); apply self.to_output"
        ] = merge_heads(heads)
        variants[
            "you multiplied by to_output.weight instead of its transpose; call self.to_output(...)"
        ] = merge_heads(heads) @ W_o
    return variants


def csa_variants(weights, x, nh: int, hs: int, got=None) -> dict[str, torch.Tensor]:
    """What the batched version returns under each classic mistake (same weights and input)."""
    xb = x.double() if x.dim() == 3 else x.double().unsqueeze(0)  # (B, T, C)
    B, T, C = xb.shape
    W_o = weights["to_output"]
    Q, K, V = (xb @ stacked(weights, name).T for name in PROJECTIONS)  # (B, T, nh*hs)

    def split_right(t):
        return t.reshape(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)

    def split_view(t):
        return t.reshape(B, nh, T, hs)  # the classic bug: right shape, wrong values

    def split_swapped(t):  # view(B, T, hs, nh).transpose(1, 2): hs "heads" of nh features
        return t.reshape(B, T, hs, nh).transpose(1, 2)

    def split_hs_nh(t):
        return t.reshape(B, T, hs, nh).permute(0, 3, 1, 2)

    def merge_right(o):
        return o.transpose(1, 2).reshape(B, T, nh * hs)

    def merge_view(o):
        return o.reshape(B, T, nh * hs)

    def merge_hs_nh(o):
        return o.permute(0, 2, 3, 1).reshape(B, T, nh * hs)

    def run(split=split_right, merge=merge_right, project=True, shared=False, odd=None, **how):
        q, k, v = (split_view(t) if odd == n else split(t) for n, t in zip(PROJECTIONS, (Q, K, V), strict=True))
        if shared:
            q, k, v = (t[:, :1].expand(B, nh, T, hs) for t in (q, k, v))
        how.setdefault("scale", 1 / math.sqrt(hs))
        out = merge(causal.attend(q, k, v, **how))
        out = out @ W_o.T if project is True else out if project is False else out @ W_o
        return out if x.dim() == 3 else out.squeeze(0)

    view = f".view(B, nh, T, hs) = ({B}, {nh}, {T}, {hs})"
    same = " (= sqrt(emb_dim) here)" if nh * hs == C else ""
    variants = {
        f"you split the heads with a single {view}: the right shape, but it re-reads each row of "
        "(B, T, nh*hs) as if time came first, mixing time steps and heads. View as (B, T, nh, hs), "
        "then .transpose(1, 2)": run(split=split_view),
        "you merged the heads with a reshape straight from (B, nh, T, hs) to (B, T, nh*hs), without "
        ".transpose(1, 2) first: the right shape, but time steps and heads are mixed": run(merge=merge_view),
        f"you split the heads with a single {view} and merged them with a reshape straight back, "
        "with no transpose either way: the right shapes, but every 'head' mixes time steps and heads. "
        "Split as (B, T, nh, hs) then .transpose(1, 2); merge with .transpose(1, 2) then reshape": run(
            split=split_view, merge=merge_view
        ),
        f"you viewed the projections as (B, T, hs, nh) = (B, T, {hs}, {nh}), head_dim and n_heads swapped: that makes "
        f"{hs} heads of {nh} features; view as (B, T, nh, hs), then .transpose(1, 2)": run(split=split_swapped),
        "you split the last dimension as (hs, nh) instead of (nh, hs): head h must use the consecutive "
        "features h*hs:(h+1)*hs, not every nh-th one": run(split=split_hs_nh),
        "you split and merged the last dimension as (hs, nh) instead of (nh, hs): head h must use the "
        "consecutive features h*hs:(h+1)*hs, not every nh-th one": run(split=split_hs_nh, merge=merge_hs_nh),
        f"you divided the scores by sqrt(n_heads * head_dim) = sqrt({nh * hs}){same} instead of "
        f"sqrt(head_dim) = sqrt({hs}): each head's dot products have hs terms": run(scale=1 / math.sqrt(nh * hs)),
        "every head uses head 0's weights (rows 0:hs of query, key and value): the heads share one set "
        "of weights": run(shared=True),
        "you merged the heads as (hs, nh) instead of (nh, hs): the merged row must hold head 0's hs "
        "features, then head 1's, and so on (transpose(1, 2), then reshape)": run(merge=merge_hs_nh),
    }
    for name, plural in zip(PROJECTIONS, ("queries", "keys", "values"), strict=True):
        variants[f"you split the {plural} (only) with a single {view}, which mixes time steps and heads; view "
                 "as (B, T, nh, hs), then .transpose(1, 2), as for the others"] = run(odd=name)
    variants.update(causal.attention_variants(run, C=C, T=T, hs=hs, over=(1, "the heads"), got=got))
    alone = "every position attends only to itself (its output is its own value, projected)"
    if x.dim() == 2:
        alone += (", as if the single sequence (T, C) were T sequences of one token: the batch axis goes "
                  "in front, unsqueeze(0) -> (1, T, C), not unsqueeze(1) -> (T, 1, C)")
    variants[alone] = x.double() @ stacked(weights, "value").T @ W_o.T
    if nh * hs == C:
        variants[
            "you forgot the output projection: this is the merged heads as they are "
            f"(nh*hs = {nh * hs} = emb_dim here, so the shape could not tell); apply self.to_output"
        ] = run(project=False)
        variants[
            "you multiplied by to_output.weight instead of its transpose; call self.to_output(...)"
        ] = run(project="untransposed")
    return variants
