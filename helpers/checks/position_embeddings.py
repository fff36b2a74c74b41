"""Checks for lesson 06 (the TransformerLM), first exercise: the position embeddings.

Shape legend: B batch, T sequence length, C embedding size (emb_dim). Every input is chosen so
that no two of its dimensions are equal. The errors of the student's code are data here, and the
classic mistakes are recognised by their behaviour over all inputs (``transformer_lm_mistakes``).
The reference is not needed: the expected output is x plus the table's first T rows.
"""

from __future__ import annotations

import torch
from torch import nn

from helpers.checks.core import (
    CheckFailed,
    close,
    expect_callable,
    first_mismatch,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import diagnose
from helpers.checks.errors import attempt, outcome, raise_caught, same_behaviour
from helpers.checks.transformer_lm_mistakes import position_variants
from helpers.checks.verdict import WEAK

# Check.__call__ and Check.record run every probe and judge inside torch.random.fork_rng: building
# modules here draws random numbers without moving the notebook's.

# ---------------------------------------------------------------------------------------------
# add_position_embeddings(x, pos_to_embedding): x (B, T, C) or (T, C) -> x + positions 0..T-1

# (seed, batch shape, T, C, max_len, dtype)
POS_CASES = [
    (50, (3,), 5, 4, 16, torch.float64),
    (51, (), 6, 5, 6, torch.float64),  # T == max_len: the last position is max_len - 1
    (52, (), 7, 3, 11, torch.float64),
]
POS_HIDDEN_CASES = [
    (54, (2,), 9, 3, 12, torch.float32),
    (55, (4,), 1, 6, 5, torch.float64),
    (56, (3,), 8, 5, 8, torch.float64),
    (57, (), 5, 2, 7, torch.float32),
    (58, (2,), 70, 3, 80, torch.float64),  # a long sequence: longer than a table built for the lesson's sizes
]


def _pos_inputs(seed, batch, T, C, max_len, dtype):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(max_len, C, generator=g, dtype=torch.float64)  # (max_len, C)
    x = torch.randn(*batch, T, C, generator=g, dtype=torch.float64)  # (B, T, C)
    return table.to(dtype), x.to(dtype)


def _probe_positions(cases):
    def probe(add_position_embeddings) -> dict:
        expect_callable(add_position_embeddings, "add_position_embeddings")
        runs = []
        for seed, batch, T, C, max_len, dtype in cases:
            table, x = _pos_inputs(seed, batch, T, C, max_len, dtype)
            pos_to_embedding = nn.Embedding(max_len, C).to(dtype)
            with torch.no_grad():
                pos_to_embedding.weight.copy_(table)
            x_before = x.clone()
            with torch.no_grad():  # the output, or the error as evidence
                result = attempt(add_position_embeddings, x, pos_to_embedding, sizes=_pos_sizes(batch, T, C))
            runs.append({"result": result.get("out", result), "x_changed": not torch.equal(x_before, x),
                         "table_learns": _table_learns(add_position_embeddings, x_before, pos_to_embedding)})
        return {"runs": runs}

    return probe


def _table_learns(add_position_embeddings, x: torch.Tensor, pos_to_embedding: nn.Embedding) -> bool | None:
    """Probe side: whether a gradient of the output reaches the position table (None: the call
    raised or returned no tensor; the output's own checks say so)."""
    try:
        with torch.enable_grad():
            pos_to_embedding.weight.grad = None
            out = add_position_embeddings(x.clone(), pos_to_embedding)
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                return None if not isinstance(out, torch.Tensor) else False
            out.sum().backward()
    except Exception:  # noqa: BLE001
        return None
    grad = pos_to_embedding.weight.grad
    return grad is not None and bool(grad.abs().sum() > 0)


def _pos_sizes(batch, T, C) -> dict[str, int]:
    return {**({"B": batch[0]} if batch else {}), "T": T, "C": C}


def _rows_added(x: torch.Tensor, got: torch.Tensor, table: torch.Tensor, tol: float) -> str | None:
    """When every vector added to x is one row of the table: which row, at which position."""
    added = (got.double() - x).reshape(-1, x.shape[-2], x.shape[-1])  # (B or 1, T, C)
    found = torch.isclose(added[:, :, None, :], table[None, None], atol=tol, rtol=tol).all(dim=-1)  # (B, T, max_len)
    if not found.any(dim=-1).all():
        return None
    rows = found.double().argmax(dim=-1)  # (B, T): the first row that matches
    shown = [f"{rows[b].tolist()}" for b in range(rows.shape[0])]
    each = f"at positions 0 ... {x.shape[-2] - 1} rows {shown[0]}"
    if len(set(shown)) > 1:
        each = "; ".join(f"in sequence {b}, rows {s}" for b, s in enumerate(shown[:3])) + ("; ..." if len(shown) > 3 else "")
    T = x.shape[-2]
    if T > 1 and (rows == torch.arange(T - 1, -1, -1)).all():
        each += ": the positions run in reverse (counted back from the last token)"
    return (
        f"the vectors your function adds to x are rows of the table, but not rows 0 ... T-1: {each} "
        "(position t needs row t, the same rows for every sequence of the batch)"
    )


def _pos_mismatch(what: str, x, got, expected, table, tol, sizes) -> str:
    """The message for a wrong tensor of the right shape: which table rows were added, or what
    the added part (output - x), or the rest (output - positions), establishes."""
    axes = (*("B" * (x.dim() - 2)), "T", "C")
    rows = _rows_added(x, got, table, tol)
    if rows:
        return f"{what}: {rows}. Evidence: {first_mismatch(expected, got, tol, tol)}."
    kinds = {"atol": tol, "rtol": tol, "axes": axes, "sizes": sizes, "dtype": expected.dtype}
    positions = expected - x  # (B, T, C): each sequence's position embeddings
    for part, want, have in (("the part added to x, output - x", positions, got.double() - x),
                             ("the output minus the position embeddings (which should be x itself)", x,
                              got.double() - positions)):
        rule, message = diagnose(want, have, what="PART", **kinds)
        if rule not in WEAK:
            return f"{what}: {part}: {message.removeprefix('PART: ')}"
    return diagnose(expected, got, what=what, **kinds)[1]


def _judge_positions(cases):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        expected, variants, tolerances, problems = {}, {}, {}, []
        for seed, batch, T, C, max_len, dtype in cases:
            table, x = _pos_inputs(seed, batch, T, C, max_len, dtype)
            x, table = x.double(), table.double()
            expected[seed] = x + table[:T]  # (B, T, C) + (T, C)
            tolerances[seed] = 1e-12 if dtype == torch.float64 else 1e-5
            for label, value in position_variants(x, table).items():
                variants.setdefault(label, {})[seed] = value
        for case, run in zip(cases, found, strict=True):
            seed, batch, T, C, max_len, dtype = case
            what = (
                f"add_position_embeddings(x, pos_to_embedding) for x of shape {(*batch, T, C)} and "
                f"nn.Embedding({max_len}, {C})"
            )
            if run.get("x_changed") is not False:
                raise CheckFailed(
                    f"{what} modified x in place (x += ...): the caller's token embeddings changed. "
                    "Return x + positions, a new tensor."
                )
            if not same_behaviour(run.get("result"), expected[seed], tolerances[seed]):
                problems.append((case, run, what))
            elif run.get("table_learns") is False:
                raise CheckFailed(
                    f"{what}: the values are right, but no gradient reaches pos_to_embedding's table, so training "
                    "would never learn the positions: the rows added to x are not the result of this call's "
                    "lookup pos_to_embedding(positions) in the graph. Were they taken out of it (.data, .detach(), "
                    "torch.no_grad()), or kept from an earlier call and reused?")
        if problems:
            case, run, what = problems[0]
            tol = tolerances[case[0]]
            got, wanted = run.get("result"), expected[case[0]]
            if isinstance(got, torch.Tensor) and got.shape == wanted.shape:
                evidence = first_mismatch(wanted, got, tol, tol)
            else:
                evidence = f"it {outcome(got)}; expected a tensor of shape {tuple(wanted.shape)}"
            for label, by_seed in variants.items():
                if all(same_behaviour(r.get("result"), by_seed[c[0]], tolerances[c[0]]) for c, r in zip(cases, found, strict=True)):
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            raise_caught(what, got)
            if run.get("table_learns") is False and isinstance(got, torch.Tensor) and got.shape == wanted.shape:
                raise CheckFailed(f"{what}: the output is wrong, and no gradient of it reaches pos_to_embedding.weight: "
                                  "it was not computed from the table it was given, in the graph. Was another table "
                                  "used (a new nn.Embedding made inside the function, say), or the table's values taken "
                                  "out of the graph (.data, .detach())? Look the positions up in pos_to_embedding itself. "
                                  f"Evidence: {evidence}.")
            seed, batch, T, C, max_len, dtype = case
            if not isinstance(got, torch.Tensor) or got.shape != wanted.shape:
                table, x = _pos_inputs(seed, batch, T, C, max_len, dtype)
                joined = (isinstance(got, torch.Tensor) and got.shape[:-1] == wanted.shape[:-1]
                          and got.shape[-1] == 2 * C and close(got[..., :C].double(), x.double(), tol, tol))
                raise CheckFailed(
                    diagnose(wanted, got, what=what, atol=tol, rtol=tol, sizes=_pos_sizes(batch, T, C))[1]
                    + (f" Its first C = {C} features are x itself and the last axis is 2C: the position vectors "
                       "were joined to x (torch.cat) instead of added to it." if joined else
                       " The (T, C) position embeddings broadcast over the batch: x + pos works for (T, C) "
                       "and (B, T, C) alike.")
                )
            table, x = _pos_inputs(seed, batch, T, C, max_len, dtype)
            raise CheckFailed(_pos_mismatch(what, x.double(), got, wanted, table.double(), tol, _pos_sizes(batch, T, C)))
        shapes = ", ".join(f"{(*c[1], c[2], c[3])} with max_len {c[4]}" for c in cases)
        return (
            f"add_position_embeddings: x of shape {shapes}: positions 0 ... T-1 (up to T = max_len), "
            "the same for every sequence of the batch, x untouched."
        )

    return judge


check_position_embeddings, check_position_embeddings_hidden = visible_and_hidden(
    "check_position_embeddings", _probe_positions, _judge_positions, POS_CASES, POS_HIDDEN_CASES
)
