"""Checks for lesson 01 (tokens and embeddings): shift_for_next_token(ids), the inputs and, one
position later, the targets a language model learns to predict.

Shape legend: B batch, T sequence length. Batched inputs use a B different from T, so that slicing
the wrong dimension shows.
"""

from __future__ import annotations

import torch

from helpers.checks.core import (
    CheckFailed,
    describe,
    expect_callable,
    first_mismatch,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import diagnose
from helpers.checks.errors import attempt, raise_caught
from helpers.checks.tokens import VOCAB
from helpers.reference import tokens as ref

# ---------------------------------------------------------------------------------------------
# shift_for_next_token(ids) -> (inputs, targets)

# (seed, batch shape, T): one sequence, then a batch whose B differs from T
SHIFT_CASES = [(20, (), 9), (21, (3,), 7)]
SHIFT_HIDDEN_CASES = [(22, (), 2), (23, (5,), 11), (24, (2,), 3), (25, (1,), 6)]  # a batch of one keeps its axis


def _shift_ids(seed: int, batch: tuple, T: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (*batch, 1), generator=g)
    steps = torch.randint(1, VOCAB, (*batch, T - 1), generator=g)  # never 0: neighbours differ
    return torch.cat([start, start + steps.cumsum(dim=-1)], dim=-1) % VOCAB  # (*batch, T)


def _shift_sizes(batch: tuple, T: int) -> dict[str, int]:
    """The sizes of the outputs: T is one less than the ids' length."""
    return {**({"B": batch[0]} if batch else {}), "T": T - 1}


def _probe_shift(cases):
    def probe(shift) -> dict:
        expect_callable(shift, "shift_for_next_token")
        found = []
        for seed, batch, T in cases:
            ids = _shift_ids(seed, batch, T)
            before = ids.clone()
            run = attempt(shift, ids, sizes=_shift_sizes(batch, T))
            run["ids_changed"] = not torch.equal(before, ids)
            if isinstance(run.get("out"), tuple):
                run["out"] = list(run["out"])
            found.append(run)
        return {"runs": found}

    return probe


def shift_variants(ids: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) under each classic mistake."""
    return {
        "inputs and targets are swapped: return (inputs, targets), inputs first, and the targets "
        "are the ids that come *after* the inputs": (ids[..., 1:], ids[..., :-1]),
        "the targets equal the inputs: a model trained on that would learn to copy its input; "
        "the targets must be the ids one step later": (ids[..., :-1], ids[..., :-1]),
        "you used torch.roll: the last target wraps around to the first id, which does not follow "
        "the last one. Drop the last input and the first target instead": (ids, torch.roll(ids, -1, dims=-1)),
        "you shifted by two positions": (ids[..., :-2], ids[..., 2:]),
        "the targets are the inputs plus one: the target is the id of the next token *in the text*, "
        "ids[..., t + 1], not the next number": (ids[..., :-1], ids[..., :-1] + 1),
    }


def _judge_shift(cases):
    def judge(data: dict) -> str:
        for (seed, batch, T), run in zip(cases, runs(data, len(cases)), strict=True):
            ids = _shift_ids(seed, batch, T)
            what = f"shift_for_next_token(ids of shape {tuple(ids.shape)})"
            raise_caught(what, run)
            if run.get("ids_changed") is not False:
                raise CheckFailed(f"{what} changed ids in place; leave the input alone.")
            out = run.get("out")
            if not isinstance(out, list) or len(out) != 2:
                raise CheckFailed(f"{what} should return a pair (inputs, targets), got {describe(out)}.")
            got_in, got_tg = out
            if not isinstance(got_in, torch.Tensor) or not isinstance(got_tg, torch.Tensor):
                raise CheckFailed(
                    f"{what} should return two tensors, got {describe(got_in)} and {describe(got_tg)}."
                )
            exp_in, exp_tg = ref.shift_for_next_token(ids)
            shape = (*batch, T - 1)
            for label, (v_in, v_tg) in shift_variants(ids).items():
                if got_in.shape == got_tg.shape and (v_in.shape, v_tg.shape) == (got_in.shape, got_tg.shape) \
                        and torch.equal(v_in, got_in) and torch.equal(v_tg, got_tg):
                    if got_tg.shape == exp_tg.shape:
                        evidence = f"targets: {first_mismatch(exp_tg, got_tg, 0, 0)}"
                    else:
                        evidence = f"targets of shape {tuple(got_tg.shape)}, expected {tuple(exp_tg.shape)}"
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            if batch and got_in.shape == (batch[0] - 1, T) and torch.equal(got_in, ids[:-1]):
                raise CheckFailed(
                    f"{what}: inputs have shape {tuple(got_in.shape)}: you cut the batch dimension (the "
                    f"first), not time (the last). Slice the last dimension: ids[..., a:b] works for "
                    "(T,) and (B, T) alike."
                )
            for name, got, expected in (("inputs", got_in, exp_in), ("targets", got_tg, exp_tg)):
                if got.shape[:-1] == shape[:-1] and got.ndim == len(shape) and got.shape[-1] != shape[-1]:
                    raise CheckFailed(
                        f"{what}: {name} should have shape {shape} (one fewer position than ids), "
                        f"got {tuple(got.shape)}."
                    )
                if got.dtype != ids.dtype:
                    raise CheckFailed(f"{what}: {name} are {got.dtype}; keep the ids' dtype {ids.dtype}.")
                if tuple(got.shape) != shape or not torch.equal(got, expected):
                    rule, message = diagnose(expected, got, what=f"{what}: the {name}", atol=0, rtol=0,
                                             axes=("B", "T")[-len(shape):], sizes=_shift_sizes(batch, T))
                    hint = " (targets[..., t] must be ids[..., t + 1])" if name == "targets" else ""
                    raise CheckFailed(f"{message}{hint}")
        shapes = ", ".join(str((*c[1], c[2])) for c in cases)
        return f"shift_for_next_token: ids of shape {shapes} give inputs ids[..., :-1] and targets ids[..., 1:]."

    return judge


check_shift, check_shift_hidden = visible_and_hidden(
    "check_shift", _probe_shift, _judge_shift, SHIFT_CASES, SHIFT_HIDDEN_CASES
)
