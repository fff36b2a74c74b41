"""Checks for lesson 04 (attention modules): multi-head attention as a loop over heads, and the
batched ``CausalSelfAttention`` that computes every head in the same matrix products.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), nh heads (n_heads),
hs head size (head_dim). In every case no two of B, T, C, nh, hs are equal, and nh*hs differs
from C except in the hidden cases that set nh*hs == C on purpose: there a forgotten output
projection keeps the right shape and has to be recognised by its values.

Weights are loaded per head (``heads.{h}.query.weight``...) into ``MultiHeadAttention`` and as
stacked ``(nh*hs, C)`` matrices into ``CausalSelfAttention``, head h in rows h*hs:(h+1)*hs: the
same numbers, so both modules must compute the same function.
"""

from __future__ import annotations

import itertools
import math
from functools import partial

import torch

from helpers.checks import causal, core
from helpers.checks.core import CheckFailed, expect_module_class, runs, visible_and_hidden
from helpers.checks.verdict import load_weights, tolerance
from helpers.reference import multihead as ref

F64, F32 = torch.float64, torch.float32
PROJECTIONS = ("query", "key", "value")

# (seed, batch shape, T, C, hs, nh, dtype): a batch, then a single sequence (T, C)
MHA_CASES = [(40, (2,), 5, 7, 3, 4, F64), (41, (), 5, 9, 2, 3, F64)]
# nh*hs == C; float32; a one-token sequence
MHA_HIDDEN_CASES = [(42, (2,), 5, 12, 4, 3, F64), (43, (4,), 9, 6, 5, 2, F32), (44, (3,), 1, 5, 2, 4, F64)]
CSA_CASES = [(50, (2,), 6, 7, 3, 4, F64), (51, (), 5, 9, 2, 3, F64)]
CSA_HIDDEN_CASES = [
    (52, (2,), 5, 12, 4, 3, F64), (53, (3,), 8, 10, 6, 2, F32), (54, (4,), 1, 6, 3, 5, F64), (55, (), 1, 7, 3, 2, F64),
]


# ---------------------------------------------------------------------------------------------
# Inputs and the arithmetic of mistakes (float64)


def _inputs(seed, batch, T, C, hs, nh, dtype):
    """Per-head weights, the stacked projection and two inputs, all rounded to ``dtype``.

    Query, key and value weights are (nh, hs, C); to_output is (C, nh*hs). The weights are scaled
    so that scores stay moderate (softmax neither flat nor one-hot): every mistake shows.
    """
    g = torch.Generator().manual_seed(seed)
    weights = {name: torch.randn(nh, hs, C, generator=g, dtype=F64) / math.sqrt(C) for name in PROJECTIONS}
    weights["to_output"] = torch.randn(C, nh * hs, generator=g, dtype=F64) / math.sqrt(nh * hs)
    x = torch.randn(*batch, T, C, generator=g, dtype=F64)
    replacement = torch.randn(*batch, T, C, generator=g, dtype=F64)
    rounded = {k: v.to(dtype).double() for k, v in weights.items()}
    return rounded, x.to(dtype), replacement.to(dtype)


def _stacked(weights, name):
    nh, hs, C = weights[name].shape
    return weights[name].reshape(nh * hs, C)  # (nh*hs, C): head h in rows h*hs:(h+1)*hs


def _merge(heads: torch.Tensor) -> torch.Tensor:
    """(..., nh, T, hs) -> (..., T, nh*hs): the heads side by side, in order."""
    return heads.transpose(-3, -2).flatten(-2)


def head_outputs(weights, x) -> torch.Tensor:
    """Every head's correct output, (..., nh, T, hs), in float64."""
    x = x.double().unsqueeze(-3)  # (..., 1, T, C)
    q, k, v = (x @ weights[name].transpose(-2, -1) for name in PROJECTIONS)  # (..., nh, T, hs)
    hs = q.shape[-1]
    return causal.attend(q, k, v, scale=1 / math.sqrt(hs))


def mha_variants(weights, x, nh: int, hs: int) -> dict[str, torch.Tensor]:
    """What the loop version returns under each classic mistake (same weights and input)."""
    heads = head_outputs(weights, x)  # (..., nh, T, hs)
    W_o = weights["to_output"]  # (C, nh*hs)
    C = W_o.shape[0]

    def project(cat):
        return cat @ W_o.T

    order = tuple(range(nh))
    variants = {}
    rev = tuple(reversed(order))
    variants[f"the heads are concatenated in reverse order {rev}, not {order}"] = project(_merge(heads[..., rev, :, :]))
    for perm in itertools.permutations(order) if nh <= 4 else []:
        if perm not in (order, rev):
            variants[f"the heads are concatenated in the order {perm}, not {order}"] = project(_merge(heads[..., perm, :, :]))
    for h in range(nh):
        why = ("one tensor was filled in place for every head (buffer[...] = head(x), or out= / copy_), so the list "
               "holds the same tensor nh times and the last head's write wins (or every head uses the last one's "
               "weights): append each head's own output, head(x)" if h == nh - 1 else
               "the heads share one set of weights (call each head of self.heads once, on x)")
        variants[f"every head's block of the concatenation holds head {h}'s output: {why}"] = project(
            _merge(heads[..., [h] * nh, :, :]))
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
        ] = _merge(heads)
        variants[
            "you multiplied by to_output.weight instead of its transpose; call self.to_output(...)"
        ] = _merge(heads) @ W_o
    return variants


def csa_variants(weights, x, nh: int, hs: int, got=None) -> dict[str, torch.Tensor]:
    """What the batched version returns under each classic mistake (same weights and input)."""
    xb = x.double() if x.dim() == 3 else x.double().unsqueeze(0)  # (B, T, C)
    B, T, C = xb.shape
    W_o = weights["to_output"]
    Q, K, V = (xb @ _stacked(weights, name).T for name in PROJECTIONS)  # (B, T, nh*hs)

    def split_right(t):
        return t.reshape(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)

    def split_view(t):
        return t.reshape(B, nh, T, hs)  # the classic bug: right shape, wrong values

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
    variants[alone] = x.double() @ _stacked(weights, "value").T @ W_o.T
    if nh * hs == C:
        variants[
            "you forgot the output projection: this is the merged heads as they are "
            f"(nh*hs = {nh * hs} = emb_dim here, so the shape could not tell); apply self.to_output"
        ] = run(project=False)
        variants[
            "you multiplied by to_output.weight instead of its transpose; call self.to_output(...)"
        ] = run(project="untransposed")
    return variants


# ---------------------------------------------------------------------------------------------
# Probes: run the student's module; an error it raises is explained in the case's legend, with
# the mistake it establishes where it establishes one


def _reason(state: dict, x, what: str, kind: str, nh: int, hs: int):
    def reason(exc: Exception) -> str | None:
        text, module, fed = str(exc), state["module"], state["fed"]
        if "view size is not compatible with input tensor's size and stride" in text:
            return (f"{what} called .view(...) on a transposed tensor. After .transpose(1, 2) the numbers are no "
                    "longer laid out row by row in memory, so view cannot merge (nh, hs) into nh*hs; use "
                    ".reshape(B, T, nh * hs) (or .contiguous().view(...)).")
        if x.dim() == 2 and module is not None:
            try:  # the same sequence with a batch axis of 1 in front: does that run?
                with torch.no_grad():
                    module(x.unsqueeze(0))
            except Exception:  # noqa: BLE001 - it fails either way: not a matter of the batch axis
                pass
            else:
                return (f"{what} raises on a single sequence (T, C), though the same sequence as a batch of one "
                        "(1, T, C) runs; forward must accept both (e.g. unsqueeze(0) at the start and squeeze(0) "
                        "at the end).")
        ran = sorted(set(state["ran"]))
        if kind == "mha" and fed and fed[-1] != nh * hs and ran and len(ran) < nh and fed[-1] == len(ran) * hs:
            return (f"{what} passed to_output a tensor whose last dimension is {fed[-1]} = {len(ran)} × head_dim: "
                    f"only {len(ran)} of the {nh} heads ran (called: {ran}; never: "
                    f"{[h for h in range(nh) if h not in ran]}): run every head of self.heads on x, then concatenate.")
        if kind == "mha" and fed and fed[-1] != nh * hs:
            return (
                f"{what} passed to_output a tensor whose last dimension is {fed[-1]}, not nh*hs = {nh * hs}: "
                "concatenate the heads' outputs along the last dimension (torch.cat(..., dim=-1)), then project."
            )
        if kind == "csa" and "is invalid for input of size" in text:
            return (
                f"{what} reshaped a tensor to sizes that do not multiply to its number of elements: q, k and v "
                "are (B, T, nh*hs) and split into (B, T, nh, hs); the merged output is (B, T, nh*hs)."
            )
        return None

    return reason


def _build(cls, kind, weights, C, hs, nh, dtype, what):
    """The student's module with the case's weights loaded (its parameters' names checked)."""
    module = cls(C, hs, nh)
    core.expect_default_dtype(module, what)
    if kind == "mha":
        heads = getattr(module, "heads", None)
        if heads is not None and len({id(h) for h in heads}) < len(heads):
            names = sorted(name for name, _ in module.named_parameters())
            raise CheckFailed(
                f"{what}: the heads share one set of weights: self.heads holds the same head "
                f"object more than once, so it has only {len(names)} parameters ({names}). "
                "Build a new AttentionHead for each of the n_heads places "
                "(a list multiplied by n_heads repeats one object)."
            )
        params = {f"heads.{h}.{p}.weight": weights[p][h] for h in range(nh) for p in PROJECTIONS}
    else:
        params = {f"{p}.weight": _stacked(weights, p) for p in PROJECTIONS}
    params["to_output.weight"] = weights["to_output"]
    module = module.to(dtype)
    load_weights(module, {k: v.to(dtype) for k, v in params.items()}, what, "keep the given __init__: bias-free nn.Linear layers")
    return module


def _probe(kind: str, cases):
    def probe(cls) -> dict:
        expect_module_class(cls, "MultiHeadAttention" if kind == "mha" else "CausalSelfAttention")
        runs = []
        for seed, batch, T, C, hs, nh, dtype in cases:
            weights, x, replacement = _inputs(seed, batch, T, C, hs, nh, dtype)
            what = f"{cls.__name__}(emb_dim={C}, head_dim={hs}, n_heads={nh}) on x of shape {tuple(x.shape)}"
            state = {"module": None, "fed": [], "ran": []}
            with causal.student_case(causal.legend(batch, T=T, C=C, hs=hs, nh=nh), _reason(state, x, what, kind, nh, hs)):
                module = state["module"] = _build(cls, kind, weights, C, hs, nh, dtype, what)
                module.to_output.register_forward_pre_hook(partial(_record_width, state["fed"]))
                for h, head in enumerate((getattr(module, "heads", None) or ()) if kind == "mha" else ()):
                    head.register_forward_hook(lambda *_, h=h, ran=state["ran"]: ran.append(h))  # which heads forward calls
                runs.append(causal.run_causal(module, x, replacement))
        return {"runs": runs}

    return probe


def _record_width(fed: list, _module, args) -> None:
    """A forward pre-hook of to_output: the last dimension of each input it receives."""
    if args and isinstance(args[0], torch.Tensor):
        fed.append(args[0].shape[-1])


# ---------------------------------------------------------------------------------------------
# Judges


def _judge(kind: str, cases):
    name = "MultiHeadAttention" if kind == "mha" else "CausalSelfAttention"

    def judge(data: dict) -> str:
        for (seed, batch, T, C, hs, nh, dtype), run in zip(cases, runs(data, len(cases)), strict=True):
            weights, x, _ = _inputs(seed, batch, T, C, hs, nh, dtype)
            shape = (*batch, T, C)
            what = f"{name}(emb_dim={C}, head_dim={hs}, n_heads={nh}) on x of shape {tuple(x.shape)}"
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} modified its input x in place; a layer must leave x alone.")
            out = run.get("out")
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else None
            if got == (*batch, T, nh * hs) and nh * hs != C:
                raise CheckFailed(
                    f"{what} should return shape {shape} (…, T, emb_dim), got {got} (…, T, nh*hs): "
                    "you forgot the output projection self.to_output, which maps the merged heads "
                    "back to emb_dim."
                )
            if got == (*batch, T, hs) and hs != C:
                raise CheckFailed(
                    f"{what} should return shape {shape}, got {got} (…, T, head_dim): the heads were "
                    "combined without concatenating them, or a single head's output came back."
                )
            if not batch and got == (1, T, C):
                raise CheckFailed(
                    f"{what} should return shape {shape}, got {got}: for a single sequence (T, C), "
                    "remove the batch dimension you added (squeeze(0))."
                )
            with torch.no_grad():
                module = ref.MultiHeadAttention(C, hs, nh).double()
                for h, head in enumerate(module.heads):
                    for p in PROJECTIONS:
                        getattr(head, p).weight.copy_(weights[p][h])
                module.to_output.weight.copy_(weights["to_output"])
                if kind == "csa":
                    module = ref.fuse_heads(module)  # the batched reference, same weights
                xd, tol = x.double(), tolerance(dtype)
                diagnosis = {"what": what, "atol": tol, "rtol": tol, "axes": (*("B" * len(batch)), "T", "C"),
                             "sizes": causal.legend(batch, T=T, C=C, hs=hs, nh=nh), "again": run.get("again"),
                             "alone": run.get("alone"), "dtype": dtype}
                variants = (partial(mha_variants, weights, x, nh, hs) if kind == "mha" else
                            partial(csa_variants, weights, x, nh, hs, got=run.get("out")))
                causal.judge_causal(run, module(xd), variants, diagnosis, reference=module, x=xd, noun=name)
        shapes = ", ".join(f"x{(*c[1], c[2], c[3])} with nh={c[5]}, hs={c[4]}" for c in cases)
        return f"{name}: {shapes} match the reference, and no output moves when a later token changes."

    return judge


check_multi_head_attention, check_multi_head_attention_hidden = visible_and_hidden(
    "check_multi_head_attention", partial(_probe, "mha"), partial(_judge, "mha"), MHA_CASES, MHA_HIDDEN_CASES)
check_causal_self_attention, check_causal_self_attention_hidden = visible_and_hidden(
    "check_causal_self_attention", partial(_probe, "csa"), partial(_judge, "csa"), CSA_CASES, CSA_HIDDEN_CASES)
