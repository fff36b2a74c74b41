"""Checks for lesson 02 (language models without context): BareBonesLM, an embedding table and a
head that share one weight: its structure read back (the weight shared or not, the counts), and its
logits judged by the kit's ``verdict``.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), V vocabulary size (n_vocab).
No two of them are equal in any case.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks.core import (
    INCOMPLETE,
    CheckFailed,
    close,
    describe,
    expect_default_dtype,
    expect_module_class,
    first_mismatch,
    need,
    runs,
    visible_and_hidden,
)
from helpers.checks.errors import raise_caught
from helpers.checks.verdict import judge_output, run_module, tolerance
from helpers.params import num_parameters
from helpers.reference import language_models as ref

# ---------------------------------------------------------------------------------------------
# BareBonesLM(n_vocab, emb_dim, tie_weights=True): ids (..., T) -> logits (..., T, V)

# (seed, V, C, batch shape, T, dtype)
LM_CASES = [(30, 13, 4, (3,), 6, torch.float64)]
# a batch of one and a one-token sequence keep their axes
LM_HIDDEN_CASES = [(31, 17, 6, (), 5, torch.float64), (32, 9, 2, (4,), 3, torch.float32),
                   (33, 11, 4, (1,), 5, torch.float64), (34, 7, 3, (2,), 1, torch.float64)]
LM_STEP_LR = 0.5


def _lm_inputs(seed, V, C, batch, T, dtype):
    g = torch.Generator().manual_seed(seed)
    w_emb = torch.randn(V, C, generator=g, dtype=torch.float64)
    w_head = torch.randn(V, C, generator=g, dtype=torch.float64)
    ids = torch.randint(0, V, (*batch, T), generator=g)
    direction = torch.randn(*batch, T, V, generator=g, dtype=torch.float64)  # d loss / d logits
    return w_emb.to(dtype), w_head.to(dtype), ids, direction.to(dtype)


def _lm_sizes(V, C, batch, T) -> dict[str, int]:
    return {**({"B": batch[0]} if batch else {}), "T": T, "V": V, "C": C}


def _structure(model: nn.Module) -> dict:
    emb = getattr(model, "word_to_embedding", None)
    head = getattr(model, "lm_head", None)
    if not isinstance(emb, nn.Embedding) or not isinstance(head, nn.Linear):
        raise CheckFailed(
            f"{type(model).__name__} should keep self.word_to_embedding (an nn.Embedding) and self.lm_head "
            f"(an nn.Linear); it has word_to_embedding = {describe(emb)}, lm_head = {describe(head)}."
        )
    w_emb, w_head = emb.weight, head.weight
    return {
        "shared": w_head is w_emb,
        "same_storage": bool(w_head.data_ptr() == w_emb.data_ptr()),
        "transposed": bool(w_head.shape == w_emb.shape[::-1] != w_emb.shape),
        "equal_values": bool(w_head.shape == w_emb.shape and torch.equal(w_head.detach(), w_emb.detach())),
        "head_shape": list(w_head.shape),
        "head_bias": head.bias is not None,
        "count": num_parameters(model),
    }


def _probe_lm(cases):
    def probe(lm_class) -> dict:
        expect_module_class(lm_class, "BareBonesLM")
        found = []
        for seed, V, C, batch, T, dtype in cases:
            w_emb, w_head, ids, direction = _lm_inputs(seed, V, C, batch, T, dtype)
            sizes, ids_before = _lm_sizes(V, C, batch, T), ids.clone()
            # tied (the default): structure, then known weights in, logits out, one step on the embedding
            tied = lm_class(V, C)
            expect_default_dtype(tied, f"BareBonesLM({V}, {C})")
            run: dict = {"tied": _structure(tied)}
            tied = tied.to(dtype)
            with torch.no_grad():
                tied.word_to_embedding.weight.copy_(w_emb)
            result = run["tied_logits"] = run_module(tied, ids, sizes, bool(batch))
            run["tied"]["after_forward"] = _structure(tied)["shared"]  # a tie written in forward shows here
            if isinstance(result.get("out"), torch.Tensor) and result["out"].shape == direction.shape:
                # a plain gradient step (torch.optim would import torch._dynamo, which rebinds
                # torch.manual_seed, and the grader would take that for tampering)
                weight = tied.word_to_embedding.weight
                weight.grad = None
                (result["out"] * direction).sum().backward()
                with torch.no_grad():
                    weight -= LM_STEP_LR * weight.grad
                run["after_step"] = {"embedding": weight.detach().clone(), "head": tied.lm_head.weight.detach().clone()}
            # untied: two separate matrices, each loaded with its own known weights
            untied = lm_class(V, C, tie_weights=False)
            run["untied"] = _structure(untied)
            untied = untied.to(dtype)
            if not run["untied"]["shared"] and tuple(untied.lm_head.weight.shape) == (V, C):
                with torch.no_grad():
                    untied.word_to_embedding.weight.copy_(w_emb)
                    untied.lm_head.weight.copy_(w_head)
                run["untied_logits"] = run_module(untied, ids, sizes, bool(batch))
            run["ids_changed"] = not torch.equal(ids, ids_before)
            found.append(run)
        return {"runs": found}

    return probe


def lm_variants(w_emb: torch.Tensor, w_head: torch.Tensor, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Logits under each classic mistake of forward (same weights and ids)."""
    logits = F.embedding(ids, w_emb) @ w_head.T  # (B, T, V)
    return {
        "you returned probabilities (a softmax) instead of logits; return the raw scores, the loss "
        "takes the softmax itself": torch.softmax(logits, dim=-1),
        "you returned log-probabilities (log_softmax) instead of logits; return the raw scores": torch.log_softmax(
            logits, dim=-1
        ),
        "forward uses word_to_embedding.weight as the output layer, so tie_weights=False has no effect; "
        "call self.lm_head": F.embedding(ids, w_emb) @ w_emb.T,
    }


def _judge_structure(what: str, s: dict, V: int, C: int, tied: bool) -> None:
    if s.get("head_bias"):
        raise CheckFailed(f"{what}: lm_head has a bias; keep nn.Linear(emb_dim, n_vocab, bias=False).")
    if tied and not s.get("shared"):
        if s.get("same_storage") and s.get("transposed"):
            problem = (
                f"lm_head.weight is a new nn.Parameter made from the embedding transposed, shape "
                f"{tuple(s.get('head_shape'))}: nn.Linear stores its weight as (out, in) = (V, C), the "
                "table's own shape, so the head takes the table itself, with no .T; and a new Parameter "
                "is a second tensor (num_parameters counts it twice)"
            )
        elif s.get("same_storage"):
            problem = (
                "lm_head.weight shares the embedding's storage (.data) but is a second nn.Parameter: "
                "num_parameters counts it twice, and each gets its own gradient"
            )
        elif s.get("equal_values"):
            problem = (
                "lm_head.weight is a copy of the embedding (equal values, a different tensor), "
                "e.g. nn.Parameter(weight.clone()) or copy_: it drifts apart at the first step "
                "and counts twice"
            )
        elif s.get("after_forward") is True:
            raise CheckFailed(
                f"{what} with tie_weights=True: right after the constructor, lm_head.weight and "
                f"word_to_embedding.weight are two separate matrices (num_parameters = {s.get('count')}, expected "
                f"{V * C}); only once forward has run are they one tensor. The tie is made in forward: make it "
                "in __init__, so that the model counts, saves and hands an optimizer its parameters tied before "
                "its first call (an optimizer built before it keeps training the head's own matrix)."
            )
        else:
            problem = "lm_head.weight and word_to_embedding.weight are two separate matrices: nothing was tied"
        raise CheckFailed(
            f"{what} with tie_weights=True: {problem}. Tie by assigning the embedding's Parameter "
            f"object itself to the head's weight attribute. Evidence: lm_head.weight is "
            f"word_to_embedding.weight is False; num_parameters = {s.get('count')}, expected {V * C}."
        )
    if tied and s.get("count") != V * C:
        raise CheckFailed(f"{what}: num_parameters = {s.get('count')}, expected {V} x {C} = {V * C}.")
    if not tied and s.get("shared"):
        raise CheckFailed(
            f"{what} with tie_weights=False still ties the weights (lm_head.weight is "
            "word_to_embedding.weight); tie only when tie_weights is true."
        )
    if not tied and s.get("head_shape") != [V, C]:
        raise CheckFailed(
            f"{what} with tie_weights=False: lm_head.weight has shape {tuple(s.get('head_shape') or ())}, "
            f"expected ({V}, {C})."
        )
    if not tied and s.get("count") != 2 * V * C:
        raise CheckFailed(
            f"{what} with tie_weights=False: num_parameters = {s.get('count')}, expected "
            f"2 x {V} x {C} = {2 * V * C} (two separate matrices)."
        )


def _judge_logits(what: str, run: dict, model: nn.Module, ids, w_head, sizes: dict, dtype) -> torch.Tensor:
    """Compare the logits of ``run`` with ``model``'s (the reference's, float64); returns them."""
    raise_caught(what, run)
    expected = model(ids)
    out = run.get("out")
    if isinstance(out, torch.Tensor) and out.ndim == expected.ndim and out.shape[:-1] == expected.shape[:-1] \
            and out.shape[-1] != expected.shape[-1]:
        raise CheckFailed(
            f"{what} should return logits of shape {tuple(expected.shape)} (…, V), got {tuple(out.shape)}: "
            "did you return the embeddings without applying lm_head?"
        )
    w_emb = model.word_to_embedding.weight.detach()
    diagnosis = {"what": what, "atol": tolerance(dtype), "rtol": tolerance(dtype), "axes": (*"BT"[-ids.ndim:], "V"),
                 "sizes": sizes, "again": run.get("again"), "alone": run.get("alone"), "dtype": dtype}
    judge_output(run, expected.detach(), diagnosis, variants=lambda: lm_variants(w_emb, w_head, ids), reference=model,
                 inputs=(ids,), dtype_too=True,
                 gradient_hint=" Here the gradient must flow through both uses of the matrix, the lookup and the head.")
    return expected


def _judge_lm(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, V, C, batch, T, dtype = case
            w_emb, w_head, ids, direction = _lm_inputs(*case)
            what, sizes, tol = f"BareBonesLM({V}, {C})", _lm_sizes(V, C, batch, T), tolerance(dtype)
            tied_s, untied_s = need(run.get("tied"), dict), need(run.get("untied"), dict)
            if not tied_s.get("shared") and untied_s.get("shared") and not tied_s.get("after_forward"):
                raise CheckFailed(
                    f"{what}: the flag works the other way round: with tie_weights=True lm_head.weight and "
                    "word_to_embedding.weight are two separate matrices, with tie_weights=False they are one "
                    "tensor. Is the condition that ties them read backwards (`not tie_weights`, or its branches "
                    f"exchanged)? Evidence: num_parameters = {tied_s.get('count')} with tie_weights=True (expected "
                    f"{V * C}) and {untied_s.get('count')} with tie_weights=False (expected {2 * V * C})."
                )
            _judge_structure(what, tied_s, V, C, tied=True)
            _judge_structure(what, untied_s, V, C, tied=False)
            if run.get("ids_changed") is not False:
                raise CheckFailed(f"{what} changed its input ids in place.")
            w64, h64 = w_emb.double(), w_head.double()
            model = ref.BareBonesLM(V, C).double()
            with torch.no_grad():
                model.word_to_embedding.weight.copy_(w64)
            on = f"{what} on ids of shape {tuple(ids.shape)}"
            expected = _judge_logits(on, run.get("tied_logits") or {}, model, ids, w64, sizes, dtype)
            # one step of SGD on the embedding: the tied head must move with it
            (expected * direction.double()).sum().backward()
            stepped = (w64 - LM_STEP_LR * model.word_to_embedding.weight.grad).detach()
            after = need(run.get("after_step"), dict)
            head, emb = (need(after.get(k), torch.Tensor) for k in ("head", "embedding"))
            if not head.shape == emb.shape == (V, C):
                raise CheckFailed(INCOMPLETE)
            if not close(emb, head, 0, 0):
                raise CheckFailed(
                    f"{what}: after one gradient step on word_to_embedding.weight, lm_head.weight did not "
                    f"move with it ({first_mismatch(emb, head, 0, 0)}): they are not one tensor."
                )
            if not close(stepped, emb, tol, tol):
                raise CheckFailed(
                    f"{what}: one gradient step moved the tied weight differently from the reference "
                    f"({first_mismatch(stepped, emb, tol, tol)}): the gradient must flow through both uses "
                    "of the matrix, the lookup and the head."
                )
            need(run.get("untied_logits"), dict)
            untied = ref.BareBonesLM(V, C, tie_weights=False).double()
            with torch.no_grad():
                untied.word_to_embedding.weight.copy_(w64)
                untied.lm_head.weight.copy_(h64)
                _judge_logits(f"{what}, tie_weights=False, on ids of shape {tuple(ids.shape)}",
                              run["untied_logits"], untied, ids, h64, sizes, dtype)
        shapes = ", ".join(f"V={c[1]} C={c[2]} ids{(*c[3], c[4])}" for c in cases)
        return (
            f"BareBonesLM: {shapes}: the tied head is the embedding's own Parameter (V·C parameters, "
            "2·V·C untied), the logits match the reference, and a step on the embedding moves the head."
        )

    return judge


check_tied_lm, check_tied_lm_hidden = visible_and_hidden(
    "check_tied_lm", _probe_lm, _judge_lm, LM_CASES, LM_HIDDEN_CASES
)
