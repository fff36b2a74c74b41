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

import torch

from helpers.checks.core import (
    Check,
    CheckFailed,
    close,
    describe,
    expect_tensor,
    first_mismatch,
    identify,
)
from helpers.reference import multihead as ref

F64, F32 = torch.float64, torch.float32
PROJECTIONS = ("query", "key", "value")

# (seed, batch shape, T, C, hs, nh, dtype): a batch, then a single sequence (T, C)
MHA_CASES = [(40, (2,), 6, 7, 3, 4, F64), (41, (), 5, 9, 2, 3, F64)]
# nh*hs == C; float32; a one-token sequence
MHA_HIDDEN_CASES = [(42, (2,), 5, 12, 4, 3, F64), (43, (4,), 9, 6, 5, 2, F32), (44, (3,), 1, 5, 2, 4, F64)]
CSA_CASES = [(50, (2,), 6, 7, 3, 4, F64), (51, (), 5, 9, 2, 3, F64)]
CSA_HIDDEN_CASES = [(52, (2,), 5, 12, 4, 3, F64), (53, (3,), 8, 10, 6, 2, F32), (54, (4,), 1, 6, 3, 5, F64)]


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


def _changed_at(x: torch.Tensor, replacement: torch.Tensor, j: int) -> torch.Tensor:
    """``x`` with only token ``j`` replaced: a later token must not move an earlier output."""
    changed = x.clone()
    changed[..., j, :] = replacement[..., j, :]
    return changed


def _attend(q, k, v, *, scale, mask="causal", dim=-1, transposed=False):
    """Attention per head: q, k, v (..., nh, T, hs) -> (..., nh, T, hs), under a named mistake."""
    T = q.shape[-2]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = (k @ q.transpose(-2, -1) if transposed else q @ k.transpose(-2, -1)) * scale  # (..., nh, T, T)
    if mask == "causal":
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=dim)
    elif mask == "none":
        weights = torch.softmax(scores, dim=dim)
    elif mask == "after":
        weights = torch.softmax(scores, dim=dim).masked_fill(future, 0.0)
    elif mask == "inverted":
        past = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
        weights = torch.softmax(scores.masked_fill(past, float("-inf")), dim=dim)
    elif mask == "diagonal":
        hidden = future | torch.eye(T, dtype=torch.bool)
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=dim)
    else:
        raise ValueError(mask)
    return weights @ v


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
    return _attend(q, k, v, scale=1 / math.sqrt(hs))


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
    perms = itertools.permutations(order) if nh <= 4 else []
    for perm in perms:
        if perm not in (order, rev):
            variants[f"the heads are concatenated in the order {perm}, not {order}"] = project(
                _merge(heads[..., perm, :, :])
            )
    for h in range(nh):
        variants[
            f"every head's block of the concatenation holds head {h}'s output: the heads share one set "
            "of weights (call each head of self.heads once, on x)"
        ] = project(_merge(heads[..., [h] * nh, :, :]))
    variants[
        "the heads are interleaved (feature i of head h landed in column i*nh + h, not h*hs + i): "
        "stacking on the last dimension and flattening is not a concatenation"
    ] = project(heads.movedim(-3, -1).flatten(-2))
    batch = x.shape[:-2]
    T = x.shape[-2]
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


def csa_variants(weights, x, nh: int, hs: int) -> dict[str, torch.Tensor]:
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

    def run(split=split_right, merge=merge_right, project=True, shared=False, **attend):
        q, k, v = split(Q), split(K), split(V)
        if shared:
            q, k, v = (t[:, :1].expand(B, nh, T, hs) for t in (q, k, v))
        attend.setdefault("scale", 1 / math.sqrt(hs))
        out = merge(_attend(q, k, v, **attend))
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
        f"you divided the scores by sqrt(emb_dim) = sqrt({C}) instead of sqrt(head_dim) = sqrt({hs})": run(
            scale=1 / math.sqrt(C)
        ),
        "you forgot to scale the scores by 1/sqrt(head_dim)": run(scale=1.0),
        f"you divided the scores by head_dim = {hs}, not by its square root": run(scale=1 / hs),
        "you multiplied the scores by sqrt(head_dim) instead of dividing": run(scale=math.sqrt(hs)),
        "you applied the mask after the softmax (zeroing weights leaves rows that no longer sum to 1); "
        "mask the scores, then take the softmax": run(mask="after"),
        "you took the softmax over the queries (dim=-2) instead of over the keys (dim=-1)": run(dim=-2),
        "you forgot the causal mask": run(mask="none"),
        "the mask is inverted: it hides the past and shows the future": run(mask="inverted"),
        "the mask also hides the diagonal: a token may attend to itself": run(mask="diagonal"),
        "you computed k @ q.T instead of q @ k.T (the scores are transposed)": run(transposed=True),
        "every head uses head 0's weights (rows 0:hs of query, key and value): the heads share one set "
        "of weights": run(shared=True),
    }
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
# Probes: run the student's module, turning the errors we can explain into a diagnosis


def _explain(exc: Exception, x: torch.Tensor, kind: str, nh: int, hs: int) -> str | None:
    text = str(exc)
    if "view size is not compatible with input tensor's size and stride" in text:
        return (
            "called .view(...) on a transposed tensor. After .transpose(1, 2) the numbers are no longer "
            "laid out row by row in memory, so view cannot merge (nh, hs) into nh*hs; use "
            ".reshape(B, T, nh * hs) (or .contiguous().view(...))"
        )
    if x.dim() == 2:
        return (
            "works on a batch (B, T, C) but not on a single sequence (T, C); forward must accept both "
            "(e.g. unsqueeze(0) at the start and squeeze(0) at the end)"
        )
    if kind == "mha" and "mat1 and mat2 shapes cannot be multiplied" in text:
        return (
            f"passed to_output a tensor whose last dimension is not nh*hs = {nh * hs}: concatenate the "
            "heads' outputs along the last dimension (torch.cat(..., dim=-1)), then project"
        )
    if kind == "csa" and "is invalid for input of size" in text:
        return (
            "reshaped a tensor to sizes that do not multiply to its number of elements: q, k and v are "
            "(B, T, nh*hs) and split into (B, T, nh, hs); the merged output is (B, T, nh*hs)"
        )
    return None


def _run(module, x, replacement, what: str, kind: str, nh: int, hs: int) -> dict:
    T = x.shape[-2]
    x_before = x.clone()
    try:
        with torch.no_grad():
            out = module(x)
            leaks = [module(_changed_at(x, replacement, j)) for j in range(1, T)]
    except NotImplementedError:
        raise
    except Exception as exc:
        reason = _explain(exc, x, kind, nh, hs)
        if reason is None:
            raise
        raise CheckFailed(f"{what} {reason}. It raised {type(exc).__name__}: {str(exc)[:300]}") from None
    return {"out": out, "leaks": leaks, "x_changed": not torch.equal(x_before, x)}


def _mha_names(nh: int) -> list[str]:
    return sorted([f"heads.{h}.{p}.weight" for h in range(nh) for p in PROJECTIONS] + ["to_output.weight"])


def _load(module, params: dict[str, torch.Tensor], what: str) -> None:
    with torch.no_grad():
        for name, param in module.named_parameters():
            value = params[name]
            if tuple(param.shape) != tuple(value.shape):
                raise CheckFailed(
                    f"{what}: {name} has shape {tuple(param.shape)}, expected {tuple(value.shape)} "
                    "(nn.Linear(in, out) stores a weight of shape (out, in)); keep the given __init__."
                )
            param.copy_(value)


def _probe(kind: str, cases):
    def probe(cls) -> dict:
        if not isinstance(cls, type):
            raise CheckFailed(f"expected the class itself, got {describe(cls)}")
        runs = []
        for seed, batch, T, C, hs, nh, dtype in cases:
            weights, x, replacement = _inputs(seed, batch, T, C, hs, nh, dtype)
            module = cls(C, hs, nh)
            what = f"{cls.__name__}(emb_dim={C}, head_dim={hs}, n_heads={nh}) on x of shape {tuple(x.shape)}"
            names = sorted(name for name, _ in module.named_parameters())
            if kind == "mha":
                expected = _mha_names(nh)
                heads = getattr(module, "heads", None)
                if names != expected and heads is not None and len({id(h) for h in heads}) < len(heads):
                    raise CheckFailed(
                        f"{what}: the heads share one set of weights: self.heads holds the same head "
                        f"object more than once, so it has only {len(names)} parameters ({names}). "
                        "Build a new AttentionHead for each of the n_heads places "
                        "(a list multiplied by n_heads repeats one object)."
                    )
                params = {f"heads.{h}.{p}.weight": weights[p][h] for h in range(nh) for p in PROJECTIONS}
            else:
                expected = sorted([f"{p}.weight" for p in PROJECTIONS] + ["to_output.weight"])
                params = {f"{p}.weight": _stacked(weights, p) for p in PROJECTIONS}
            params["to_output.weight"] = weights["to_output"]
            if names != expected:
                raise CheckFailed(
                    f"{what} should have exactly the parameters {expected} (keep the given __init__: "
                    f"bias-free nn.Linear layers); it has {names}."
                )
            module = module.to(dtype)
            _load(module, {k: v.to(dtype) for k, v in params.items()}, what)
            runs.append(_run(module, x, replacement, what, kind, nh, hs))
        return {"runs": runs}

    return probe


# ---------------------------------------------------------------------------------------------
# Judges


def _find_leak(out: torch.Tensor, leaks, T: int, tol: float, shape, what: str) -> str | None:
    if not isinstance(leaks, list) or len(leaks) != T - 1:
        raise CheckFailed("the check's data is incomplete")
    for j, changed in enumerate(leaks, start=1):
        changed = expect_tensor(changed, shape, what)
        moved = ~torch.isclose(changed[..., :j, :].double(), out[..., :j, :].double(), atol=tol, rtol=tol)
        if moved.any():
            i = int(moved.nonzero()[0][-2])
            return f"changing only token {j} changed the output at position {i}: query {i} attends to key {j}"
    return None


def _judge(kind: str, cases):
    name = "MultiHeadAttention" if kind == "mha" else "CausalSelfAttention"

    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for (seed, batch, T, C, hs, nh, dtype), run in zip(cases, runs, strict=True):
            if not isinstance(run, dict):
                raise CheckFailed("the check's data is incomplete")
            weights, x, replacement = _inputs(seed, batch, T, C, hs, nh, dtype)
            shape = (*batch, T, C)
            what = f"{name}(emb_dim={C}, head_dim={hs}, n_heads={nh}) on x of shape {tuple(x.shape)}"
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} modified its input x in place; a layer must leave x alone.")
            out = run.get("out")
            if isinstance(out, torch.Tensor):
                got = tuple(out.shape)
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
            out = expect_tensor(out, shape, what)
            tol = 1e-9 if dtype == torch.float64 else 1e-4
            leak = _find_leak(out, run.get("leaks"), T, tol, shape, what)
            with torch.no_grad():
                module = ref.MultiHeadAttention(C, hs, nh).double()
                for h, head in enumerate(module.heads):
                    for p in PROJECTIONS:
                        getattr(head, p).weight.copy_(weights[p][h])
                module.to_output.weight.copy_(weights["to_output"])
                if kind == "csa":
                    module = ref.fuse_heads(module)  # the batched reference, same weights
                expected = module(x.double())
            if close(expected, out, tol, tol) and leak is None:
                continue
            variants = (mha_variants if kind == "mha" else csa_variants)(weights, x, nh, hs)
            label = identify(out, variants, tol, tol)
            evidence = first_mismatch(expected, out, tol, tol)
            if label:
                seen = f" ({leak})" if leak else ""
                raise CheckFailed(f"{what}: {label}{seen}. Evidence: {evidence}.")
            if leak:
                raise CheckFailed(f"{what}: {leak}, so the mask lets the future in. Evidence: {evidence}.")
            if torch.isnan(out).any():
                raise CheckFailed(
                    f"{what} returned NaN: a row of scores is entirely -inf (every key hidden from some "
                    f"query) or something divided by zero. Evidence: {evidence}."
                )
            advice = (
                "Call every head of self.heads on x, concatenate their outputs in order along the last "
                "dimension, then apply self.to_output."
                if kind == "mha"
                else "Compare your steps with the plan of Hint 3: split, scale by sqrt(head_dim), mask, "
                "softmax over the keys, merge, project."
            )
            raise CheckFailed(f"{what} differs from the reference. Evidence: {evidence}. {advice}")
        shapes = ", ".join(f"x{(*c[1], c[2], c[3])} with nh={c[5]}, hs={c[4]}" for c in cases)
        return f"{name}: {shapes} match the reference, and no output moves when a later token changes."

    return judge


check_multi_head_attention = Check(
    "check_multi_head_attention", _probe("mha", MHA_CASES), _judge("mha", MHA_CASES)
)
check_multi_head_attention_hidden = Check(
    "check_multi_head_attention_hidden",
    _probe("mha", MHA_HIDDEN_CASES),
    _judge("mha", MHA_HIDDEN_CASES),
    hidden=True,
)
check_causal_self_attention = Check(
    "check_causal_self_attention", _probe("csa", CSA_CASES), _judge("csa", CSA_CASES)
)
check_causal_self_attention_hidden = Check(
    "check_causal_self_attention_hidden",
    _probe("csa", CSA_HIDDEN_CASES),
    _judge("csa", CSA_HIDDEN_CASES),
    hidden=True,
)
