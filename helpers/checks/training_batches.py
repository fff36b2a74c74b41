"""Checks for lesson 07 (training): cutting a batch, ``get_batch(ids, batch_size, block_size, generator)``.

The probe calls the student's function on short texts whose ids are all different, so that every
row of ``x`` and ``y`` can be traced back to the positions it was cut from. It records the
batches, whether the generator and PyTorch's global random numbers were used, and many batches
from one generator. The judge finds the start of every row, checks the windows and targets, that
every start that fits (and none that does not) comes up, that a seeded generator gives the same
batch and that the global random numbers are left alone. When some draws raise (``caught``) and
the others are right, the starts are too large.

Shape legend: B batch size, T block size (time), N length of the text. No two are equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.checks import core
from helpers.checks.core import CheckFailed, describe, expect_callable, first_mismatch, need, runs
from helpers.checks.diagnose import case_sizes
from helpers.checks.errors import caught, raise_caught


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
RETRIES = 40  # after an error: more draws, to see whether only some of them raise


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


def _run_case(get_batch, case: Case) -> dict:
    ids = text(case)

    def call(generator):
        return _pair(get_batch(ids.clone(), case.B, case.T, generator=generator))

    run: dict = {}
    try:
        # the same generator seed twice, with the global random numbers seeded differently:
        # a batch that depends on them changes between the two calls
        torch.manual_seed(11)
        g = _gen(case.seed)
        state, global_state = g.get_state(), torch.get_rng_state()
        run["first"] = call(g)
        run["generator_used"] = not torch.equal(g.get_state(), state)
        run["global_used"] = not torch.equal(torch.get_rng_state(), global_state)
        torch.manual_seed(12)
        run["second"] = call(_gen(case.seed))
        run["other_seed"] = call(_gen(case.seed + 77))
        g = _gen(1000 + case.seed)
        run["many"] = [call(g) for _ in range(case.draws)]
        run["no_generator"] = []  # generator=None: the global random numbers, set by torch.manual_seed
        for seed in (31, 32):
            torch.manual_seed(seed)
            run["no_generator"].append(call(None))
    except Exception as exc:  # noqa: BLE001 - the judge explains the error
        run = caught(exc, {"B": case.B, "T": case.T, "N": case.N})
        retries = []
        for seed in range(RETRIES):
            try:
                retries.append(call(_gen(2000 + seed)))
            except Exception:  # noqa: BLE001 - counted: the draws that raise
                pass
        run["retries"], run["raised"] = retries[:10], RETRIES - len(retries)
    return run


def _probe(cases):
    def probe(get_batch) -> dict:
        expect_callable(get_batch, "get_batch")
        runs = []
        for case in cases:
            with case_sizes({"B": case.B, "T": case.T, "N": case.N}):
                runs.append(_run_case(get_batch, case))
        return {"runs": runs}

    return probe


# ---------------------------------------------------------------------------------------------
# Reading a batch back


PAST_END = (
    "your windows can run past the end of the text: a window needs block_size ids and its target "
    "one more, so the last start that fits is len(ids) - block_size - 1; draw the starts among the "
    "len(ids) - block_size values 0 .. len(ids) - block_size - 1"
)


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
    need(pair, dict)
    if "bad" in pair:
        raise CheckFailed(f"{what} {pair['bad']}.")
    x, y = need(pair.get("x"), torch.Tensor), need(pair.get("y"), torch.Tensor)
    B, T = case.B, case.T
    for name, t in (("x", x), ("y", y)):
        if tuple(t.shape) == (T, B):
            raise CheckFailed(
                f"{what}: {name} has shape (block_size, batch_size) = {(T, B)}; it should be "
                f"(batch_size, block_size) = {(B, T)}: one row per window. Put the starts in a column "
                "(B, 1) and the offsets in a row (T,)."
            )
        if tuple(t.shape) != (B, T):
            rows = (f" The rows are windows, one per start: {t.shape[0]} rows means {t.shape[0]} start(s) were drawn; draw batch_size of them." + (f" {case.N - T} is also how many different starts fit (N - block_size): starts drawn without repetition (torch.randperm) are never more. Starts may repeat: draw each on its own (torch.randint)."
                    if t.shape[0] == case.N - T < B else "") if t.dim() == 2 and t.shape[1] == T and t.shape[0] != B else "")
            cols = (f" Each row is a window of {B} = batch_size consecutive ids of the text where block_size = {T} "
                    "were asked: are the offsets of a window made from batch_size (torch.arange(batch_size))?"
                    if t.dim() == 2 and t.shape[0] == B and t.shape[1] == B != T and _windows(t, text(case)) else "")
            raise CheckFailed(f"{what}: {name} should have shape (batch_size, block_size) = {(B, T)}, got "
                              f"{tuple(t.shape)}.{rows}{cols}")
        if t.dtype != torch.int64:
            raise CheckFailed(f"{what}: {name} has dtype {t.dtype}; the ids should stay {torch.int64} (index ids, do not convert them).")
    ids = text(case)
    px, py = _positions(ids, x), _positions(ids, y)  # (B, T) each
    if (px < 0).any():
        b, t = (int(i) for i in (px < 0).nonzero()[0])
        counted = bool((x >= 0).all() and (x < case.N).all() and (x[:, 1:] - x[:, :-1] == 1).all())
        raise CheckFailed(f"{what}: x[{b}, {t}] = {int(x[b, t])} is not an id of the text: x must hold ids taken from ids."
                          + (" Each row of x counts up by one: these are the positions themselves; index the text "
                             "with them, ids[positions]." if counted else ""))
    offsets = torch.arange(T)  # (T,)
    starts = px[:, 0]  # (B,)
    if not torch.equal(px, starts[:, None] + offsets):  # (B, 1) + (T,) -> (B, T)
        b = int((px != starts[:, None] + offsets).any(dim=1).nonzero()[0])
        raise CheckFailed(
            f"{what}: row {b} of x is not a window of consecutive ids: it comes from the positions "
            f"{px[b].tolist()} of the text. Draw one start per row (batch_size of them, not "
            "batch_size * block_size) and take the block_size ids that follow it."
        )
    want = ids[starts[:, None] + offsets + 1] if bool((starts + T < case.N).all()) else None
    evidence = first_mismatch(want, y, 0, 0) if want is not None else f"y[0] = {y[0].tolist()}"
    if torch.equal(y, x + 1) and not torch.equal(py, px + 1):
        raise CheckFailed(
            f"{what}: y = x + 1: you added 1 to the ids themselves, not to their positions. The target of x[b, t] is the "
            f"id at the next position, ids[positions + 1], whatever its value. Evidence: {evidence}"
        )
    if torch.equal(py, px):
        raise CheckFailed(
            f"{what}: y is x itself: the targets are not shifted. y[b, t] must be the character after "
            f"x[b, t], ids[s + t + 1] for a window starting at s. Evidence: {evidence}"
        )
    if torch.equal(py, px - 1) or (torch.equal(py[:, 1:], px[:, :-1]) and not torch.equal(py, px + 1)):
        raise CheckFailed(
            f"{what}: y is shifted the wrong way: y[b, t] is the character *before* x[b, t] "
            f"(or x and y are swapped). y[b, t] must be the character after it, ids[s + t + 1]. Evidence: {evidence}"
        )
    if T > 1 and torch.equal(py[:, :-1], px[:, :-1] + 1) and not torch.equal(py[:, -1], px[:, -1] + 1):
        made = ("it is the window's first id: y was made from x (a roll, or x shifted), which wraps around"
                if torch.equal(y[:, -1], x[:, 0]) else "y was made from x's window, which does not hold it")
        raise CheckFailed(
            f"{what}: only the last target is wrong: y[b, {T - 1}] must be the id after the window, ids[s + {T}]; "
            f"{made}. Cut y from the text itself, ids[positions + 1]. Evidence: {evidence}")
    if not torch.equal(py, px + 1):
        shift = next((s for s in range(2, T + 1) if torch.equal(py, px + s)), None)
        how = (f"y[b, t] is the id {shift} places after x[b, t] (ids[s + t + {shift}]), an off-by-{shift - 1} "
               "in the targets' positions" if shift else "y[b, t] is not the id that follows x[b, t]")
        raise CheckFailed(
            f"{what}: y is not x shifted by one: {how}; it must be ids[s + t + 1], the character after x[b, t]. "
            f"Evidence: {evidence}")
    return x, y, starts


def _same(a: dict, b: dict) -> bool:
    return all(isinstance(a.get(k), torch.Tensor) and isinstance(b.get(k), torch.Tensor)
               and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in ("x", "y"))


def _judge_error(case: Case, what: str, run: dict) -> None:
    """The student's code raised: read the draws that did not, to say which part is wrong."""
    retries, raised = need(run.get("retries"), list), need(run.get("raised"), int)
    error = str(run.get("error"))
    for pair in retries:
        try:
            _read(case, what, pair)
        except CheckFailed as exc:
            raise CheckFailed(
                f"{exc} (Besides, {raised} of {RETRIES} other draws raised {error.split(':', 1)[0]}; the "
                "ones that ran show the mistake above.)"
            ) from None
    if retries and raised and "IndexError" in error:
        raise CheckFailed(
            f"{what} raised {error.split(':', 1)[0]} on {raised} of {RETRIES} draws, while the draws that "
            f"ran gave right windows and targets: only some starts are too large, so {PAST_END}.\n"
            f"{run.get('explained')}"
        )
    raise_caught(what, run, [
        ("out of bounds", f"A window needs block_size ids and its target one more: the largest position x or y may "
                          f"read is N - 1 = {case.N - 1}."),
        ("'from' to be less than 'to'", "torch.randint(high, size) needs high >= 1: the upper bound of the starts came "
                                        "out 0 or less here (the number of starts that fit is len(ids) - block_size)."),
        ("generator", "Pass the generator to the function that draws the starts (torch.randint(..., "
                      "generator=generator)); it accepts None."),
        ("stack expects each tensor to be equal size", f"Some windows came out shorter than the others: most likely {PAST_END}."),
    ])


def _windows(t: torch.Tensor, ids: torch.Tensor) -> bool:
    """Every row of ``t`` is a run of consecutive ids of the text ``ids``."""
    return all(any(torch.equal(row, ids[s : s + len(row)]) for s in range(len(ids) - len(row) + 1)) for row in t)


def _judge(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            what = case.label
            if "error" in run:
                _judge_error(case, what, run)
            first, second, other = run.get("first"), run.get("second"), run.get("other_seed")
            many = need(run.get("many"), list, case.draws)
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
                source = ("PyTorch's global random numbers" if run.get("global_used") else "elsewhere (a "
                          "generator of your own, or no random numbers at all)")
                raise CheckFailed(f"{what}: you ignored the generator: drawing the batch did not use it (its state did "
                                  f"not change), so the batches come from {source} and the caller's seeded generator "
                                  "cannot reproduce them. Pass generator=generator to torch.randint.")
            if run.get("global_used") or not _same(first, second):
                raise CheckFailed(
                    f"{what}: the same seeded generator gave two different batches (or drawing a batch "
                    "used PyTorch's global random numbers too): draw every random number of the batch "
                    "from the generator, and nothing from the global one."
                )
            if case.B > 1 and case.n_starts > 1 and all(bool((s == s[0]).all()) for s in starts):
                raise CheckFailed(
                    f"{what}: in each of the {len(starts)} batches every row is the same window (e.g. starts "
                    f"{starts[0].tolist()}): one start for the whole batch, or rows that are one object (a list "
                    "repeated with *, written row by row)? Each row needs its own start and its own storage."
                )
            if case.B > 1 and case.n_starts > case.B and all(torch.equal(s, torch.arange(case.B)) for s in starts):
                raise CheckFailed(
                    f"{what}: in each of the {len(starts)} batches the rows start at 0, 1, ..., {case.B - 1}: "
                    "row b is always the window at b, whatever was drawn. Is each row's start its row number (an "
                    "index of a loop, enumerate's counter, arange(batch_size)) instead of the start drawn for it?")
            if case.B > 1 and case.n_starts > case.B and all(torch.equal(s, s[0] + torch.arange(case.B)) for s in starts):
                raise CheckFailed(
                    f"{what}: in each of the {len(starts)} batches the rows start at consecutive positions "
                    f"(e.g. {starts[0].tolist()}): one random start and its neighbours are not independent "
                    "windows. Draw batch_size starts, each uniform over 0 .. len(ids) - block_size - 1."
                )
            alone = run.get("no_generator") or []
            if case.n_starts ** case.B > 1000 and len(alone) == 2 and _same(*alone):
                raise CheckFailed(
                    f"{what}: called without a generator (generator=None) after torch.manual_seed(31) and after "
                    "torch.manual_seed(32), it gave the same batch: with None the starts must come from PyTorch's "
                    "global random numbers (a torch.Generator() made inside the function starts from the same "
                    "state every call). Pass generator=generator to torch.randint: None means the global one."
                )
            if len(many) >= 3 and case.n_starts ** case.B > 1000 and all(_same(many[0], m) for m in many[1:]):
                raise CheckFailed(f"{what}: {len(many)} batches drawn in turn with one generator are all one batch: the "
                                  "generator does not move on between calls. Is it reseeded (manual_seed) or copied?")
            if _same(first, other) and case.n_starts > 1:
                raise CheckFailed(f"{what}: two generators seeded differently gave the same batch: the starts do not come "
                                  "from the generator.")
            if case.draws:
                counts = torch.bincount(seen, minlength=case.n_starts)
                missing = [s for s in range(case.n_starts) if counts[s] == 0]
                if missing == [last] or (missing and missing[-1] == last and counts[last] == 0 and len(missing) <= 2):
                    raise CheckFailed(
                        f"{what}: in {len(seen)} windows no window ever started at {last}, the last start "
                        f"that fits (len(ids) - block_size - 1 = {case.N} - {case.T} - 1): your windows "
                        "never reach the last window, an off-by-one in the upper bound. torch.randint(high, ...) draws from 0 to high - 1: "
                        "high is the number of starts, len(ids) - block_size."
                    )
                if missing:
                    raise CheckFailed(
                        f"{what}: in {len(seen)} windows the starts {missing} never came up; every start "
                        f"from 0 to {last} should be equally likely (counts: {counts.tolist()})."
                    )
                expected = len(seen) / case.n_starts  # windows per start when every start is equally likely
                top = int(counts.argmax())
                if case.n_starts > 1 and counts[top] > expected + 5 * expected ** 0.5 + 2:  # five standard deviations
                    edge = (f" It is the {'last' if top == last else 'first'} start: are the starts drawn over a wider range "
                            f"and then clamped into 0 .. {last} (every draw past it lands on it)?" if top in (0, last) else "")
                    raise CheckFailed(f"{what}: the start {top} came up in {int(counts[top])} of {len(seen)} windows, where "
                                      f"about {expected:.0f} (one in {case.n_starts}) are expected: the starts should be "
                                      f"uniform over 0 .. {last}.{edge}")
        return ("get_batch: " + "; ".join(f"N={c.N}, B={c.B}, T={c.T}" for c in cases)
                + ": every row of x is a window of the text and y the next character of each id; every "
                "start that fits comes up and none past the end; a seeded generator gives the same batch "
                "and the global random numbers are left alone.")

    return judge


check_get_batch, check_get_batch_hidden = core.visible_and_hidden("check_get_batch", _probe, _judge, CASES, HIDDEN_CASES)
