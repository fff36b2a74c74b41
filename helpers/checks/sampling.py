"""Checks for lesson 08 (generation): temperature, top-k, top-p and drawing the next token.

The filters are checked on fixed logits, chosen so that every classic mistake gives a different
answer: ties at the k-th value, cumulative probabilities well away from p, rows whose most likely
tokens are not in vocabulary order. ``sample_next`` is checked on a large batch of identical rows:
the share of each token among thousands of draws must match the intended distribution.

Shape legend: V vocabulary size, N rows (a batch of positions). No two sizes are equal.
"""

from __future__ import annotations

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
from helpers.reference import sampling as ref

INF = float("inf")


def _fn(obj, name: str):
    if not callable(obj):
        raise CheckFailed(f"expected the function {name}, got {describe(obj)}")
    return obj


def _logits(probs: list[list[float]] | list[float], dtype=torch.float64) -> torch.Tensor:
    """Logits whose softmax is ``probs`` (up to rounding), shifted so they are not just log-probs."""
    p = torch.tensor(probs, dtype=torch.float64)
    return (p.log() + 1.7).to(dtype)


def _call(fn, *args, **kwargs) -> dict:
    """Run the student's function; an exception becomes data the judge explains."""
    try:
        return {"out": fn(*args, **kwargs)}
    except Exception as exc:  # noqa: BLE001 - the judge explains the error
        return {"error": f"{type(exc).__name__}: {exc}"[:1500]}


def _raise_error(what: str, run: dict, hints: dict[str, str]) -> None:
    """Fail with the error the student's function raised, explained when it is a known one."""
    if "error" not in run:
        return
    error = str(run["error"])
    for needle, hint in hints.items():
        if needle in error:
            raise CheckFailed(f"{what} raised {error}. {hint}")
    raise CheckFailed(f"{what} raised {error}.")


def _not_in_place(before: torch.Tensor, after, what: str) -> None:
    if isinstance(after, torch.Tensor) and after.shape == before.shape and not close(before, after, 0, 0):
        raise CheckFailed(
            f"{what} changed its input in place ({first_mismatch(before, after, 0, 0)}). Return a new "
            "tensor: the caller still needs the original logits (the next filter, the next sample)."
        )


# ---------------------------------------------------------------------------------------------
# apply_temperature(logits, temperature) -> logits / temperature

# (name, logits, temperature)
TEMPERATURE_CASES = [
    ("one row", _logits([0.5, 0.2, 0.15, 0.1, 0.05]), 0.5),
    ("two rows", _logits([[0.1, 0.6, 0.3], [0.3, 0.3, 0.4]], torch.float32), 2.5),
]
TEMPERATURE_HIDDEN_CASES = [
    ("a (2, 3, 4) batch", torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64), 0.7),
    ("an int temperature", _logits([0.05, 0.7, 0.25]), 3),
    ("float32 logits", _logits([0.2, 0.3, 0.1, 0.4], torch.float32), 1.0),
]


def _probe_temperature(cases):
    def probe(apply_temperature) -> dict:
        _fn(apply_temperature, "apply_temperature")
        runs = []
        for _, logits, temperature in cases:
            x = logits.clone()
            runs.append({**_call(apply_temperature, x, temperature), "input_after": x})
        return {"runs": runs}

    return probe


def _judge_temperature(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for (name, logits, t), run in zip(cases, runs, strict=True):
            what = f"apply_temperature(logits, {t}) on {name}, shape {tuple(logits.shape)}"
            expected = ref.apply_temperature(logits.clone(), t)
            _raise_error(what, run, {})
            out = run["out"]
            _not_in_place(logits, run["input_after"], what)
            out = expect_tensor(out, tuple(logits.shape), what)
            tol = 1e-12 if logits.dtype == torch.float64 else 1e-6
            if close(expected, out, tol, tol):
                continue
            variants = {
                "you multiplied by the temperature instead of dividing: a high temperature must flatten "
                "the distribution (logits / temperature shrinks their differences)": logits * t,
                "you returned probabilities (a softmax): return logits, divided by the temperature; "
                "the softmax comes later, after the filters": torch.softmax(logits / t, dim=-1),
                "you divided the probabilities, not the logits: softmax(logits) / temperature is a rescaled "
                "distribution that renormalises to the same one, so the temperature has no effect":
                    torch.softmax(logits, dim=-1) / t,
                "you returned the logits unchanged": logits,
            }
            label = identify(out, variants, tol, tol)
            evidence = first_mismatch(expected, out, tol, tol)
            if label:
                raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            raise CheckFailed(f"{what} should return logits / temperature. Evidence: {evidence}.")
        return (
            "apply_temperature: " + ", ".join(f"{c[0]} (temperature {c[2]:g})" for c in cases)
            + ": logits / temperature, input untouched."
        )

    return judge


check_temperature = Check("check_temperature", _probe_temperature(TEMPERATURE_CASES), _judge_temperature(TEMPERATURE_CASES))
check_temperature_hidden = Check(
    "check_temperature_hidden",
    _probe_temperature(TEMPERATURE_HIDDEN_CASES),
    _judge_temperature(TEMPERATURE_HIDDEN_CASES),
    hidden=True,
)

# ---------------------------------------------------------------------------------------------
# top_k_filter(logits, k) -> logits with -inf below the k-th largest of each row


def top_k_expected(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep every logit at least as large as the k-th largest of its row (ties at the k-th kept)."""
    k = min(k, logits.shape[-1])
    kth = logits.sort(dim=-1, descending=True).values[..., k - 1 : k]  # (..., 1)
    return logits.masked_fill(logits < kth, -INF)


def _only_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Exactly k entries per row by topk's indices: ties at the k-th value lose some."""
    k = min(k, logits.shape[-1])
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, logits.topk(k, dim=-1).indices, True)
    return logits.masked_fill(~keep, -INF)


# (name, logits, k)
TOP_K_CASES = [
    ("one row", torch.tensor([1.0, 3.5, -0.5, 2.0, 0.25, 3.0, -2.0], dtype=torch.float64), 3),
    ("two rows with a tie at the k-th value", torch.tensor(
        [[0.3, 2.0, 1.1, 1.1, -1.0, 0.9], [2.5, -0.2, 0.4, 1.7, 0.4, 0.0]], dtype=torch.float32), 3),
]
TOP_K_HIDDEN_CASES = [
    ("k = 1, with a tie", torch.tensor([[0.1, -0.3, 0.7, 0.2], [1.2, 0.4, -0.1, 1.2], [0.0, 0.3, 0.5, 0.45]]), 1),
    ("k larger than the vocabulary", torch.tensor([0.4, -1.0, 2.0], dtype=torch.float64), 5),
    ("a (2, 3, 5) batch", torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(8), dtype=torch.float64), 2),
]


def _probe_top_k(cases):
    def probe(top_k_filter) -> dict:
        _fn(top_k_filter, "top_k_filter")
        runs = []
        for _, logits, k in cases:
            x = logits.clone()
            runs.append({**_call(top_k_filter, x, k), "input_after": x})
        return {"runs": runs}

    return probe


def _judge_top_k(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for (name, logits, k), run in zip(cases, runs, strict=True):
            what = f"top_k_filter(logits, k={k}) on {name}, shape {tuple(logits.shape)}"
            _raise_error(what, run, {
                "out of range": f"k = {k} is more than the {logits.shape[-1]} tokens of a row: then keep "
                "them all (k = min(k, logits.shape[-1])).",
            })
            _not_in_place(logits, run["input_after"], what)
            out = expect_tensor(run["out"], tuple(logits.shape), what)
            expected = ref.top_k_filter(logits.clone(), k)
            if close(expected, out, 0, 0):
                continue
            V = logits.shape[-1]
            variants = {
                f"you kept k+1 = {k + 1} tokens per row (an off-by-one: the k-th largest value is at "
                "index k-1 of the sorted logits)": top_k_expected(logits, k + 1),
                "you dropped the k-th largest token itself (a strict > comparison with the k-th value, "
                "or index k-1 one too far): keep the logits >= the k-th largest":
                    top_k_expected(logits, k - 1) if k > 1 else torch.full_like(logits, -INF),
                "you kept exactly k tokens by index, so a token tied with the k-th largest value was "
                "dropped; keep every logit >= the k-th largest value (ties all stay)": _only_k(logits, k),
                "you kept the k smallest logits: sort in descending order (or use torch.topk)":
                    logits.masked_fill(logits > logits.sort(dim=-1).values[..., min(k, V) - 1 : min(k, V)], -INF),
                "you put 0 instead of -inf on the removed tokens: exp(0) = 1 still gives them "
                "probability after the softmax": expected.masked_fill(expected == -INF, 0.0),
                "you returned probabilities: return the logits with -inf on the removed tokens":
                    torch.softmax(expected, dim=-1),
            }
            if logits.dim() > 1:
                flat_kth = logits.reshape(-1).sort(descending=True).values[min(k, V) - 1]
                variants["you took the k-th largest value of the whole batch instead of each row's: "
                         "sort or topk along the last dimension (dim=-1)"] = logits.masked_fill(logits < flat_kth, -INF)
            label = identify(out, {key: v for key, v in variants.items() if v.shape == out.shape}, 0, 1e-6)
            evidence = first_mismatch(expected, out, 0, 0)
            if label:
                raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            raise CheckFailed(
                f"{what}: keep the logits at least as large as the k-th largest of their row, unchanged, "
                f"and put -inf everywhere else. Evidence: {evidence}."
            )
        return (
            "top_k_filter: " + ", ".join(f"{c[0]} (k={c[2]})" for c in cases)
            + ": every logit >= the row's k-th largest kept unchanged, ties included, the rest -inf."
        )

    return judge


check_top_k = Check("check_top_k", _probe_top_k(TOP_K_CASES), _judge_top_k(TOP_K_CASES))
check_top_k_hidden = Check(
    "check_top_k_hidden", _probe_top_k(TOP_K_HIDDEN_CASES), _judge_top_k(TOP_K_HIDDEN_CASES), hidden=True
)

# ---------------------------------------------------------------------------------------------
# top_p_filter(logits, p) -> logits with -inf outside the nucleus


def top_p_expected(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens, in order, until their probabilities add up to p or more."""
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # (..., V): mass of the more likely tokens
    drop_sorted = mass_before >= p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, -INF)


def _top_p_variants(logits: torch.Tensor, p: float) -> dict[str, torch.Tensor]:
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    cum = sorted_probs.cumsum(dim=-1)

    def unsort(drop_sorted):
        return torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)

    expected = top_p_expected(logits, p)
    cum_unsorted = probs.cumsum(dim=-1)
    asc_probs, asc_order = probs.sort(dim=-1)
    asc_drop = (asc_probs.cumsum(dim=-1) - asc_probs) >= p
    return {
        "you dropped the token that crosses p (an off-by-one): keep tokens until the kept mass "
        "reaches p, including the one that takes it over p; drop a token only when the tokens "
        "before it already add up to p": logits.masked_fill(unsort(cum > p), -INF),
        "you also dropped the token whose cumulative probability equals or crosses p (cum >= p): "
        "the token that takes the mass to p or over must be kept": logits.masked_fill(unsort(cum >= p), -INF),
        "you did not sort: the cumulative sum must run over the tokens from most to least likely, "
        "not in vocabulary order": logits.masked_fill((cum_unsorted - probs) >= p, -INF),
        "you applied the mask computed in sorted order to the logits in vocabulary order; map it "
        "back with scatter (or index with the sort's indices)": logits.masked_fill((cum - sorted_probs) >= p, -INF),
        "you sorted in ascending order: the nucleus is made of the most likely tokens":
            logits.masked_fill(torch.zeros_like(asc_drop).scatter(-1, asc_order, asc_drop), -INF),
        "you put 0 instead of -inf on the removed tokens: exp(0) = 1 still gives them probability "
        "after the softmax": expected.masked_fill(expected == -INF, 0.0),
        "you returned probabilities: return the logits with -inf on the removed tokens":
            torch.softmax(expected.double(), dim=-1).to(logits.dtype),
    }


# (name, logits, p): no cumulative probability is within 1e-3 of p
TOP_P_CASES = [
    ("one row", _logits([0.1, 0.4, 0.06, 0.15, 0.25, 0.04]), 0.7),
    ("two rows", _logits([[0.05, 0.3, 0.2, 0.45], [0.22, 0.28, 0.26, 0.24]], torch.float32), 0.6),
]
TOP_P_HIDDEN_CASES = [
    ("p below the top probability", _logits([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]]), 0.35),
    ("a (2, 2, 5) batch", _logits([[[0.1, 0.2, 0.3, 0.15, 0.25], [0.5, 0.05, 0.05, 0.3, 0.1]],
                                   [[0.02, 0.08, 0.6, 0.2, 0.1], [0.3, 0.3, 0.1, 0.2, 0.1]]]), 0.85),
    ("p = 0.95", _logits([0.01, 0.5, 0.02, 0.3, 0.17], torch.float32), 0.95),
]


def _probe_top_p(cases):
    def probe(top_p_filter) -> dict:
        _fn(top_p_filter, "top_p_filter")
        runs = []
        for _, logits, p in cases:
            x = logits.clone()
            runs.append({**_call(top_p_filter, x, p), "input_after": x})
        return {"runs": runs}

    return probe


def _judge_top_p(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for (name, logits, p), run in zip(cases, runs, strict=True):
            what = f"top_p_filter(logits, p={p}) on {name}, shape {tuple(logits.shape)}"
            _raise_error(what, run, {})
            _not_in_place(logits, run["input_after"], what)
            out = expect_tensor(run["out"], tuple(logits.shape), what)
            expected = ref.top_p_filter(logits.clone(), p)
            if close(expected, out, 0, 0):
                continue
            kept = (out != -INF) & ~torch.isnan(out)
            if out.dtype.is_floating_point and (~kept.any(dim=-1)).any():
                raise CheckFailed(
                    f"{what}: a row has every token removed (all -inf, or NaN): the most likely token "
                    "must always stay, even when its probability alone is more than p. Drop a token only "
                    "when the tokens before it already add up to p."
                )
            label = identify(out, _top_p_variants(logits, p), 0, 1e-6)
            evidence = first_mismatch(expected, out, 0, 0)
            if label:
                raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            raise CheckFailed(
                f"{what}: keep the smallest set of most likely tokens whose probabilities add up to p or "
                f"more, with their logits unchanged, and -inf elsewhere. Evidence: {evidence}."
            )
        return (
            "top_p_filter: " + ", ".join(f"{c[0]} (p={c[2]})" for c in cases)
            + ": the most likely tokens up to and including the one that takes the mass to p kept "
            "unchanged, the rest -inf."
        )

    return judge


check_top_p = Check("check_top_p", _probe_top_p(TOP_P_CASES), _judge_top_p(TOP_P_CASES))
check_top_p_hidden = Check(
    "check_top_p_hidden", _probe_top_p(TOP_P_HIDDEN_CASES), _judge_top_p(TOP_P_HIDDEN_CASES), hidden=True
)

# ---------------------------------------------------------------------------------------------
# sample_next(logits, temperature, top_k, top_p, generator) -> token ids

N_DRAWS = 8000  # identical rows per case: the share of each token among them is measured
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
]
GREEDY_ROWS = [[0.1, 2.0, -1.0, 0.5, 0.3], [1.5, -0.5, 0.2, 1.4, 0.0], [-0.3, -0.2, -0.1, -0.4, -0.6]]
GREEDY_HIDDEN_ROWS = [[0.4, -0.1, 0.2, 0.9], [2.0, 1.0, 3.0, -1.0]]


def intended(row, temperature, top_k, top_p) -> torch.Tensor:
    """The distribution sample_next should draw from: temperature, then top-k, then top-p (the reference's filters)."""
    logits = ref.apply_temperature(torch.tensor(row, dtype=torch.float64), temperature)
    if top_k is not None:
        logits = ref.top_k_filter(logits, top_k)
    if top_p is not None:
        logits = ref.top_p_filter(logits, top_p)
    return torch.softmax(logits, dim=-1)


def _sample_variants(row, temperature, top_k, top_p) -> dict[str, torch.Tensor]:
    raw = torch.tensor(row, dtype=torch.float64)

    def dist(logits):
        return torch.softmax(logits, dim=-1)

    def filtered(logits):
        if top_k is not None:
            logits = top_k_expected(logits, top_k)
        if top_p is not None:
            logits = top_p_expected(logits, top_p)
        return logits

    variants = {
        "the temperature multiplies the logits instead of dividing them": dist(filtered(raw * temperature)),
        "the temperature has no effect (divide the logits by it before the softmax, not the "
        "probabilities after it)": dist(filtered(raw)),
        "the filters are ignored (top_k / top_p must remove tokens before the softmax)": dist(raw / temperature),
    }
    if top_p is not None:
        variants["you applied top-p before the temperature: divide by the temperature first, then filter"] = dist(
            top_p_expected(top_k_expected(raw, top_k) if top_k else raw, top_p) / temperature)
    return variants


def _swap_filters(sample_next):
    """Put the course's filters in place of the notebook's while the probe runs.

    ``sample_next`` calls ``apply_temperature``, ``top_k_filter`` and ``top_p_filter`` by name; a
    mistake in those is counted by their own checks, not a second time here.
    """
    scope = getattr(sample_next, "__globals__", None)
    if not isinstance(scope, dict):
        return {}
    replacements = {
        "apply_temperature": lambda logits, temperature: logits / temperature,
        "top_k_filter": top_k_expected,
        "top_p_filter": lambda logits, p: top_p_expected(logits, p).to(logits.dtype),
    }
    saved = {}
    for name, fn in replacements.items():
        if name in scope:
            saved[name] = scope[name]
            scope[name] = fn
    return saved


def _restore(sample_next, saved):
    scope = getattr(sample_next, "__globals__", None)
    if isinstance(scope, dict):
        scope.update(saved)


def _probe_sample(cases, greedy_rows):
    def probe(sample_next) -> dict:
        _fn(sample_next, "sample_next")
        saved = _swap_filters(sample_next)
        try:
            runs = []
            for _, row, temperature, top_k, top_p in cases:
                logits = torch.tensor(row, dtype=torch.float32).expand(N_DRAWS, len(row)).clone()  # (N, V)
                options = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
                run = _call(sample_next, logits, **options, generator=torch.Generator().manual_seed(7))
                torch.rand(3)  # move the global generator on: only the given generator may matter
                if "out" in run:
                    again = _call(sample_next, logits[:50], **options, generator=torch.Generator().manual_seed(7))
                    run["again"] = again.get("out", again.get("error"))
                runs.append(run)
            result = {"runs": runs}
            if greedy_rows:
                rows = torch.tensor(greedy_rows)
                options = {"temperature": 0.0, "top_k": None, "top_p": None}
                result["greedy"] = {
                    "one": _call(sample_next, rows[0], **options, generator=torch.Generator().manual_seed(1)),
                    "batch": _call(sample_next, rows, **options, generator=torch.Generator().manual_seed(1)),
                }
            return result
        finally:
            _restore(sample_next, saved)

    return probe


SAMPLE_ERRORS = {
    "probability tensor contains": "torch.multinomial got probabilities with inf, NaN or negative "
    "entries: the filters put -inf on logits, so apply them before the softmax, never to probabilities "
    "(softmax before filtering), and do not divide by a temperature of 0.",
    "NoneType": "top_k=None or top_p=None means: skip that filter (if top_k is not None: ...).",
}


def _judge_sample(cases, greedy_rows):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for (name, row, temperature, top_k, top_p), run in zip(cases, runs, strict=True):
            V = len(row)
            what = (f"sample_next on {N_DRAWS} copies of one row of {V} logits with {name} "
                    f"(temperature={temperature}, top_k={top_k}, top_p={top_p})")
            _raise_error(what, run, SAMPLE_ERRORS)
            draws = run.get("out")
            if isinstance(draws, torch.Tensor) and tuple(draws.shape) == (N_DRAWS, 1):
                raise CheckFailed(
                    f"{what} returned shape (N, 1); return one id per row, shape (N,): "
                    "torch.multinomial(probs, 1, ...) gives (N, 1), take [:, 0] or squeeze(-1)."
                )
            draws = expect_tensor(draws, (N_DRAWS,), what)
            if draws.dtype.is_floating_point or draws.dtype == torch.bool:
                raise CheckFailed(f"{what} returned {draws.dtype} values; return token ids (torch.long).")
            if draws.min() < 0 or draws.max() >= V:
                raise CheckFailed(f"{what} returned ids outside 0..{V - 1}, e.g. {int(draws.max())}.")
            again = expect_tensor(run.get("again"), (50,), what)
            if not torch.equal(again, draws[:50]):
                raise CheckFailed(
                    f"{what}: two calls with generators seeded the same way drew different tokens. "
                    "Pass the generator on: torch.multinomial(probs, 1, generator=generator); without "
                    "it, PyTorch's global generator is used and a seeded run cannot be repeated."
                )
            share = torch.bincount(draws.long(), minlength=V).double() / N_DRAWS  # (V,)
            want = intended(row, temperature, top_k, top_p)
            gap = (share - want).abs().max().item()
            if gap <= DRAW_TOL:
                continue
            if (share.max() == 1.0).item() and want.max() < 0.99:
                raise CheckFailed(
                    f"{what}: every draw picked token {int(share.argmax())}: you took the most likely "
                    "token (argmax) instead of drawing from the distribution; only temperature 0 is greedy."
                )
            table = ", ".join(f"{i}: {w:.3f} vs {s:.3f}" for i, (w, s) in enumerate(zip(want.tolist(), share.tolist(), strict=True)))
            for label, variant in _sample_variants(row, temperature, top_k, top_p).items():
                if (share - variant).abs().max().item() <= DRAW_TOL:
                    raise CheckFailed(f"{what}: {label}. Intended vs measured share of each token: {table}.")
            raise CheckFailed(
                f"{what}: the tokens do not follow the intended distribution (temperature, then top-k, "
                f"then top-p, then softmax). Intended vs measured share of each token: {table}."
            )
        if greedy_rows:
            g = data.get("greedy")
            if not isinstance(g, dict):
                raise CheckFailed("the check's data is incomplete")
            rows = torch.tensor(greedy_rows)
            what = "sample_next(logits, temperature=0)"
            greedy_hint = {"": "Temperature 0 means greedy: return the id of the largest logit (argmax) "
                           "before dividing by the temperature."}
            if not isinstance(g.get("one"), dict) or not isinstance(g.get("batch"), dict):
                raise CheckFailed("the check's data is incomplete")
            _raise_error(f"{what} on one row", g["one"], greedy_hint)
            _raise_error(f"{what} on a batch", g["batch"], greedy_hint)
            one = g["one"].get("out")
            if not isinstance(one, torch.Tensor) or one.numel() != 1 or int(one.reshape(-1)[0]) != int(rows[0].argmax()):
                raise CheckFailed(
                    f"{what} on one row of logits returned {describe(one) if not isinstance(one, torch.Tensor) else one.tolist()}; "
                    f"temperature 0 means greedy: the id of the largest logit, {int(rows[0].argmax())}, "
                    "without dividing by 0 or drawing at random."
                )
            if tuple(one.shape) != ():
                raise CheckFailed(f"{what} on one row of shape (V,) should return a 0-d tensor, got shape {tuple(one.shape)}.")
            batch = g["batch"].get("out")
            want = rows.argmax(dim=-1)
            if isinstance(batch, torch.Tensor) and tuple(batch.shape) == (rows.shape[1],):
                raise CheckFailed(
                    f"{what} on a {tuple(rows.shape)} batch returned {rows.shape[1]} ids: take the argmax "
                    "over the last dimension (dim=-1)."
                )
            batch = expect_tensor(batch, (rows.shape[0],), f"{what} on a {tuple(rows.shape)} batch")
            if not torch.equal(batch.long(), want):
                raise CheckFailed(f"{what} on a {tuple(rows.shape)} batch returned {batch.tolist()}; greedy picks {want.tolist()}.")
        names = ", ".join(c[0] for c in cases)
        extra = "; temperature 0 is greedy (argmax), one row or a batch" if greedy_rows else ""
        return f"sample_next: {names}: the draws follow the intended distribution and repeat with the same generator{extra}."

    return judge


check_sample_next = Check(
    "check_sample_next", _probe_sample(SAMPLE_CASES, GREEDY_ROWS), _judge_sample(SAMPLE_CASES, GREEDY_ROWS)
)
check_sample_next_hidden = Check(
    "check_sample_next_hidden",
    _probe_sample(SAMPLE_HIDDEN_CASES, GREEDY_HIDDEN_ROWS),
    _judge_sample(SAMPLE_HIDDEN_CASES, GREEDY_HIDDEN_ROWS),
    hidden=True,
)

__all__ = [
    "check_sample_next",
    "check_sample_next_hidden",
    "check_temperature",
    "check_temperature_hidden",
    "check_top_k",
    "check_top_k_hidden",
    "check_top_p",
    "check_top_p_hidden",
    "intended",
    "top_k_expected",
    "top_p_expected",
]
