"""Checks for lesson 08 (generation): drawing the next token, ``sample_next``.

``sample_next`` is checked on a large batch of identical rows: the share of each token among
thousands of draws must match the intended distribution; a wrong one is read back as a softmax at
some other temperature, or over another set of tokens, when it is one. The filters it applies are
checked in ``helpers.checks.sampling_filters``.

Shape legend: V vocabulary size, N rows (a batch of positions).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from helpers.checks.core import Check, CheckFailed, describe, expect_callable, need, runs
from helpers.checks.diagnose import case_sizes
from helpers.checks.errors import caught, raise_caught
from helpers.checks.invariants import judge_rng, judge_unseeded, rng_watch, unseeded_calls
from helpers.checks.sampling_mistakes import top_k_expected, top_p_expected
from helpers.reference import sampling as ref

# ---------------------------------------------------------------------------------------------
# sample_next(logits, temperature, top_k, top_p, generator) -> token ids

N_DRAWS = 8000  # identical rows per case: the share of each token among them is measured
UNSEEDED_ROWS = 200  # rows drawn twice with no generator: the same draws both times, from the global generator
DRAW_TOL = 0.03  # largest allowed gap between a measured share and its probability (> 5 sigma)

# (name, row of logits, temperature, top_k, top_p)
SAMPLE_CASES = [
    ("temperature 1", [0.3, -0.4, 1.2, 0.1, -1.0, 0.6], 1.0, None, None),
    ("temperature 0.5", [0.3, -0.4, 1.2, 0.1, -1.0, 0.6], 0.5, None, None),
    ("temperature 2 and top_k=3", [0.3, -0.4, 1.2, 0.1, -1.0, 0.6], 2.0, 3, None),
    ("temperature 0.7 and top_p=0.8", [1.0, 0.2, -0.5, 0.8, 0.1, -1.2, 0.4], 0.7, None, 0.8),
]
SAMPLE_HIDDEN_CASES = [
    ("temperature 3, top_k=4 and top_p=0.6", [1.0, 0.2, -0.5, 0.8, 0.1, -1.2, 0.4], 3.0, 4, 0.6),
    ("temperature 1.5 and top_p=0.5", [-0.2, 0.9, 0.3, 1.1, -0.7], 1.5, None, 0.5),
    ("temperature 0.01", [2.0, 1.0, 1.995, -1.0, 0.5], 0.01, None, None),  # logits / temperature reach 200
]
GREEDY_ROWS = [[0.1, 2.0, -1.0, 0.5, 0.3], [1.5, -0.5, 0.2, 1.4, 0.0], [-0.3, -0.2, -0.1, -0.4, -0.6]]
GREEDY_HIDDEN_ROWS = [[0.4, -0.1, 0.2, 0.9], [2.0, 1.0, 3.0, -1.0], [1.25, 0.5, 1.25, -1.0]]  # the last: a tie at the top


def intended(row, temperature, top_k, top_p) -> torch.Tensor:
    """The distribution sample_next should draw from: temperature, then top-k, then top-p (the reference's filters)."""
    logits = ref.apply_temperature(torch.tensor(row, dtype=torch.float64), temperature)
    if top_k is not None:
        logits = ref.top_k_filter(logits, top_k)
    if top_p is not None:
        logits = ref.top_p_filter(logits, top_p)
    return torch.softmax(logits, dim=-1)


def _filtered(logits, top_k, top_p, p_first=False):
    steps = [(top_p_expected, top_p), (top_k_expected, top_k)] if p_first else [(top_k_expected, top_k), (top_p_expected, top_p)]
    for fn, value in steps:
        logits = fn(logits, value) if value is not None else logits
    return logits


def _sample_variants(row, t, top_k, top_p) -> dict[str, torch.Tensor]:
    raw = torch.tensor(row, dtype=torch.float64)
    variants = {
        "the temperature multiplies the logits instead of dividing them": _filtered(raw * t, top_k, top_p),
        "the temperature has no effect: the draws follow the filtered logits as if they had not been divided "
        "(are the logits divided before the softmax, not the probabilities after it, and are the divided ones "
        "the ones filtered and sampled?)": _filtered(raw, top_k, top_p),
        "the filters are ignored (top_k / top_p must remove tokens before the softmax)": raw / t,
        "the temperature is applied twice (the logits are divided by it once before the filters and once more "
        "after them)": _filtered(raw / t, top_k, top_p) / t,
        "the softmax is applied twice (probabilities put through a softmax again flatten the distribution and "
        "give filtered tokens a share): one softmax, of the filtered logits": torch.softmax(_filtered(raw / t, top_k, top_p), -1),
    }
    if top_p is not None:
        variants["you applied top-p before the temperature: divide by the temperature first, then filter"] = (
            top_p_expected(top_k_expected(raw, top_k) if top_k else raw, top_p) / t)
    if top_p is not None and top_k is not None:
        variants["you applied top-p before top-k: apply top_k_filter first, then top_p_filter"] = _filtered(
            raw / t, top_k, top_p, p_first=True)
        variants["top-p was skipped because top_k was given (an elif, or a return after top-k?): with both, "
                 "apply top_k_filter, then top_p_filter"] = _filtered(raw / t, top_k, None)
        variants["top-k was skipped because top_p was given (an elif, or a return after top-p?): with both, "
                 "apply top_k_filter, then top_p_filter"] = _filtered(raw / t, None, top_p)
    return {k: torch.softmax(v, dim=-1) for k, v in variants.items()}


def _share_pattern(row, want: torch.Tensor, share: torch.Tensor) -> str | None:
    """What the measured shares are, when they are a known kind of distribution."""
    V = len(row)
    if (share - 1 / V).abs().max() <= DRAW_TOL and (want - 1 / V).abs().max() > DRAW_TOL:
        return ("the draws are uniform over the V tokens: the logits did not shape the distribution (a softmax "
                "over the rows, dim=0, makes identical rows uniform; so do probabilities that were all made equal)")
    extra = [i for i in range(V) if want[i] == 0 and share[i] > DRAW_TOL]
    missing = [i for i in range(V) if want[i] > 2 * DRAW_TOL and share[i] == 0]
    if extra or missing:
        return (f"the draws include tokens the filters remove ({extra}) and never reach tokens that should come "
                f"up ({missing}): the set of tokens kept before the softmax is not the intended one")
    kept = [i for i in range(V) if want[i] > 0 and share[i] > 0.01]
    logits = torch.tensor(row, dtype=torch.float64)
    if len(kept) >= 3:  # log(share) = logits / t' + const over the kept tokens: the temperature actually used
        x, y = logits[kept], share[kept].log()
        slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
        if slope > 0 and (torch.softmax(logits[kept] * slope, -1) - share[kept]).abs().max() <= DRAW_TOL:
            return (f"the draws follow a softmax of the logits at temperature {1 / slope:.3g}, not at the temperature "
                    "asked for: is the division by the temperature missing, repeated or another one?")
    return None


@contextmanager
def _course_filters(sample_next, calls: list):
    """While active, ``sample_next`` finds the course's filters under the notebook's names: a
    mistake in those is counted by their own checks, not a second time here. Each call appends
    ``[filter name, the value it was given]`` to ``calls``."""
    scope = getattr(sample_next, "__globals__", None)
    scope = scope if isinstance(scope, dict) else {}

    def recorded(name, fn):
        def call(logits, value):
            plain = value if value is None or isinstance(value, (int, float)) else repr(value)[:40]
            calls.append([name, plain])
            return fn(logits, value)

        return call

    replacements = {
        "apply_temperature": recorded("apply_temperature", lambda logits, temperature: logits / temperature),
        "top_k_filter": recorded("top_k_filter", top_k_expected),
        "top_p_filter": recorded("top_p_filter", lambda logits, p: top_p_expected(logits, p).to(logits.dtype)),
    }
    saved = {name: scope[name] for name in replacements if name in scope}
    scope.update({name: replacements[name] for name in saved})
    try:
        yield
    finally:
        scope.update(saved)


def _call(fn, sizes, *args, **kwargs) -> dict:
    with case_sizes(sizes):
        try:
            return {"out": fn(*args, **kwargs)}
        except Exception as exc:  # noqa: BLE001 - the judge explains the error
            return caught(exc, sizes)


def _probe_sample(cases, greedy_rows):
    def probe(sample_next) -> dict:
        expect_callable(sample_next, "sample_next")
        calls: list = []
        with _course_filters(sample_next, calls):
            runs = []
            for _, row, temperature, top_k, top_p in cases:
                logits = torch.tensor(row, dtype=torch.float32).expand(N_DRAWS, len(row)).clone()  # (N, V)
                options = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
                sizes = {"N": N_DRAWS, "V": len(row)}
                start = len(calls)
                with rng_watch() as rng:  # the generator passed in must be the only randomness used
                    run = _call(sample_next, sizes, logits, **options, generator=torch.Generator().manual_seed(7))
                run["rng"], run["filters"] = rng, calls[start:]
                torch.rand(3)  # move the global generator on: only the given generator may matter
                if "out" in run:
                    again = _call(sample_next, sizes, logits[:50], **options, generator=torch.Generator().manual_seed(7))
                    run["again"] = again.get("out", again.get("error"))
                runs.append(run)
            rows = torch.tensor(greedy_rows)
            sizes, draw = {"N": len(greedy_rows), "V": rows.shape[1]}, {"top_k": None, "top_p": None}
            shapes = {"one row": rows[0], "a batch of one row": rows[:1]}  # drawn, temperature 1
            row = torch.tensor(cases[0][1], dtype=torch.float32).expand(UNSEEDED_ROWS, len(cases[0][1])).clone()
            unseeded = unseeded_calls(lambda: _call(sample_next, {"N": UNSEEDED_ROWS, "V": row.shape[1]}, row,
                                                    temperature=1.0, top_k=None, top_p=None), sample_next)
            greedy_generator = torch.Generator().manual_seed(1)
            state = greedy_generator.get_state()
            batch = _call(sample_next, sizes, rows, temperature=0.0, **draw, generator=greedy_generator)
            batch["drew"] = not torch.equal(state, greedy_generator.get_state())  # greedy draws nothing
            return {"runs": runs, "unseeded": unseeded, "greedy": {
                "one": _call(sample_next, sizes, rows[0], temperature=0.0, **draw, generator=torch.Generator().manual_seed(1)),
                "batch": batch,
            }, "shapes": {k: _call(sample_next, sizes, v, temperature=1.0, **draw, generator=torch.Generator().manual_seed(2))
                          for k, v in shapes.items()}}

    return probe


SAMPLE_ERRORS = [
    ("probability tensor contains", "torch.multinomial needs non-negative, finite weights: it got inf, NaN or "
     "negative entries. Give it the softmax of the filtered logits: logits themselves (negative or -inf), the "
     "filters applied to probabilities (softmax before filtering) or a division by a temperature of 0 give such entries."),
    ("NoneType", "top_k=None or top_p=None means: skip that filter (if top_k is not None: ...)."),
]
GREEDY_HINT = [("", "Temperature 0 means greedy: return the id of the largest logit (argmax) before dividing by "
                    "the temperature.")]


def _filter_arguments(what, temperature, top_k, top_p, run) -> None:
    """Fail when a filter was called with another value than its own option: the value it got, and
    which option holds that value when one does (read from the calls, not guessed)."""
    options = {"apply_temperature": ("temperature", temperature), "top_k_filter": ("top_k", top_k),
               "top_p_filter": ("top_p", top_p)}
    for name, value in run.get("filters") or []:
        option, want = options.get(name, (None, None))
        if option is None or value == want:
            continue
        holder = next((o for o, v in options.values() if o != option and v == value), None)
        raise CheckFailed(f"{what}: {name} was called with {value!r}, not with {option} = {want!r}"
                          + (f"; {value!r} is {holder}'s value here: is {holder} passed where {option} belongs?" if holder
                             else "") + f" Pass each option to its own filter: {name}(logits, {option}).")


def _judge_draws(name, row, temperature, top_k, top_p, run) -> None:
    V = len(row)
    what = f"sample_next on {N_DRAWS} copies of one row of {V} logits with {name} (temperature={temperature}, top_k={top_k}, top_p={top_p})"
    _filter_arguments(what, temperature, top_k, top_p, run)
    top = max(abs(v) for v in row) / temperature
    overflow = [("probability tensor contains", f"At temperature {temperature} the logits divided by it reach {top:.0f}, "
                 "and exp() of anything above 88.7 overflows float32 to inf (and inf / inf is nan). Is the softmax "
                 "written out as exp(x) / exp(x).sum()? torch.softmax subtracts each row's maximum first and stays "
                 "finite.")] if top > 88.7 else []
    raise_caught(what, run, overflow + SAMPLE_ERRORS)
    draws = run.get("out")
    if isinstance(draws, torch.Tensor) and tuple(draws.shape) == (N_DRAWS, 1):
        raise CheckFailed(f"{what} returned shape (N, 1); return one id per row, shape (N,): "
                          "torch.multinomial(probs, 1, ...) gives (N, 1), take [:, 0] or squeeze(-1).")
    if not isinstance(draws, torch.Tensor) or tuple(draws.shape) != (N_DRAWS,):
        raise CheckFailed(f"{what} should return a tensor of shape (N,) = ({N_DRAWS},), got {describe(draws)}.")
    if draws.dtype.is_floating_point or draws.dtype == torch.bool:
        raise CheckFailed(f"{what} returned {draws.dtype} values; return token ids (torch.long).")
    if draws.min() < 0 or draws.max() >= V:
        raise CheckFailed(f"{what} returned ids outside 0..{V - 1}, e.g. {int(draws.max())}.")
    again = run.get("again")
    if not isinstance(again, torch.Tensor) or again.shape != (50,) or not torch.equal(again, draws[:50]):
        raise CheckFailed(
            f"{what}: two calls with generators seeded the same way drew different tokens. "
            "Pass the generator on: torch.multinomial(probs, 1, generator=generator); without "
            "it, PyTorch's global generator is used and a seeded run cannot be repeated."
        )
    share = torch.bincount(draws.long(), minlength=V).double() / N_DRAWS  # (V,)
    want = intended(row, temperature, top_k, top_p)
    if (share - want).abs().max().item() <= DRAW_TOL:
        judge_rng(run.get("rng"), what)
        return
    if (share.max() == 1.0).item() and want.max() < 0.99:
        raise CheckFailed(
            f"{what}: every draw picked token {int(share.argmax())}: you took the most likely "
            "token (argmax) instead of drawing from the distribution; only temperature 0 is greedy."
        )
    table = ", ".join(f"{i}: {w:.3f} vs {s:.3f}" for i, (w, s) in enumerate(zip(want.tolist(), share.tolist(), strict=True)))
    fits = [label for label, variant in _sample_variants(row, temperature, top_k, top_p).items()
            if (share - variant).abs().max().item() <= DRAW_TOL]
    if len(fits) == 1:
        raise CheckFailed(f"{what}: {fits[0]}. Intended vs measured share of each token: {table}.")
    if fits:  # these draws cannot tell the readings apart: say each, claim none
        raise CheckFailed(f"{what}: the draws fit {len(fits)} mistakes equally well, so this case cannot tell which: "
                          + "; or ".join(fits) + f". Intended vs measured share of each token: {table}.")
    pattern = _share_pattern(row, want, share) or ("the tokens do not follow the intended distribution (temperature, "
                                                   "then top-k, then top-p, then softmax)")
    raise CheckFailed(f"{what}: {pattern}. Intended vs measured share of each token: {table}.")


def _judge_greedy(rows, greedy, shapes) -> None:
    what = "sample_next(logits, temperature=0)"
    for part in ("one", "batch"):
        need(need(greedy, dict).get(part), dict)
    raise_caught(f"{what} on one row", greedy["one"], GREEDY_HINT)
    raise_caught(f"{what} on a batch", greedy["batch"], GREEDY_HINT)
    one = greedy["one"].get("out")
    if isinstance(one, torch.Tensor) and one.numel() == 1 and one.is_floating_point() and float(one) == float(rows[0].max()) \
            and float(one) != int(rows[0].argmax()):
        raise CheckFailed(
            f"{what} on one row of logits returned {float(one):g}, the largest logit itself, not its id "
            f"{int(rows[0].argmax())}: torch.max(logits, dim=-1) returns (values, indices), and [0] (or .values) is "
            "the values. Greedy returns the index: argmax(dim=-1), or max(...)[1].")
    if not isinstance(one, torch.Tensor) or one.numel() != 1 or int(one.reshape(-1)[0]) != int(rows[0].argmax()):
        raise CheckFailed(
            f"{what} on one row of logits returned {describe(one) if not isinstance(one, torch.Tensor) else one.tolist()}; "
            f"temperature 0 means greedy: the id of the largest logit, {int(rows[0].argmax())}, "
            "without dividing by 0 or drawing at random."
        )
    if tuple(one.shape) != ():
        raise CheckFailed(f"{what} on one row of shape (V,) should return a 0-d tensor, got shape {tuple(one.shape)}: "
                          "argmax(dim=-1) of a (V,) row is already 0-d, so an axis of size 1 was kept or added "
                          "(keepdim=True, an unsqueeze, or indexing with a list).")
    batch, want = greedy["batch"].get("out"), rows.argmax(dim=-1)
    if isinstance(batch, torch.Tensor) and tuple(batch.shape) == (rows.shape[1],):
        raise CheckFailed(f"{what} on a {tuple(rows.shape)} batch returned {rows.shape[1]} ids: take the argmax "
                          "over the last dimension (dim=-1).")
    if isinstance(batch, torch.Tensor) and batch.numel() == 1 and int(batch.reshape(-1)[0]) == int(rows.argmax()):
        raise CheckFailed(f"{what} on a {tuple(rows.shape)} batch returned one id, {int(batch.reshape(-1)[0])}, the "
                          "index of the largest logit in the whole batch flattened: argmax without dim= flattens; "
                          f"take it over the last dimension, argmax(dim=-1), one id per row ({want.tolist()}).")
    if not isinstance(batch, torch.Tensor) or batch.shape != want.shape or not torch.equal(batch.long(), want):
        tie = ""
        if isinstance(batch, torch.Tensor) and batch.shape == want.shape:
            wrong = (batch.long() != want).nonzero().flatten().tolist()
            top = [rows[r].eq(rows[r].max()).nonzero().flatten().tolist() for r in wrong]
            if wrong and all(len(t) > 1 and int(batch.reshape(-1)[r]) in t for r, t in zip(wrong, top, strict=True)):
                r, t = wrong[0], top[0]
                tie = (f" Row {r} has its largest logit at ids {t} (a tie, {float(rows[r].max()):g} each): argmax takes "
                       f"the first, {t[0]}; yours took {int(batch.reshape(-1)[r])}, another of the tied ones. Is the largest "
                       "taken from the end of an ascending sort (argsort(...)[..., -1]) or by a scan that keeps the last "
                       "with >=? Greedy is the argmax, the first largest.")
        raise CheckFailed(f"{what} on a {tuple(rows.shape)} batch returned {describe(batch)} "
                          f"{batch.tolist() if isinstance(batch, torch.Tensor) else ''}; greedy picks {want.tolist()}.{tie}")
    if greedy["batch"].get("drew") is True:
        raise CheckFailed(f"{what} on a {tuple(rows.shape)} batch returned the right ids, but it drew from the generator "
                          "(its state moved): greedy takes the argmax and draws nothing. Is temperature 0 replaced by a "
                          "tiny one and then sampled? That uses up the generator's numbers, and logits tied for the "
                          "largest (or closer than the tiny temperature can tell apart) are picked at random.")
    need(shapes, dict)
    for label, shape in (("one row", ()), ("a batch of one row", (1,))):
        raise_caught(f"sample_next on {label} (temperature 1)", shapes.get(label), SAMPLE_ERRORS)
        out = shapes.get(label, {}).get("out")
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
            raise CheckFailed(
                f"sample_next on {label} of logits, {'(V,)' if not shape else '(1, V)'}, at temperature 1 returned "
                f"{describe(out)}; it should return shape {shape}: one id per row, and a 0-d tensor for a single row "
                "(reshape the draws to logits.shape[:-1]; squeeze() or reshape(-1) get one of the two wrong).")


def _judge_sample(cases, greedy_rows):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        for case, run in zip(cases, found, strict=True):
            _judge_draws(*case, run)
        unseeded = data.get("unseeded") if isinstance(data.get("unseeded"), dict) else {}
        what = "sample_next(logits, temperature=1.0) with no generator, called twice, each time after torch.manual_seed(11)"
        for key in ("first", "second"):
            raise_caught(what, unseeded.get(key), SAMPLE_ERRORS)
        judge_unseeded(unseeded, what)
        _judge_greedy(torch.tensor(greedy_rows), data.get("greedy"), data.get("shapes"))
        names = ", ".join(c[0] for c in cases)
        return (f"sample_next: {names}: the draws follow the intended distribution and repeat with the same "
                "generator, and with none, from the global generator as seeded; temperature 0 is greedy (argmax), one "
                "row or a batch; the shapes are () and (N,).")

    return judge


check_sample_next = Check("check_sample_next", _probe_sample(SAMPLE_CASES, GREEDY_ROWS), _judge_sample(SAMPLE_CASES, GREEDY_ROWS))
check_sample_next_hidden = Check(
    "check_sample_next_hidden", _probe_sample(SAMPLE_HIDDEN_CASES, GREEDY_HIDDEN_ROWS),
    _judge_sample(SAMPLE_HIDDEN_CASES, GREEDY_HIDDEN_ROWS), hidden=True,
)
