"""Checks for lesson 01 (tokens and embeddings): shift_for_next_token(ids), the inputs and, one
position later, the targets a language model learns to predict.

Shape legend: B batch, T sequence length. Batched inputs use a B different from T, so that slicing
the wrong dimension shows.
"""

from __future__ import annotations

import torch

from helpers.checks.core import describe, first_mismatch
from helpers.checks.diagnose import diagnose
from helpers.checks.functions import Spec, function_checks, on_copy
from helpers.checks.tokens import VOCAB
from helpers.reference import tokens as ref

# ---------------------------------------------------------------------------------------------
# shift_for_next_token(ids) -> (inputs, targets)

# (seed, batch shape, T): one sequence, then a batch whose B differs from T
SHIFT_CASES = [(20, (), 9), (21, (3,), 7)]
# a batch of one keeps its axis; a window of one id has no pair at all
SHIFT_HIDDEN_CASES = [(22, (), 2), (23, (5,), 11), (24, (2,), 3), (25, (1,), 6), (26, (), 1)]


def _shift_ids(seed: int, batch: tuple, T: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (*batch, 1), generator=g)
    steps = torch.randint(1, VOCAB, (*batch, T - 1), generator=g)  # never 0: neighbours differ
    return torch.cat([start, start + steps.cumsum(dim=-1)], dim=-1) % VOCAB  # (*batch, T)


def _shift_sizes(batch: tuple, T: int) -> dict[str, int]:
    """The sizes of the outputs: T is one less than the ids' length."""
    return {**({"B": batch[0]} if batch else {}), "T": T - 1}


def shift_variants(ids: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) under each classic mistake."""
    return {
        "inputs and targets are swapped: return (inputs, targets), inputs first, and the targets "
        "are the ids that come *after* the inputs": (ids[..., 1:], ids[..., :-1]),
        "the targets equal the inputs: a model trained on that would learn to copy its input; "
        "the targets must be the ids one step later": (ids[..., :-1], ids[..., :-1]),
        "you used torch.roll: the last target wraps around to the first id, which does not follow "
        "the last one. Drop the last input and the first target instead": (ids, torch.roll(ids, -1, dims=-1)),
        "the targets were made with roll(1): a positive shift moves every id one place *later* (and the last "
        "wraps around to the front), so each target is the id before its input's: roll(-1) moves them earlier; "
        "or slice, ids[..., 1:]": (ids[..., :-1], torch.roll(ids, 1, dims=-1)[..., :-1]),
        "you shifted by two positions": (ids[..., :-2], ids[..., 2:]),
        "the targets are the inputs plus one: the target is the id of the next token *in the text*, "
        "ids[..., t + 1], not the next number": (ids[..., :-1], ids[..., :-1] + 1),
    }


def _pair(what, case, out, run) -> str | None:
    """Form: the output must be a pair of tensors (a tuple arrives as a list)."""
    if not isinstance(out, list) or len(out) != 2:
        return f"{what} should return a pair (inputs, targets), got {describe(out)}."
    if not isinstance(out[0], torch.Tensor) or not isinstance(out[1], torch.Tensor):
        return f"{what} should return two tensors, got {describe(out[0])} and {describe(out[1])}."
    return None


def _dtype_kept(what, case, got, expected, run) -> str | None:
    """Right values: the ids must also keep their dtype."""
    for name, tensor in zip(("inputs", "targets"), got, strict=True):
        if tensor.dtype != expected[0].dtype:
            return f"{what}: {name} are {tensor.dtype}; keep the ids' dtype {expected[0].dtype}."
    return None


def _targets_evidence(case, expected, got) -> str:
    exp_tg, got_tg = expected[1], got[1]
    if got_tg.shape == exp_tg.shape:
        return f"targets: {first_mismatch(exp_tg, got_tg, 0, 0)}"
    return f"targets of shape {tuple(got_tg.shape)}, expected {tuple(exp_tg.shape)}"


def _ends_cut(name: str, mine: torch.Tensor, wanted: torch.Tensor) -> str:
    """When a too-short result is the right one with ids cut off at one end: which end, and how many."""
    short = wanted.shape[-1] - mine.shape[-1]
    if short <= 0 or mine.shape[-1] == 0:
        return ""
    ids = "the last id" if short == 1 else f"the last {short} ids"
    if torch.equal(mine, wanted[..., :-short]):
        return (f" Your {name} are the right ones without {ids}: a slice's end is not included, so ids[..., a:b] "
                "stops at b - 1 (ids[..., 1:] reaches the end).")
    if torch.equal(mine, wanted[..., short:]):
        return f" Your {name} are the right ones without {ids.replace('last', 'first')}: does the slice start too late?"
    return ""


def _shift_wrong(what, case, got, expected, run) -> str:
    """No mistake of the table: a batch cut instead of time, a shape, a dtype, or the diagnosis."""
    seed, batch, T = case
    ids, shape, (got_in, _) = _shift_ids(seed, batch, T), (*batch, T - 1), got
    if batch and got_in.shape == (batch[0] - 1, T) and torch.equal(got_in, ids[:-1]):
        return (f"{what}: inputs have shape {tuple(got_in.shape)}: you cut the batch dimension (the first), not "
                "time (the last). Slice the last dimension: ids[..., a:b] works for (T,) and (B, T) alike.")
    for name, mine, wanted in zip(("inputs", "targets"), got, expected, strict=True):
        if mine.shape[:-1] == shape[:-1] and mine.ndim == len(shape) and mine.shape[-1] != shape[-1]:
            itself = (f" Your {name} are ids itself, all {T} of its positions: the slice kept the whole window (its "
                      "bound at or past the window's end, or a start of -0, which is 0). A window of T + 1 ids gives T "
                      "inputs and T targets" + (", so one id gives two empty (0,) tensors." if T == 1 else ".")
                      if mine.shape == ids.shape and torch.equal(mine, ids) else "")
            return (f"{what}: {name} should have shape {shape} (one fewer position than ids), got {tuple(mine.shape)}."
                    + (itself or _ends_cut(name, mine, wanted)))
        if mine.dtype != ids.dtype:
            return f"{what}: {name} are {mine.dtype}; keep the ids' dtype {ids.dtype}."
        if tuple(mine.shape) != shape or not torch.equal(mine, wanted):
            rule, message = diagnose(wanted, mine, what=f"{what}: the {name}", atol=0, rtol=0,
                                     axes=("B", "T")[-len(shape):], sizes=_shift_sizes(batch, T))
            return f"{message}{' (targets[..., t] must be ids[..., t + 1])' if name == 'targets' else ''}"
    return f"{what}: wrong output."


SHIFT = Spec(
    label="shift_for_next_token",
    call=lambda shift, case: on_copy(shift, _shift_ids(*case)),
    sizes=lambda case: _shift_sizes(case[1], case[2]),
    expected=lambda case: ref.shift_for_next_token(_shift_ids(*case)),
    variants=lambda case: shift_variants(_shift_ids(*case)),
    arguments=lambda case: f"ids of shape {(*case[1], case[2])}",
    changed="changed ids in place; leave the input alone.",
    form=_pair, right=_dtype_kept, wrong=_shift_wrong, evidence=_targets_evidence,
    summary=lambda cases: "shift_for_next_token: ids of shape " + ", ".join(str((*c[1], c[2])) for c in cases)
    + " give inputs ids[..., :-1] and targets ids[..., 1:].",
)
check_shift, check_shift_hidden = function_checks("check_shift", SHIFT, SHIFT_CASES, SHIFT_HIDDEN_CASES)
