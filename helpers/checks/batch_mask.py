"""Checks for lesson 09 (fast generation): a batch of prompts of different lengths, left-padded.

``batch_mask_and_positions`` is compared entry by entry on left-padded batches, then used by the
course's batch generation: every prompt of the batch must get the tokens it gets alone.

Shape legend: B batch, T_total positions so far (cached and new), T_new new positions, T_past
cached positions (T_total - T_new), T0 prompt length (the longest prompt's).
"""

from __future__ import annotations

import torch

from helpers.checks.core import CheckFailed, describe, expect_callable, runs, visible_and_hidden
from helpers.checks.diagnose import case_sizes
from helpers.checks.errors import caught, raise_caught
from helpers.checks.kv_cache_known import causal_with_past, known_good_forward_cached, small_model
from helpers.reference import sampling

# ---------------------------------------------------------------------------------------------
# batch_mask_and_positions(real, T_new) -> (mask (B, 1, T_new, T_total), positions (B, T_new))


def expected_mask_and_positions(real: torch.Tensor, T_new: int):
    """The mask for real queries (pads: themselves) and the position ids (0 at padding)."""
    T_total = real.shape[1]
    causal = causal_with_past(T_new, T_total)  # (T_new, T_total)
    itself = torch.arange(T_total) == (T_total - T_new + torch.arange(T_new)).unsqueeze(1)
    mask = causal & (real.unsqueeze(1) | itself)  # (B, T_new, T_total)
    positions = (real.long().cumsum(dim=1) - 1).clamp(min=0)[:, T_total - T_new :]
    return mask.unsqueeze(1), positions


def generate_batch_with(mask_fn, model, prompts, n):
    """Greedy batch generation with the course's loop and ``mask_fn`` for masks and positions."""
    T0 = max(len(p) for p in prompts)
    ids = torch.stack([torch.cat([torch.zeros(T0 - len(p), dtype=torch.long), p]) for p in prompts])  # (B, T0)
    real = torch.stack([torch.arange(T0) >= T0 - len(p) for p in prompts])  # (B, T0)
    with torch.no_grad():
        mask, positions = mask_fn(real, T0)
        logits, caches = known_good_forward_cached(model, ids, None, positions, mask)
        new = []
        for _ in range(n):
            next_ids = logits[:, -1].argmax(dim=-1)  # (B,)
            new.append(next_ids)
            real = torch.cat([real, torch.ones(len(prompts), 1, dtype=torch.bool)], dim=1)
            mask, positions = mask_fn(real, 1)
            logits, caches = known_good_forward_cached(model, next_ids.unsqueeze(1), caches, positions, mask)
    return torch.stack(new, dim=1)  # (B, n)


def _real(lengths, T_total):
    return torch.stack([torch.arange(T_total) >= T_total - n for n in lengths])


# (name, real lengths of the rows, T_total, T_new)
MASK_CASES = [("a prefill: rows of 5, 2 and 4 tokens, T_total = T_new = 6", [5, 2, 4], 6, 6),
              ("a decode step: rows of 7, 4 and 6 tokens in T_total = 8, T_new = 1", [7, 4, 6], 8, 1)]
MASK_HIDDEN_CASES = [("two new columns: rows of 3, 6, 1, 5 tokens in T_total = 7", [3, 6, 1, 5], 7, 2),
                     ("no padding at all: 2 rows of 5 tokens", [5, 5], 5, 5)]
BATCH_PROMPTS = [[3, 7, 1, 12, 5, 9], [4, 11], [8, 2, 6, 10]]  # lengths 6, 2, 4; 5 new tokens, max_len 13


def _probe_mask(cases):
    def probe(batch_mask_and_positions) -> dict:
        expect_callable(batch_mask_and_positions, "batch_mask_and_positions")
        runs = []
        for _, lengths, T_total, T_new in cases:
            sizes = {"B": len(lengths), "T_total": T_total, "T_new": T_new, "T_past": T_total - T_new}
            try:
                with case_sizes(sizes):
                    mask, positions = batch_mask_and_positions(_real(lengths, T_total), T_new)
                runs.append({"mask": mask, "positions": positions})
            except Exception as exc:  # noqa: BLE001
                runs.append(caught(exc, sizes))
        prompts = [torch.tensor(p) for p in BATCH_PROMPTS]
        try:
            batch = generate_batch_with(batch_mask_and_positions, small_model(max_len=13), prompts, 5)
        except Exception as exc:  # noqa: BLE001
            batch = caught(exc, {"B": len(prompts)})
        return {"runs": runs, "batch": batch}

    return probe


def _judge_mask(cases):
    def judge(data: dict) -> str:
        for (name, lengths, T_total, T_new), run in zip(cases, runs(data, len(cases)), strict=True):
            what = f"batch_mask_and_positions on {name}"
            raise_caught(what, run)
            real = _real(lengths, T_total)
            B, T_past = len(lengths), T_total - T_new
            want_mask, want_pos = expected_mask_and_positions(real, T_new)
            mask, pos = run["mask"], run["positions"]
            if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (B, 1, T_new, T_total) or mask.dtype != torch.bool:
                raise CheckFailed(f"{what}: the mask should be a bool tensor of shape {(B, 1, T_new, T_total)}, got {describe(mask)}.")
            if not isinstance(pos, torch.Tensor) or tuple(pos.shape) != (B, T_new) or pos.dtype.is_floating_point:
                every = expected_mask_and_positions(real, T_total)[1]  # (B, T_total): the positions of every column
                whole = (isinstance(pos, torch.Tensor) and T_new < T_total and tuple(pos.shape) == (B, T_total)
                         and torch.equal(pos.long(), every.long()))
                more = (f" They are the positions of all T_total = {T_total} columns, right for each: only the newest "
                        f"T_new = {T_new} are asked for, the last {T_new} columns ([:, -T_new:])." if whole else "")
                raise CheckFailed(f"{what}: the positions should be an integer tensor of shape {(B, T_new)}, got "
                                  f"{describe(pos)}.{more}")
            query_real = real[:, T_past:]  # (B, T_new)
            rows = query_real.view(B, 1, T_new, 1).expand_as(mask)
            if not torch.equal(mask[rows], want_mask[rows]):
                causal = causal_with_past(T_new, T_total).expand_as(mask)
                b, _, i, j = ((mask != want_mask) & rows).nonzero()[0].tolist()
                itself = torch.arange(T_total) == (T_past + torch.arange(T_new)).unsqueeze(1)  # (T_new, T_total)
                on_queries = (causal_with_past(T_new, T_total) & (query_real.unsqueeze(2) | itself)).unsqueeze(1)
                if torch.equal(mask[rows], causal[rows]) and T_past == 0 and torch.equal(mask, on_queries) \
                        and not torch.equal(on_queries, want_mask):
                    why = ("the padding is attended to: your mask equals one whose real-token flags are lined up with "
                           "the queries (real of shape (B, T, 1): one flag per row of the mask) instead of with the keys "
                           "((B, 1, T_total): one flag per column), so a real query keeps every earlier key, padding included")
                elif torch.equal(mask[rows], causal[rows]) and torch.equal(mask, causal):
                    why = ("the padding is attended to: in every row, padding queries included, your mask is the causal "
                           "mask alone, so the real-token condition takes no effect anywhere: see that it is ANDed with "
                           "the causal mask, and that the 'a query meets its own key' condition holds only at each "
                           "query's own column, T_past + i")
                elif torch.equal(mask[rows], causal[rows]):
                    why = ("the padding is attended to: for the real queries your mask is the causal mask alone, so a "
                           "real query looks at the padding keys before it")
                elif torch.equal(mask[rows], (causal_with_past(T_new, T_total, offset=False) & real.unsqueeze(1)).unsqueeze(1)[rows]):
                    why = (f"the causal part was not offset by T_past = {T_past}: new query i must see keys up to "
                           "T_past + i (a one-token decode step must see every real past key)")
                elif T_past and torch.equal(mask, (causal_with_past(T_new, T_total)
                                                   & (real.unsqueeze(1) | torch.eye(T_new, T_total, dtype=torch.bool))).unsqueeze(1)):
                    why = (f"the mask equals one whose 'itself' part is torch.eye(T_new, T_total): it marks key i for new "
                           f"query i, but new query i sits at column T_past + i (T_past = {T_past} here), so a real query "
                           "is let see the padding key i; mark column T_past + i")
                else:
                    why = "query i may see key j exactly when j <= T_past + i and key j is a real token"
                raise CheckFailed(f"{what}: {why}. Evidence: row {b}, query {i}, key {j}: expected "
                                  f"{bool(want_mask[b, 0, i, j])}, got {bool(mask[b, 0, i, j])}.")
            empty = ~mask.any(dim=-1)  # (B, 1, T_new)
            if empty.any():
                b, _, i = empty.nonzero()[0].tolist()
                raise CheckFailed(f"{what}: padding query {i} of row {b} sees no key at all: its softmax is over -inf "
                                  "only, which gives NaN, and the NaN spreads to every row through the next layer's "
                                  "values. Let a padding query look at itself.")
            if (mask & ~causal_with_past(T_new, T_total)).any():
                raise CheckFailed(f"{what}: a padding query looks at a key after it; let it look at itself only.")
            if not torch.equal(pos[query_real], want_pos[query_real]):
                b, i = ((pos != want_pos) & query_real).nonzero()[0].tolist()
                every = expected_mask_and_positions(real, T_total)[1]  # (B, T_total): the positions of every column
                new_only = (real[:, T_past:].long().cumsum(dim=1) - 1).clamp(min=0)  # (B, T_new): the cache not counted
                arange = torch.arange(T_past, T_total).expand(B, T_new)
                if torch.equal(pos[query_real], arange[query_real]):
                    why = ("the positions are the columns, the same for every row: count per row, the real tokens "
                           "before each one (the first real token of every row is at position 0)")
                elif torch.equal(pos[query_real], want_pos[query_real] + 1):
                    why = "the positions start at 1: the first real token of a row is at position 0"
                elif T_past and torch.equal(pos[query_real], new_only[query_real]):
                    first = (" (or they are the positions of the first T_new columns instead of the last: this case "
                             "cannot tell which)" if torch.equal(pos[query_real], every[:, :T_new][query_real]) else "")
                    why = (f"your positions count the real tokens among the new columns only, as if the {T_past} cached "
                           f"columns were not there{first}. A position counts every real token before it in the row, the "
                           "cached ones included: count over all T_total columns, then keep the last T_new")
                elif T_past and torch.equal(pos[query_real], every[:, :T_new][query_real]):
                    why = (f"your positions are those of the first T_new = {T_new} columns of each row, not of the new "
                           f"ones: the new columns are the last T_new (from T_past = {T_past} on), so take "
                           "[:, -T_new:] (or [:, T_past:]) of the positions of all T_total columns")
                else:
                    why = "a real token's position is the number of real tokens before it in its row"
                raise CheckFailed(f"{what}: {why}. Evidence: row {b}, new column {i}: expected {int(want_pos[b, i])}, "
                                  f"got {int(pos[b, i])}.")
            if (pos < 0).any():
                raise CheckFailed(f"{what}: a padding position is {int(pos.min())}; position ids index the "
                                  "position table: use 0 at padding.")
            if (pos[~query_real] != 0).any():
                b, i = ((pos != 0) & ~query_real).nonzero()[0].tolist()
                raise CheckFailed(f"{what}: a padding position must be 0, as the docstring says (0 for padding). "
                                  f"Evidence: row {b}, new column {i} is padding and got position {int(pos[b, i])}.")
        batch = data.get("batch")
        raise_caught("batch generation with your batch_mask_and_positions", batch)
        model = small_model(max_len=13)
        what = f"greedy batch generation, prompts of {[len(p) for p in BATCH_PROMPTS]} tokens, 5 new each"
        for row, prompt in enumerate(BATCH_PROMPTS):
            alone = sampling.generate(model, torch.tensor(prompt), 5, temperature=0)[len(prompt):]
            if not isinstance(batch, torch.Tensor) or batch.shape != (len(BATCH_PROMPTS), 5):
                raise CheckFailed(f"{what}: got {describe(batch)}.")
            if not torch.equal(batch[row].long(), alone):
                nan = " (NaN in the logits makes argmax pick garbage)" if batch[row].max() >= 13 else ""
                raise CheckFailed(f"{what}: row {row} gets {batch[row].tolist()} in the batch but {alone.tolist()} "
                                  f"alone{nan}: the batch must give every prompt the tokens it gets alone.")
        return ("batch_mask_and_positions: " + "; ".join(c[0] for c in cases) + ": causal and padding masks "
                "combined, no empty row, positions counted per row; in a batch every prompt gets the tokens it gets alone.")

    return judge


def _rows_reordered(case, rng):
    """While grading: the same rows in another order (the description says which)."""
    name, lengths, T_total, T_new = case
    order = rng.sample(lengths, len(lengths))
    for said, now in ((", ".join(map(str, lengths)), ", ".join(map(str, order))),
                      (f"{', '.join(map(str, lengths[:-1]))} and {lengths[-1]}", f"{', '.join(map(str, order[:-1]))} and {order[-1]}")):
        name = name.replace(said, now)
    return name, order, T_total, T_new


check_batch_mask, check_batch_mask_hidden = visible_and_hidden(
    "check_batch_mask", _probe_mask, _judge_mask, MASK_CASES, MASK_HIDDEN_CASES, _rows_reordered)

__all__ = ["check_batch_mask", "check_batch_mask_hidden", "expected_mask_and_positions", "generate_batch_with"]
