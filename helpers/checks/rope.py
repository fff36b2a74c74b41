"""Checks for lesson 09 (fast generation): rotary position embeddings (RoPE).

``apply_rope`` is compared with the lesson's convention (halves: feature i pairs with feature
i + hs/2, angle position * 10000 ** (-2i / hs)) on float64 inputs, and on a property every RoPE
has: the dot product of a rotated query and a rotated key depends only on their distance, so
shifting every position by the same amount leaves every score as it was.
``RotarySelfAttention`` is run in chunks with its own cache, as Exercise 1's attention; while it
runs, the notebook's ``apply_rope`` is replaced by the course's (``known_good_rope``), so the
check judges the attention alone.

Shape legend: B batch, T time, C embedding size, nh heads, hs head size. No two sizes are equal.
"""

from __future__ import annotations

import inspect
import math

import torch

from helpers.checks import kv_cache as cached
from helpers.checks.core import (
    CheckFailed,
    close,
    describe,
    expect_callable,
    expect_default_dtype,
    expect_module_class,
    first_mismatch,
    identify,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import attempt, caught, raise_caught
from helpers.checks.invariants import input_gradients, judge_input_gradients
from helpers.checks.rope_known import known_good_rope, rotary_chained
from helpers.checks.verdict import load_weights, tolerance

ROPE_MISTAKES = {
    "float32-angles": "the angles are computed at float32 precision: position times frequency keeps about 7 "
    "significant digits, so at far positions (angles of thousands of radians) the rotation drifts; compute the angles "
    "in float64 and cast the cos and sin to x's dtype",
    "interleaved": "you paired neighbouring features (2i, 2i+1), the interleaved convention; this lesson pairs "
    "feature i with feature i + hs/2 (the halves). Both are rotations, but weights trained with one convention "
    "give wrong scores with the other",
    "no-two": "the angles use base ** (-i / hs); the frequency of pair i is base ** (-2i / hs)",
    "ignores-positions": "the rows were turned by 0, 1, ..., T-1 whatever positions says: use the positions given",
    "growing": "the frequencies grow with the pair: base ** (+2i / hs); the frequency of pair i is base ** (-2i / hs), "
    "pair 0 turning fastest",
    "cos-sin-swapped": "the cosine and the sine trade places: your values are (x1 sin - x2 cos, x1 cos + x2 sin); the "
    "rotation is (x1 cos - x2 sin, x1 sin + x2 cos). Were the two swapped where they are computed or unpacked?",
    "index-minus-one": "pair i turns at the frequency of pair i - 1, base ** (-2(i - 1) / hs): the paper's "
    "theta_i = base ** (-2(i - 1) / d) counts i from 1, and torch.arange counts from 0, so the - 1 is already in it; "
    "pair 0 turns by base ** (2 / hs), more than a radian per position. With i from arange, base ** (-2i / hs)",
    "index-plus-one": "pair i turns at the frequency of pair i + 1, base ** (-2(i + 1) / hs): pair 0 must turn by 1 "
    "radian per position (base ** 0); is the index counted from 1 (arange(1, hs/2 + 1))?",
    "backwards": "every pair was turned by minus its angle: (x1, x2) becomes (x1 cos - x2 sin, x1 sin + x2 cos), "
    "the sine's signs as written there",
}

# (name, shape of x, first position)
ROPE_CASES = [("x of shape (2, 3, 7, 6), positions 4 ... 10", (2, 3, 7, 6), 4),
              ("x of shape (5, 8), positions 0 ... 4", (5, 8), 0)]
ROPE_HIDDEN_CASES = [("x of shape (3, 9, 4) in float32, positions 30 ... 38", (3, 9, 4), 30),
                     ("x of shape (1, 2, 1, 10), position 57", (1, 2, 1, 10), 57),
                     ("x of shape (2, 3, 8) in float32, positions 20000 ... 20002", (2, 3, 8), 20000)]
SHIFT = 11
OTHER_BASE = 500.0  # a second call with another base: apply_rope(x, positions, base)


def _rope_inputs(cases):
    out = []
    for name, shape, start in cases:
        g = torch.Generator().manual_seed(50 + start + len(shape))
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        if "float32" in name:
            x = x.float()
        out.append((name, x, torch.arange(start, start + shape[-2])))
    return out


def _probe_rope(cases):
    def probe(apply_rope) -> dict:
        expect_callable(apply_rope, "apply_rope")
        runs = []
        for _, x, positions in _rope_inputs(cases):
            before = x.clone()
            sizes = {"T": x.shape[-2], "hs": x.shape[-1], "hs/2": x.shape[-1] // 2,  # hs/2: the frequencies
                     **dict(zip(("B", "nh"), x.shape[:-2], strict=False))}
            try:
                with case_sizes(sizes):
                    runs.append({"out": apply_rope(x, positions), "shifted": apply_rope(x.clone(), positions + SHIFT),
                                 "other_base": attempt(apply_rope, x.clone(), positions, OTHER_BASE, sizes=sizes).get("out"),
                                 "changed": not torch.equal(before, x),
                                 "basis": attempt(apply_rope, *_basis(x.shape[-1]), sizes=sizes).get("out"),
                                 "grads": input_gradients(apply_rope, before, positions)})
            except Exception as exc:  # noqa: BLE001
                runs.append(caught(exc, sizes))
        return {"runs": runs}

    return probe


def _basis(hs: int) -> tuple[torch.Tensor, torch.Tensor]:  # row j: feature j alone, at position 3
    return torch.eye(hs, dtype=torch.float64), torch.full((hs,), 3)


def _pairing(basis, hs: int) -> str | None:
    """Which input features each output feature is made from, when that differs from the halves."""
    if not isinstance(basis, torch.Tensor) or basis.shape != (hs, hs):
        return None
    reads = [sorted(int(j) for j in (basis[:, i].abs() > 1e-9).nonzero().flatten()) for i in range(hs)]
    half = hs // 2
    want = [sorted({i, (i + half) % hs}) for i in range(hs)]
    if reads == want or any(len(r) != 2 for r in reads):  # a rotation of pairs, but not of these pairs
        return None
    shown = "; ".join(f"{i} from {' and '.join(map(str, r))}" for i, r in enumerate(reads[:4]))
    if sorted(map(tuple, reads)) == sorted(map(tuple, want)):  # the lesson's pairs, written back to other places
        return (f"the pairs are the lesson's, (0, {half}), (1, {half + 1}), ..., but the turned pairs are written back to "
                f"other places: with every row at one position, your output feature {shown.replace(' from ', ' is made from input features ', 1)}"
                f"{', and so on' if hs > 4 else ''}. Feature i and feature i + hs/2 go back where they came from: the first "
                "halves, then the second halves (torch.cat of the two halves; stacking them on a new last axis and "
                "flattening interleaves them)")
    wanted = ", ".join(f"({i}, {i + half})" for i in range(min(half, 3)))
    return (f"the features are paired wrongly (the other half of each pair is not hs/2 away): with every row at one "
            f"position, your output feature {shown.replace(' from ', ' is made from input features ', 1)}"
            f"{' …' if hs > 4 else ''}; "
            f"the lesson turns feature i together with feature i + hs/2, {wanted}{' …' if half > 3 else ''}, and writes "
            "each turned pair back to the same two places (x1 = x[..., :hs/2], x2 = x[..., hs/2:], then "
            "torch.cat of the two halves)")


def _frequency_read(x, out, positions, tol, base=10000.0) -> str | None:
    """``out`` as the lesson's rotation at another k (verified: it reproduces every value), in words."""
    hs, half = x.shape[-1], x.shape[-1] // 2
    if half < 2 or len(positions) < 2 or not torch.isfinite(out).all():
        return None
    (x1, x2), (o1, o2) = x.double().split(half, -1), out.double().split(half, -1)
    angle = torch.atan2(x1 * o2 - x2 * o1, x1 * o1 + x2 * o2)  # (..., T, hs/2): each pair's turn
    step = torch.remainder(angle[..., 1, 1] - angle[..., 0, 1] + torch.pi, 2 * torch.pi) - torch.pi
    per_position = float(step.reshape(-1)[0]) / float(positions[1] - positions[0])
    if per_position <= 0:
        return None
    k = -hs * math.log(per_position) / math.log(base)  # pair 1 turns by base ** (-k / hs) per position
    if abs(k - 2) < 1e-6 or not close(known_good_rope(x.double(), positions, base, k=k), out, tol, tol):
        return None
    if abs(k) < 1e-6:  # base ** 0: the exponent is 0 for every pair
        return ("every pair turns by the same angle, 1 radian per position (base ** 0): the exponent -2i / hs came "
                "out 0 for every pair i, so the frequencies do not fall off across the pairs (your values are that "
                "rotation exactly). Was the exponent computed with an integer division? 2 * i // hs is 0 for every "
                "i < hs/2; divide with / on a float tensor")
    return (f"each pair turns by base ** (-{k:.4g} i / hs) per position: the frequencies fall off "
            f"{'faster' if k > 2 else 'more slowly'} across the pairs "
            f"than the lesson's base ** (-2i / hs), as if the exponent divided by {2 * hs / k:.4g} instead of hs = {hs} "
            "(your values are that rotation exactly)")


def _judge_rope(cases):
    def judge(data: dict) -> str:
        for (name, x, positions), run in zip(_rope_inputs(cases), runs(data, len(cases)), strict=True):
            what = f"apply_rope on {name}"
            raise_caught(what, run)
            if run.get("changed"):
                raise CheckFailed(f"{what} changed x in place: return a new tensor.")
            out = run["out"]
            expected = known_good_rope(x, positions)  # tests/test_lesson09.py: the reference's
            axes = ("B", "nh")[: x.dim() - 2] + ("T", "hs")
            if isinstance(out, torch.Tensor) and out.shape != expected.shape:  # which axis, and why
                raise CheckFailed(explain_mismatch(expected, out, what=what, atol=0, rtol=0, axes=axes,
                                                   sizes=dict(zip(axes, x.shape, strict=True))))
            if not isinstance(out, torch.Tensor):
                raise CheckFailed(f"{what} should return a {x.dtype} tensor of shape {tuple(x.shape)}, got {describe(out)}.")
            if out.dtype != x.dtype:
                raise CheckFailed(explain_mismatch(expected.to(x.dtype), out, what=what, atol=1e-5, rtol=1e-5, axes=axes,
                                                   sizes=dict(zip(axes, x.shape, strict=True)), dtype=x.dtype))
            tol = 1e-10 if x.dtype == torch.float64 else 1e-5
            if close(expected, out, tol, tol):
                judge_input_gradients(run.get("grads"), known_good_rope, (x, positions), ("x",), what, x.dtype)
                _judge_other_base(what, x, positions, run.get("other_base"), tol)
                continue
            variants = {ROPE_MISTAKES[f]: known_good_rope(x, positions, flavour=f) for f in ROPE_MISTAKES}
            label = identify(out, variants, tol, tol)
            evidence = first_mismatch(expected, out, tol, tol)
            label = label or _pairing(run.get("basis"), x.shape[-1]) or _frequency_read(x, out, positions, tol)
            if label:
                raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            shifted = run.get("shifted")
            if isinstance(shifted, torch.Tensor) and shifted.shape == out.shape:
                scores, moved = out @ out.transpose(-2, -1), shifted @ shifted.transpose(-2, -1)
                if not close(scores, moved, 1e-6, 1e-6):
                    raise CheckFailed(f"{what}: the dot products of the turned rows change when every position moves "
                                      f"by {SHIFT} ({first_mismatch(scores, moved, 1e-6, 1e-6)}): a rotation by an "
                                      "angle proportional to the position keeps only the distance; turn each pair "
                                      "(x1, x2) into (x1 cos - x2 sin, x1 sin + x2 cos).")
            if x.dtype == torch.float64 and close(expected, out, 1e-5, 1e-5):
                raise CheckFailed(f"{what}: the values agree with the reference only to about float32 precision: most "
                                  "likely part of the computation ran in float32 (positions.float(), or a torch.arange without dtype=): compute "
                                  f"the angles in float64 and keep x's dtype. Evidence: {evidence}.")
            raise CheckFailed(explain_mismatch(expected, out, what=what, atol=tol, rtol=tol, axes=axes,
                                               sizes=dict(zip(axes, x.shape, strict=True))))
        return ("apply_rope: " + "; ".join(c[0] for c in cases) + ": halves paired, angle position * 10000^(-2i/hs), "
                f"and every dot product unchanged when all positions move by {SHIFT}.")

    return judge


def _judge_other_base(what: str, x, positions, out, tol: float) -> None:
    """A later call with base = OTHER_BASE must turn by that base's angles (a contract parameter)."""
    want = known_good_rope(x, positions, base=OTHER_BASE)
    if isinstance(out, torch.Tensor) and out.shape == want.shape and close(want, out, tol, tol):
        return
    read = ("it is what the default base 10000 gives: is base used, or are the frequencies kept from an earlier "
            "call and reused?" if isinstance(out, torch.Tensor) and out.shape == want.shape
            and close(known_good_rope(x, positions), out, tol, tol) else f"got {describe(out)}")
    raise CheckFailed(f"{what}, called again with base={OTHER_BASE:g}: the output should turn pair i by "
                      f"{OTHER_BASE:g} ** (-2i / hs) per position; {read}")


def _later_positions(case, rng):
    """While grading: the same shape, later positions (and so other numbers in x)."""
    name, shape, start = case
    new, T = start + rng.randint(1, 200), shape[-2]
    name = name.replace(f"{start} ... {start + T - 1}", f"{new} ... {new + T - 1}").replace(f"position {start}", f"position {new}")
    return name, shape, new


check_rope, check_rope_hidden = visible_and_hidden("check_rope", _probe_rope, _judge_rope, ROPE_CASES, ROPE_HIDDEN_CASES, _later_positions)

# ---------------------------------------------------------------------------------------------
# RotarySelfAttention(emb_dim, head_dim, n_heads).forward(x, cache) -> (out, (k, v))


ROTARY_MISTAKES = {
    "keys-not-turned": "only the queries were turned: the keys must be turned too (apply_rope(k, positions)), so that "
    "each score depends on the distance between the two positions",
    "queries-not-turned": "only the keys were turned: the queries must be turned too (apply_rope(q, positions)), so "
    "that each score depends on the distance between the two positions",
    "rotate-values": "the values were rotated too: RoPE turns queries and keys only (their dot products carry the "
    "positions); the values are what gets mixed, and turning them mixes position into the output",
    "positions-restart": "the positions restart at 0 in every call: the new rows are at T_past ... T_past + T_new - 1, "
    "T_past being the cache's length",
    "no-rotation": "neither queries nor keys were rotated: call apply_rope on both, at the new rows' positions",
    "values-not-keys": "the values were rotated where the keys belong: RoPE turns queries and keys (q, k = "
    "apply_rope(q, ...), apply_rope(k, ...)); the values stay as they are",
    "rotate-after-concat": "the keys were rotated after joining the cache, so the cached keys, stored already "
    "rotated, were rotated a second time: rotate only the new keys, at T_past ... T_past + T_new - 1, then concatenate",
}

# (seed, B, C, hs, nh, chunks, dtype)
ROTARY_CASES = [(60, 2, 14, 6, 3, [4, 3, 1], torch.float64)]
ROTARY_HIDDEN_CASES = [(61, 3, 9, 4, 2, [1, 6, 1, 2], torch.float64), (62, 1, 20, 8, 5, [7, 2], torch.float32)]


def _rotary_inputs(case):
    seed, B, C, hs, nh, chunks, dtype = case
    g = torch.Generator().manual_seed(seed)
    weights = {name: torch.randn(*(((C, nh * hs) if name == "to_output.weight" else (nh * hs, C))), generator=g,
                                 dtype=torch.float64) / (math.sqrt(nh * hs) if name == "to_output.weight" else 1)
               for name in cached.PARAMS}
    return weights, torch.randn(B, sum(chunks), C, generator=g, dtype=torch.float64)


def _probe_rotary(cases):
    def probe(cls) -> dict:
        expect_module_class(cls, "RotarySelfAttention")
        scopes = {id(s): s for s in (getattr(inspect.unwrap(f), "__globals__", None) for f in vars(cls).values())
                  if isinstance(s, dict)}
        saved = [(s, s["apply_rope"]) for s in scopes.values() if "apply_rope" in s]
        for scope, _ in saved:
            scope["apply_rope"] = lambda x, positions, base=10000.0: known_good_rope(x, positions, base)
        try:
            runs = []
            for case in cases:
                seed, B, C, hs, nh, chunks, dtype = case
                weights, x = _rotary_inputs(case)
                module = cls(C, hs, nh)
                expect_default_dtype(module, f"{cls.__name__}({C}, {hs}, {nh})")
                module = module.to(dtype)
                load_weights(module, weights, f"{cls.__name__}({C}, {hs}, {nh})")
                runs.append(cached.run_chunked(module, x.to(dtype), chunks, {"B": B, "C": C, "hs": hs, "nh": nh,
                                                                             "hs/2": hs // 2}))  # the frequencies
            return {"runs": runs}
        finally:
            for scope, original in saved:
                scope["apply_rope"] = original

    return probe


def _judge_rotary(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, B, C, hs, nh, chunks, dtype = case
            weights, x = _rotary_inputs(case)
            what = (f"RotarySelfAttention({C}, {hs}, {nh}) on x of shape {tuple(x.shape)} in chunks of {chunks}, "
                    "each call given the cache the previous one returned")
            expected, (k, v) = rotary_chained(weights, x, chunks, nh)
            tol = tolerance(dtype)
            if cached.stopped(run):
                cached.call_error(what, run, chunks, expected=expected, tol=tol)
            sizes = {"B": B, "T": x.shape[1], "C": C, "hs": hs, "nh": nh}
            cached.output_shapes(what, run, expected, chunks, nh, hs, tol, sizes)
            got = cached.joined(run)
            if not close(expected, got, tol, tol):
                variants = {ROTARY_MISTAKES[f]: rotary_chained(weights, x, chunks, nh, f)[0] for f in ROTARY_MISTAKES}
                label = identify(got, variants, tol, tol) if cached.steady(run, got, tol) else None
                if label:
                    raise CheckFailed(f"{what}: {label}. Evidence: {first_mismatch(expected, got, tol, tol)}.")
                raise CheckFailed(explain_mismatch(expected, got, what=what, atol=tol, rtol=tol, axes=("B", "T", "C"),
                                                   sizes=sizes, again=run.get("again"), alone=run.get("alone")))
            if not isinstance(run.get("k"), torch.Tensor) or not close(k, run["k"], tol, tol):
                raise CheckFailed(f"{what}: the cache's keys should be the keys already rotated, "
                                  f"(B, nh, T, hs) = {tuple(k.shape)}: the rotation of a key never changes once made.")
        return ("RotarySelfAttention: " + "; ".join(f"B={c[1]}, C={c[2]}, hs={c[3]}, nh={c[4]}, chunks {c[5]}" for c in cases)
                + ": queries and keys rotated at T_past + i, values untouched, rotated keys cached.")

    return judge


check_rotary_attention, check_rotary_attention_hidden = visible_and_hidden(
    "check_rotary_attention", _probe_rotary, _judge_rotary, ROTARY_CASES, ROTARY_HIDDEN_CASES)

__all__ = [
    "check_rope",
    "check_rope_hidden",
    "check_rotary_attention",
    "check_rotary_attention_hidden",
    "known_good_rope",
    "rotary_chained",
]
