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

from functools import partial

import torch

from helpers.checks import causal, core
from helpers.checks.core import (
    CheckFailed,
    confirmed,
    expect_module_class,
    runs,
    visible_and_hidden,
)
from helpers.checks.multihead_mistakes import (
    F64,
    PROJECTIONS,
    case_inputs,
    csa_variants,
    mha_variants,
    stacked,
)
from helpers.checks.verdict import load_weights, tolerance
from helpers.reference import multihead as ref

F32 = torch.float32

# (seed, batch shape, T, C, hs, nh, dtype): a batch, then a single sequence (T, C)
MHA_CASES = [(40, (2,), 5, 7, 3, 4, F64), (41, (), 5, 9, 2, 3, F64)]
# nh*hs == C; float32; a one-token sequence; a single head
MHA_HIDDEN_CASES = [(42, (2,), 5, 12, 4, 3, F64), (43, (4,), 9, 6, 5, 2, F32), (44, (3,), 1, 5, 2, 4, F64),
                    (45, (2,), 4, 7, 3, 1, F64)]
CSA_CASES = [(50, (2,), 6, 7, 3, 4, F64), (51, (), 5, 9, 2, 3, F64)]
CSA_HIDDEN_CASES = [
    (52, (2,), 5, 12, 4, 3, F64), (53, (3,), 8, 10, 6, 2, F32), (54, (4,), 1, 6, 3, 5, F64), (55, (), 1, 7, 3, 2, F64),
    (56, (1,), 4, 9, 2, 3, F64),  # a batch of one keeps its batch axis
]


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
        alone = _one_head_fed(state) if kind == "mha" and len(ran) == nh > 1 else None
        if alone is not None:
            return (f"{what} passed to_output a tensor whose last dimension is {fed[-1]} = head_dim: every one of the "
                    f"{nh} heads ran, and what reached to_output is head {alone}'s output alone (compared here). Does "
                    "the list keep only the last head's output (an append after the loop, or the list created inside "
                    "the loop, anew for each head)?")
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
        heads = _heads(module)
        if heads and len({id(h) for h in heads}) < len(heads):
            names = sorted(name for name, _ in module.named_parameters())
            raise CheckFailed(
                f"{what}: the heads share one set of weights: self.heads holds the same head "
                f"object more than once, so it has only {len(names)} parameters ({names}). "
                "Build a new AttentionHead for each of the n_heads places "
                "(a list multiplied by n_heads repeats one object)."
            )
        params = {f"heads.{h}.{p}.weight": weights[p][h] for h in range(nh) for p in PROJECTIONS}
    else:
        params = {f"{p}.weight": stacked(weights, p) for p in PROJECTIONS}
    params["to_output.weight"] = weights["to_output"]
    module = module.to(dtype)
    load_weights(module, {k: v.to(dtype) for k, v in params.items()}, what, "keep the given __init__: bias-free nn.Linear layers")
    return module


def _heads(module) -> list:
    """The head modules of self.heads, whether a ModuleList, a ModuleDict (its values) or a plain list."""
    heads = getattr(module, "heads", None)
    heads = heads.values() if isinstance(heads, (torch.nn.ModuleDict, dict)) else heads
    return [h for h in heads or () if isinstance(h, torch.nn.Module)]


def _probe(kind: str, cases):
    def probe(cls) -> dict:
        expect_module_class(cls, "MultiHeadAttention" if kind == "mha" else "CausalSelfAttention")
        runs = []
        for seed, batch, T, C, hs, nh, dtype in cases:
            weights, x, replacement = case_inputs(seed, batch, T, C, hs, nh, dtype)
            what = f"{cls.__name__}(emb_dim={C}, head_dim={hs}, n_heads={nh}) on x of shape {tuple(x.shape)}"
            state = {"module": None, "fed": [], "given": [], "ran": [], "outs": {}}
            with causal.student_case(causal.legend(batch, T=T, C=C, hs=hs, nh=nh), _reason(state, x, what, kind, nh, hs)):
                module = state["module"] = _build(cls, kind, weights, C, hs, nh, dtype, what)
                module.to_output.register_forward_pre_hook(partial(_record_width, state["fed"], state["given"]))
                for h, head in enumerate(_heads(module) if kind == "mha" else ()):
                    head.register_forward_hook(partial(_record_head, h, state["ran"], state["outs"]))  # which heads ran
                ran_before = len(state["ran"])
                runs.append({**causal.run_causal(module, x, replacement), "ran": sorted(set(state["ran"][ran_before:]))})
        return {"runs": runs}

    return probe


def _record_width(fed: list, given: list, _module, args) -> None:
    """A forward pre-hook of to_output: the last dimension of each input it receives (and the input)."""
    if args and isinstance(args[0], torch.Tensor):
        fed.append(args[0].shape[-1])
        given[:] = [args[0].detach()]


def _one_head_fed(state: dict) -> int | None:
    """The head whose output alone is what to_output received, when exactly that happened."""
    given = state["given"][0] if state["given"] else None
    if given is None:
        return None
    for h, out in state["outs"].items():
        if out.shape == given.shape and torch.equal(out, given):
            return h
    return None


def _record_head(h: int, ran: list, outs: dict, _module, _args, out) -> None:
    """A forward hook of head ``h``: that it ran, and its last output."""
    ran.append(h)
    if isinstance(out, torch.Tensor):
        outs[h] = out.detach()


# ---------------------------------------------------------------------------------------------
# Judges


def _judge(kind: str, cases):
    name = "MultiHeadAttention" if kind == "mha" else "CausalSelfAttention"

    def judge(data: dict) -> str:
        found = runs(data, len(cases))

        def variants_of(j: int) -> dict:
            seed, batch, T, C, hs, nh, dtype = cases[j]
            weights, x, _ = case_inputs(seed, batch, T, C, hs, nh, dtype)
            return (mha_variants(weights, x, nh, hs, ran=found[j].get("ran")) if kind == "mha" else
                    csa_variants(weights, x, nh, hs, got=found[j].get("out")))

        def verified(k: int) -> dict:  # named only when the same mistake gives every case what the student's gave
            return confirmed(variants_of(k), [(variants_of(j), found[j].get("out"), tolerance(cases[j][-1]))
                                              for j in range(len(cases)) if j != k])

        for k, ((seed, batch, T, C, hs, nh, dtype), run) in enumerate(zip(cases, found, strict=True)):
            weights, x, _ = case_inputs(seed, batch, T, C, hs, nh, dtype)
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
            if batch == (1,) and got == (T, C):
                raise CheckFailed(
                    f"{what} should return shape {shape}, got {got}: a batch of one lost its batch axis. Remove "
                    "only the axis you added for a single sequence (T, C): squeeze(0) when the input came unbatched, "
                    "not whenever B is 1."
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
                variants = partial(verified, k)
                causal.judge_causal(run, module(xd), variants, diagnosis, reference=module, x=xd, noun=name)
        shapes = ", ".join(f"x{(*c[1], c[2], c[3])} with nh={c[5]}, hs={c[4]}" for c in cases)
        return f"{name}: {shapes} match the reference, and no output moves when a later token changes."

    return judge


check_multi_head_attention, check_multi_head_attention_hidden = visible_and_hidden(
    "check_multi_head_attention", partial(_probe, "mha"), partial(_judge, "mha"), MHA_CASES, MHA_HIDDEN_CASES)
check_causal_self_attention, check_causal_self_attention_hidden = visible_and_hidden(
    "check_causal_self_attention", partial(_probe, "csa"), partial(_judge, "csa"), CSA_CASES, CSA_HIDDEN_CASES)
