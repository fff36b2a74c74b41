"""Checks for lesson 01 (tokens and embeddings): embedding_and_head_parameters(n_vocab, emb_dim,
tie_weights, head_bias), the parameter count of an embedding table and an output head by formula,
against num_parameters of the real modules.

Shape legend: V vocabulary size (n_vocab), C embedding size (emb_dim).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from helpers.checks.core import CheckFailed, describe, expect_callable, runs, visible_and_hidden
from helpers.checks.errors import attempt, raise_caught
from helpers.params import num_parameters

# ---------------------------------------------------------------------------------------------
# embedding_and_head_parameters(n_vocab, emb_dim, tie_weights, head_bias) -> int

# (n_vocab, emb_dim, tie_weights, head_bias)
COUNT_CASES = [(256, 5, t, b) for t in (True, False) for b in (False, True)] + [(100, 7, True, True), (100, 7, False, False)]
COUNT_HIDDEN_CASES = [(50257, 768, True, False), (50257, 768, False, True), (3, 11, False, True), (1, 1, True, True),
                      (65, 384, False, False)]
# small sizes at which every flag setting is also counted, to read the student's formula off
FLAGS = [(t, b) for t in (True, False) for b in (False, True)]
GRID = [(11, 3), (13, 3), (11, 4), (13, 4)]  # (V, C)


def _probe_count(cases):
    def probe(count) -> dict:
        expect_callable(count, "embedding_and_head_parameters")
        grid = [attempt(count, V, C, t, b).get("out") for t, b in FLAGS for V, C in GRID]
        left_out = attempt(count, *cases[0][:2]).get("out")  # the flags left out: the signature's defaults
        return {"runs": [attempt(count, *case) for case in cases], "grid": [g if type(g) is int else None for g in grid],
                "defaults": _defaults(count), "left_out": left_out if type(left_out) is int else None}

    return probe


#: the contract's defaults of the two flags
DEFAULTS = {"tie_weights": True, "head_bias": False}


def _defaults(count) -> dict:
    """The defaults the student's signature gives the two flags, as text (None: the flag has none)."""
    try:
        parameters = inspect.signature(count).parameters
    except (TypeError, ValueError):
        return {}
    return {name: None if parameters[name].default is inspect.Parameter.empty else repr(parameters[name].default)
            for name in DEFAULTS if name in parameters}


def _defaults_said(case, data: dict) -> str | None:
    """What is wrong with the flags' defaults, read off the signature and a call that leaves them out."""
    V, C = case[:2]
    wrong = [f"{name} with no default" if given is None else f"{name}={given}"
             for name, given in (data.get("defaults") or {}).items() if given != repr(DEFAULTS[name])]
    left_out, want = data.get("left_out"), real_count(V, C, **DEFAULTS)
    if not wrong and (left_out is None or left_out == want):
        return None
    called = (f"embedding_and_head_parameters({V}, {C}), the flags left out, returned {left_out:,} where the "
              f"contract's defaults give {want:,}" if left_out is not None and left_out != want else "")
    said = f"your signature's default{'s are' if len(wrong) > 1 else ' is'} {', '.join(wrong)}" if wrong else ""
    return (f"{'; '.join(x for x in (said, called) if x)}: the contract's defaults are tie_weights=True, head_bias=False "
            "(a call that leaves the flags out counts a tied head without a bias).")


def real_count(n_vocab: int, emb_dim: int, tie_weights: bool, head_bias: bool) -> int:
    """num_parameters of the real modules. Large ones go on the meta device (no memory); small ones
    stay on the CPU, because the meta device imports torch._dynamo, which takes seconds."""
    device = "meta" if n_vocab * emb_dim > 1_000_000 else "cpu"
    pair = nn.ModuleDict({
        "embedding": nn.Embedding(n_vocab, emb_dim, device=device),
        "head": nn.Linear(emb_dim, n_vocab, bias=head_bias, device=device),
    })
    if tie_weights:
        pair["head"].weight = pair["embedding"].weight
    return num_parameters(pair)


COUNT_VARIANTS = {
    "a tied weight is counted twice: when the head reuses the table there is one (V, C) tensor, "
    "and a shared tensor counts once": lambda V, C, t, b: 2 * V * C + b * V,
    "the head's bias is counted with emb_dim entries; a bias has one entry per output, and the head "
    "outputs n_vocab scores": lambda V, C, t, b: V * C * (1 if t else 2) + b * C,
    "the head's bias is missing from the count": lambda V, C, t, b: V * C * (1 if t else 2),
    "tie_weights=False is counted like a tied head: an untied head has its own (V, C) weight": lambda V, C, t, b: V * C + b * V,
    "tying is counted as if it removed the bias too; tying shares only the weight": lambda V, C, t, b: V * C * (1 if t else 2) + (0 if t else b * V),
    "tie_weights is read backwards (tied counted twice, untied once)": lambda V, C, t, b: V * C * (2 if t else 1) + b * V,
}


def _formula(values: list) -> tuple[int, int, int, int] | None:
    """(a, p, q, r) with count = a·V·C + p·V + q·C + r at the four GRID points, when whole numbers."""
    if any(v is None for v in values):
        return None
    (v1, v2, v3, v4), (V1, V2), (C1, C2) = values, (11, 13), (3, 4)
    a = (v4 - v3 - v2 + v1) / ((V2 - V1) * (C2 - C1))
    p = (v2 - v1) / (V2 - V1) - a * C1
    q = (v3 - v1) / (C2 - C1) - a * V1
    r = v1 - a * V1 * C1 - p * V1 - q * C1
    if not all(float(x).is_integer() for x in (a, p, q, r)):
        return None
    return int(a), int(p), int(q), int(r)


def _say(a: int, p: int, q: int, r: int) -> str:
    terms = [(a, "V·C"), (p, "V"), (q, "C"), (r, "")]
    text = " + ".join(f"{k if k != 1 or not s else ''}{s}" if s else str(k) for k, s in terms if k)
    return (text or "0").replace("+ -", "- ")


def _count_cause(grid: list) -> str | None:
    """The student's count read as a formula of V and C for each flag setting, and what differs."""
    if not isinstance(grid, list) or len(grid) != len(FLAGS) * len(GRID):
        return None
    for k, (t, b) in enumerate(FLAGS):
        got = _formula(grid[4 * k: 4 * k + 4])
        want = (1 if t else 2, int(b), 0, 0)
        if got is None or got == want:
            continue
        a, p, q, r = got
        if (a, p, q, r) == (want[0] - 1, want[1] + 1, 1, 0):
            return (f"with tie_weights={t}, head_bias={b} your count is {_say(*got)}: a (V, C) table has V·C "
                    "entries, a product, not V + C")
        why = []
        if a != want[0]:
            n = abs(a - want[0])
            why.append(f"{n} (V, C) matri{'ces' if n > 1 else 'x'} too {'many' if a > want[0] else 'few'}")
        if p != want[1]:
            why.append("a bias of V entries although head_bias=False" if not b else "the bias's V entries "
                       "are missing" if not p else f"{_say(0, p, 0, 0)} where the bias has V (one per output score)")
        if q:
            why.append(f"{_say(0, 0, q, 0)} too many: nothing has C entries alone (the bias has one per "
                       "output, V; a table has exactly V rows)")
        if r:
            why.append(f"a constant {r} that no module has")
        return (f"with tie_weights={t}, head_bias={b} your count is {_say(*got)}, but the modules have "
                f"{_say(*want)}: {'; '.join(why)}")
    return None


def _judge_count(cases):
    def judge(data: dict) -> str:
        got = []
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            what = "embedding_and_head_parameters({}, {}, tie_weights={}, head_bias={})".format(*case)
            raise_caught(what, run)
            out = run.get("out")
            if isinstance(out, bool) or not isinstance(out, int):
                hint = ""
                if isinstance(out, float) and out == int(out):
                    hint = " (a float: use // or int arithmetic only)"
                elif isinstance(out, torch.Tensor):
                    hint = " (a tensor: compute with Python ints from the sizes)"
                raise CheckFailed(f"{what} should return an int, got {describe(out)}{hint}.")
            got.append(out)
        expected = [real_count(*case) for case in cases]
        if got != expected:
            label = next(
                (name for name, formula in COUNT_VARIANTS.items() if got == [formula(*case) for case in cases]),
                None,
            ) or _count_cause(data.get("grid"))
            k = next(i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
            V, C, t, b = cases[k]
            evidence = (
                f"embedding_and_head_parameters({V}, {C}, tie_weights={t}, head_bias={b}) returned {got[k]:,}, "
                f"but num_parameters of nn.Embedding({V}, {C}) + nn.Linear({C}, {V}, bias={b})"
                f"{' with the weight tied' if t else ''} is {expected[k]:,}"
            )
            raise CheckFailed(f"{label}. Evidence: {evidence}." if label else f"{evidence}.")
        defaults = _defaults_said(cases[0], data)
        if defaults:
            raise CheckFailed(f"the counts are right when every flag is given, but {defaults}")
        sizes = ", ".join(f"V={V} C={C} {'tied' if t else 'untied'}{' +bias' if b else ''}" for V, C, t, b in cases)
        return f"embedding_and_head_parameters matches num_parameters of real modules: {sizes}."

    return judge


def _other_sizes(case, rng):
    """While grading: other sizes, the same flags."""
    _, _, tie_weights, head_bias = case
    return rng.randint(2, 60_000), rng.randint(1, 1024), tie_weights, head_bias


check_parameter_count, check_parameter_count_hidden = visible_and_hidden(
    "check_parameter_count", _probe_count, _judge_count, COUNT_CASES, COUNT_HIDDEN_CASES, _other_sizes
)
