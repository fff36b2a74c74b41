"""Checks for lesson 07 (training): cutting a batch, ``get_batch(ids, batch_size, block_size, generator)``.

The probe calls the student's function on short texts whose ids are all different, so that every
row of ``x`` and ``y`` can be traced back to the positions it was cut from. It records the
batches, whether the generator and PyTorch's global random numbers were used, and many batches
from one generator (to see which starts ever come up). The judge finds the start of every row,
checks that ``x`` is a window and ``y`` the character after each of its ids, that every start
that fits (and none that does not) comes up, that a seeded generator gives the same batch and
that the global random numbers are left alone; it names the classic mistake it recognises.

Shape legend: B batch size, T block size (time), N length of the text. No two are equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.checks.core import Check, CheckFailed, describe, first_mismatch


@dataclass(frozen=True)
class Case:
    seed: int
    N: int  # length of the text
    B: int
    T: int
    draws: int  # batches drawn from one generator to see which starts come up

    @property
    def label(self) -> str:
        return f"get_batch on a text of N={self.N} ids with batch_size={self.B}, block_size={self.T}"

    @property
    def n_starts(self) -> int:
        """How many starts fit: 0 .. N - T - 1 (the target of the last window ends on the last id)."""
        return self.N - self.T


CASES = [Case(0, N=23, B=5, T=7, draws=0), Case(1, N=13, B=9, T=5, draws=60)]
HIDDEN_CASES = [
    Case(2, N=31, B=3, T=11, draws=0),
    Case(3, N=7, B=4, T=6, draws=3),  # the shortest text that works: a single window fits
    Case(4, N=17, B=6, T=2, draws=40),
]


def text(case: Case) -> torch.Tensor:
    """The ids of the case, all different, so that an id tells where in the text it was: (N,)."""
    g = torch.Generator().manual_seed(500 + case.seed)
    return torch.randperm(case.N, generator=g) + 40  # (N,), values 40 .. 40 + N - 1


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pair(out) -> dict:
    """What one call returned, as data."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return {"bad": f"returned {describe(out)}; return the pair x, y"}
    x, y = out
    for name, value in (("x", x), ("y", y)):
        if not isinstance(value, torch.Tensor):
            return {"bad": f"returned {describe(value)} as {name}; return two tensors x, y"}
    return {"x": x.detach().clone(), "y": y.detach().clone()}


def _probe(cases):
    def probe(get_batch) -> dict:
        if not callable(get_batch):
            raise CheckFailed(f"expected the function get_batch, got {describe(get_batch)}")
        runs = []
        for case in cases:
            ids = text(case)
            run: dict = {}
            try:
                # the same generator seed twice, with the global random numbers seeded differently:
                # a batch that depends on them changes between the two calls
                torch.manual_seed(11)
                g = _gen(case.seed)
                state, global_state = g.get_state(), torch.get_rng_state()
                run["first"] = _pair(get_batch(ids.clone(), case.B, case.T, generator=g))
                run["generator_used"] = not torch.equal(g.get_state(), state)
                run["global_used"] = not torch.equal(torch.get_rng_state(), global_state)
                torch.manual_seed(12)
                run["second"] = _pair(get_batch(ids.clone(), case.B, case.T, generator=_gen(case.seed)))
                run["other_seed"] = _pair(get_batch(ids.clone(), case.B, case.T, generator=_gen(case.seed + 77)))
                many, g = [], _gen(1000 + case.seed)
                for _ in range(case.draws):
                    many.append(_pair(get_batch(ids.clone(), case.B, case.T, generator=g)))
                run["many"] = many
            except Exception as exc:  # noqa: BLE001 - the judge explains the error
                run["error"] = f"{type(exc).__name__}: {exc}"[:1500]
            runs.append(run)
        return {"runs": runs}

    return probe


# ---------------------------------------------------------------------------------------------
# Reading a batch back


PAST_END = (
    "your windows can run past the end of the text: a window needs block_size ids and its target "
    "one more, so the last start that fits is len(ids) - block_size - 1; draw the starts among the "
    "len(ids) - block_size values 0 .. len(ids) - block_size - 1"
)


def _explain_error(error: str, what: str) -> str:
    if "out of bounds" in error or "out of range" in error:
        return f"{what} raised {error}. Most likely {PAST_END}."
    if "stack expects each tensor to be equal size" in error:
        return (
            f"{what} raised {error}. Some windows came out shorter than the others: most likely "
            f"{PAST_END}."
        )
    if "generator" in error:
        return (
            f"{what} raised {error}. Pass the generator to the function that draws the starts "
            "(torch.randint(..., generator=generator)); it accepts None."
        )
    return f"{what} raised {error}."


def _positions(ids: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Where in the text each id of ``t`` comes from (-1 for an id that is not in the text)."""
    where = torch.full((int(ids.max()) + 1,), -1, dtype=torch.long)
    where[ids] = torch.arange(len(ids))
    flat = t.reshape(-1).long()
    inside = (flat >= 0) & (flat < len(where))
    out = torch.full_like(flat, -1)
    out[inside] = where[flat[inside]]
    return out.reshape(t.shape)


def _read(case: Case, what: str, pair: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Check one returned batch; return x, y and the start of every row, (B,)."""
    if not isinstance(pair, dict):
        raise CheckFailed("the check's data is incomplete")
    if "bad" in pair:
        raise CheckFailed(f"{what} {pair['bad']}.")
    x, y = pair.get("x"), pair.get("y")
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise CheckFailed("the check's data is incomplete")
    B, T = case.B, case.T
    for name, t in (("x", x), ("y", y)):
        if tuple(t.shape) == (T, B):
            raise CheckFailed(
                f"{what}: {name} has shape (block_size, batch_size) = {(T, B)}; it should be "
                f"(batch_size, block_size) = {(B, T)}: one row per window. Put the starts in a column "
                "(B, 1) and the offsets in a row (T,)."
            )
        if tuple(t.shape) != (B, T):
            raise CheckFailed(f"{what}: {name} should have shape (batch_size, block_size) = {(B, T)}, got {tuple(t.shape)}.")
        if t.dtype != torch.int64:
            raise CheckFailed(f"{what}: {name} has dtype {t.dtype}; the ids should stay {torch.int64} (index ids, do not convert them).")
    ids = text(case)
    px, py = _positions(ids, x), _positions(ids, y)  # (B, T) each
    if (px < 0).any():
        b, t = (int(i) for i in (px < 0).nonzero()[0])
        raise CheckFailed(f"{what}: x[{b}, {t}] = {int(x[b, t])} is not an id of the text: x must hold ids taken from ids.")
    offsets = torch.arange(T)  # (T,)
    starts = px[:, 0]  # (B,)
    contiguous = torch.equal(px, starts[:, None] + offsets)  # (B, 1) + (T,) -> (B, T)
    if not contiguous:
        b = int((px != starts[:, None] + offsets).any(dim=1).nonzero()[0])
        raise CheckFailed(
            f"{what}: row {b} of x is not a window of consecutive ids: it comes from the positions "
            f"{px[b].tolist()} of the text. Draw one start per row (batch_size of them, not "
            "batch_size * block_size) and take the block_size ids that follow it."
        )
    want = ids[starts[:, None] + offsets + 1] if bool((starts + T < case.N).all()) else None
    if torch.equal(py, px):
        raise CheckFailed(
            f"{what}: y is x itself: the targets are not shifted. y[b, t] must be the character after "
            f"x[b, t], ids[s + t + 1] for a window starting at s. Evidence: "
            + (first_mismatch(want, y, 0, 0) if want is not None else f"y[0] = {y[0].tolist()}")
        )
    if torch.equal(py, px - 1) or (torch.equal(py[:, 1:], px[:, :-1]) and not torch.equal(py, px + 1)):
        raise CheckFailed(
            f"{what}: y is shifted the wrong way: y[b, t] is the character *before* x[b, t] "
            f"(or x and y are swapped). y[b, t] must be the character after it, ids[s + t + 1]. Evidence: "
            + (first_mismatch(want, y, 0, 0) if want is not None else f"y[0] = {y[0].tolist()}")
        )
    if not torch.equal(py, px + 1):
        raise CheckFailed(
            f"{what}: y is not x shifted by one: y[b, t] must be ids[s + t + 1], the character after "
            "x[b, t]. Evidence: " + (first_mismatch(want, y, 0, 0) if want is not None else f"y = {y.tolist()}")
        )
    return x, y, starts


def _same(a: dict, b: dict) -> bool:
    return all(isinstance(a.get(k), torch.Tensor) and isinstance(b.get(k), torch.Tensor)
               and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in ("x", "y"))


def _judge(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for case, run in zip(cases, runs, strict=True):
            what = case.label
            if not isinstance(run, dict):
                raise CheckFailed("the check's data is incomplete")
            if "error" in run:
                raise CheckFailed(_explain_error(str(run["error"]), what))
            first, second, other = run.get("first"), run.get("second"), run.get("other_seed")
            many = run.get("many")
            if not isinstance(many, list) or len(many) != case.draws:
                raise CheckFailed("the check's data is incomplete")
            batches = [first, second, other, *many]
            starts = [_read(case, what, pair)[2] for pair in batches]
            seen = torch.cat(starts)  # every start that came up
            last = case.n_starts - 1
            if int(seen.max()) > last:
                raise CheckFailed(
                    f"{what}: a window started at {int(seen.max())}, but its target would need the id "
                    f"at position {int(seen.max()) + case.T}, past the end (the last position is "
                    f"{case.N - 1}): {PAST_END}."
                )
            if not run.get("generator_used"):
                raise CheckFailed(
                    f"{what}: you ignored the generator: drawing the batch did not use it (its state did "
                    "not change), so the batches come from PyTorch's global random numbers and a seeded "
                    "generator cannot reproduce them. Pass generator=generator to torch.randint."
                )
            if run.get("global_used") or not _same(first, second):
                raise CheckFailed(
                    f"{what}: the same seeded generator gave two different batches (or drawing a batch "
                    "used PyTorch's global random numbers too): draw every random number of the batch "
                    "from the generator, and nothing from the global one."
                )
            if _same(first, other) and case.n_starts > 1:
                raise CheckFailed(
                    f"{what}: two generators seeded differently gave the same batch: the starts do not "
                    "come from the generator."
                )
            if case.draws:
                counts = torch.bincount(seen, minlength=case.n_starts)
                missing = [s for s in range(case.n_starts) if counts[s] == 0]
                if missing == [last] or (missing and missing[-1] == last and counts[last] == 0 and len(missing) <= 2):
                    raise CheckFailed(
                        f"{what}: in {len(seen)} windows no window ever started at {last}, the last start "
                        f"that fits (len(ids) - block_size - 1 = {case.N} - {case.T} - 1): your windows "
                        "never reach the last window. torch.randint(high, ...) draws from 0 to high - 1: "
                        "high is the number of starts, len(ids) - block_size."
                    )
                if missing:
                    raise CheckFailed(
                        f"{what}: in {len(seen)} windows the starts {missing} never came up; every start "
                        f"from 0 to {last} should be equally likely (counts: {counts.tolist()})."
                    )
                if case.n_starts > 1 and counts.max() > 0.5 * len(seen):
                    raise CheckFailed(
                        f"{what}: the start {int(counts.argmax())} came up in {int(counts.max())} of "
                        f"{len(seen)} windows: the starts should be uniform over 0 .. {last}."
                    )
        return (
            "get_batch: " + "; ".join(f"N={c.N}, B={c.B}, T={c.T}" for c in cases)
            + ": every row of x is a window of the text and y the next character of each id; every "
            "start that fits comes up and none past the end; a seeded generator gives the same batch "
            "and the global random numbers are left alone."
        )

    return judge


check_get_batch = Check("check_get_batch", _probe(CASES), _judge(CASES))
check_get_batch_hidden = Check("check_get_batch_hidden", _probe(HIDDEN_CASES), _judge(HIDDEN_CASES), hidden=True)
