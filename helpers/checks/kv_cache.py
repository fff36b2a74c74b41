"""Checks for lesson 09 (fast generation): attention with a KV cache, and grouped-query attention.

A module is run in chunks, each call handing back the cache it was given, grown: a prompt of a
few tokens, then a few more, then one token at a time. Its outputs side by side must equal one
call of lesson 04's ``CausalSelfAttention`` on the whole sequence, and its cache the keys and
values of every position so far, in the layout ``(B, nh, T, hs)``. Wrong answers are recognised by
what each classic mistake outputs on the same chunks (``chained``), then by the diagnosis layer.

Shape legend: B batch, T time, C embedding size (emb_dim), nh heads (n_heads), n_kv key-value
heads (n_kv_heads), hs head size (head_dim), T_past cached positions, T_new new ones. No two
sizes of a case are equal.

The probes never use this lesson's reference (hidden while it is graded): the arithmetic is written
out in ``kv_cache_known``, and ``tests/test_lesson09.py`` checks that it agrees with the reference.
"""

from __future__ import annotations

import math
import re
from functools import partial

import torch

from helpers.checks import core
from helpers.checks.core import CheckFailed, close, describe, first_mismatch, identify, runs
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import caught, raise_caught
from helpers.checks.invariants import with_zero_position
from helpers.checks.kv_cache_known import chained
from helpers.checks.kv_cache_mistakes import MISTAKES
from helpers.checks.kv_cache_reuse import from_a_given_cache, given_cache_told
from helpers.checks.verdict import load_weights, tolerance

PARAMS = ("key.weight", "query.weight", "to_output.weight", "value.weight")
#: the cases (by seed: one hidden case of each check) whose last sequence has a position of exact
#: zeros (``invariants.with_zero_position``)
ZERO_POSITION_SEEDS = (1, 5)


def _inputs(case):
    seed, B, C, hs, nh, n_kv, chunks, dtype = case
    g = torch.Generator().manual_seed(seed)
    shapes = {"query.weight": (nh * hs, C), "key.weight": (n_kv * hs, C), "value.weight": (n_kv * hs, C),
              "to_output.weight": (C, nh * hs)}
    weights = {name: (torch.randn(*shape, generator=g, dtype=torch.float64)
                      / (math.sqrt(nh * hs) if name == "to_output.weight" else 1)).to(dtype) for name, shape in shapes.items()}
    x = torch.randn(B, sum(chunks), C, generator=g, dtype=torch.float64).to(dtype)
    if seed in ZERO_POSITION_SEEDS:
        x = with_zero_position(x, 1, last_sequence_only=True)
    T = min(sum(chunks), 6)
    mask = (torch.rand(B, 1, T, T, generator=g) < 0.5) | torch.eye(T, dtype=torch.bool)  # each sees at least itself
    return weights, x, mask


def case_legend(case) -> dict:
    return dict(zip(("B", "C", "hs", "nh", "n_kv"), case[1 : 6 if case[5] != case[4] else 5], strict=False))


def joined(run: dict):
    """The outputs of a run side by side (B, T, C), or None when a call failed or they do not join."""
    try:
        return None if stopped(run) else torch.cat(run["outs"], dim=1)
    except Exception:  # noqa: BLE001
        return None


def run_chunked(module, x, chunks, sizes: dict) -> dict:
    """Probe side: call ``module`` chunk by chunk, handing back its own cache, up to the first error; then
    the same input again (deterministic?) and each sequence alone (is the batch mixed?)."""

    def once(x) -> dict:
        outs, shapes, cache, start = [], [], None, 0
        for step, T_new in enumerate(chunks):
            here = {**sizes, "T_new": T_new, **({"T_past": start, "T_total": start + T_new} if step else {})}
            try:
                with case_sizes(here):
                    returned = module(x[:, start : start + T_new], cache)
            except Exception as exc:  # noqa: BLE001 - the judge explains the error
                return {"outs": outs, "shapes": shapes, **caught(exc, here), "step": step}
            problem = _returned_problem(returned, cache)
            if problem:  # what the call returned cannot be used (the check's own unpacking would raise)
                return {"outs": outs, "shapes": shapes, "returned": problem, "step": step}
            out, cache = returned
            k, v = cache
            start += T_new
            outs.append(out)
            shapes.append([list(getattr(k, "shape", [])), list(getattr(v, "shape", []))])
        return {"outs": outs, "shapes": shapes, "k": cache[0], "v": cache[1]}

    with torch.no_grad():
        run = once(x)
        if not stopped(run):
            run.update(again=joined(once(x.clone())), alone=[joined(once(x[b : b + 1].clone())) for b in range(len(x))])
    return run


def _probe(with_kv: bool, cases):
    def probe(cls) -> dict:
        core.expect_module_class(cls, "GroupedQueryAttention" if with_kv else "CachedSelfAttention")
        runs = []
        for case in cases:
            seed, B, C, hs, nh, n_kv, chunks, dtype = case
            args, (weights, x, mask), sizes = (C, hs, nh, *((n_kv,) if with_kv else ())), _inputs(case), case_legend(case)
            module = cls(*args)
            core.expect_default_dtype(module, f"{cls.__name__}{args}")
            module = module.to(dtype)
            load_weights(module, weights, f"{cls.__name__}{args}")
            run = run_chunked(module, x, chunks, sizes)
            if not stopped(run) and len(chunks) > 1:
                def build(cls=cls, args=args, dtype=dtype, weights=weights):
                    fresh = cls(*args).to(dtype)
                    load_weights(fresh, weights, f"{cls.__name__}{args}")
                    return fresh

                run.update(from_a_given_cache(build, module, x, chunks, sizes))
            if not with_kv:
                T, given = mask.shape[-1], mask.clone()
                try:
                    with torch.no_grad(), case_sizes({**sizes, "T": T}):
                        run["masked"] = module(x[:, :T], None, given)[0]
                except Exception as exc:  # noqa: BLE001
                    run["masked"] = caught(exc, {**sizes, "T": T})
                run["mask_changed"] = not torch.equal(given, mask)
                # a one-token decode step after a prefill, each with its rows of the mask (padding keys hidden)
                try:
                    with torch.no_grad(), case_sizes({**sizes, "T": T}):
                        _, cache = module(x[:, :T - 1], None, mask[..., :T - 1, :T - 1].clone())
                        run["masked_step"] = module(x[:, T - 1:T], cache, mask[..., T - 1:T, :T].clone())[0]
                except Exception as exc:  # noqa: BLE001
                    run["masked_step"] = caught(exc, {**sizes, "T": T})
            runs.append(run)
        return {"runs": runs}

    return probe


def stopped(run: dict) -> bool:
    """A chunked run that stopped at a call: the call raised, or returned what cannot be used."""
    return "error" in run or "returned" in run


def _returned_problem(returned, given) -> str | None:
    """Probe side: why a call's return value is not ``(output, (k, v))``, in words; None when it is."""
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        return f"returned {describe(returned)}, not the pair (output, cache)"
    cache = returned[1]
    if (given is None and cache is None) or (isinstance(cache, (tuple, list)) and isinstance(given, (tuple, list))
                                             and len(cache) == len(given) and all(a is b for a, b in zip(cache, given, strict=True))):
        shown = "None" if given is None else describe(given)
        return f"returned as its cache the one it was given ({shown}), not one holding this call's keys and values"
    if not isinstance(cache, (tuple, list)) or len(cache) != 2 or not all(isinstance(t, torch.Tensor) for t in cache):
        return f"returned as its cache {describe(cache)}, not a pair of tensors (k, v)"
    return None


def _earlier_output_wrong(run: dict, expected, chunks, tol: float) -> str:
    """What the calls before the failing one gave, where one of them is already wrong: the first
    such call and its first wrong entry (empty when they were all right, or there is nothing to compare)."""
    if expected is None:
        return ""
    start = 0
    for step, out in enumerate(run["outs"]):
        want = expected[:, start : start + chunks[step]]
        start += chunks[step]
        if not isinstance(out, torch.Tensor) or out.shape != want.shape:
            return ""
        if not close(want, out, tol, tol):
            first = "the first call (no cache)" if step == 0 else f"call {step + 1}"
            return (f" Before it, {first} ran but its output was already wrong ({first_mismatch(want, out, tol, tol)}): "
                    "what goes wrong is in code that call runs too, not only where the cache is used.")
    return ""


def call_error(what: str, run: dict, chunks, heads: tuple[int, int] | None = None, expected=None,
               tol: float = 0.0) -> None:
    """Judge side: fail for a call that raised or returned what cannot be used, with what the probe
    established about it; ``heads``: (nh, n_kv) of a grouped-query layer; ``expected``: the whole
    sequence's output, to tell whether the calls before the failing one were already wrong."""
    step, hint = run["step"], ""
    clash = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
                      r"dimension 1", str(run.get("error", "")))
    if heads and clash:
        nh, n_kv = heads
        sizes = {int(clash.group(1)), int(clash.group(2))}
        if nh in sizes and n_kv * n_kv in sizes and n_kv * n_kv != nh:
            n = n_kv * n_kv  # a size the legend may have read as another letter's (hs = 4, say): the number alone
            run = {**run, "explained": re.sub(rf"\b{n} \((?:hs|T_new|T|B|C)\)", str(n), str(run.get("explained", "")))}
            hint = (f" The heads met at dimension 1 are the {nh} query heads and {n_kv * n_kv} = n_kv × n_kv key/value "
                    f"heads: were the {n_kv} key/value heads each repeated n_kv = {n_kv} times? Each serves a group of "
                    f"nh // n_kv = {nh // n_kv} query heads, so it is repeated nh // n_kv times.")
    if "returned" in run:
        raise CheckFailed(f"{what}: call {step + 1} (T_new = {chunks[step]}) {run['returned']}. forward returns "
                          "(output, (k, v)), where k and v hold the keys and values of every position so far: the "
                          "cache it was given (none on the first call) with this call's appended along the time axis.")
    if hint:
        pass
    elif step and (earlier := _earlier_output_wrong(run, expected, chunks, tol)):
        hint = earlier
    elif step and "Sizes of tensors must match except in dimension" in str(run.get("error")):
        hint = f" {CAT_HINT}"
    elif step:
        hint = (f" The first call{'s' if step > 1 else ''} (the first without a cache) ran: the error comes from "
                "the part that uses the cache given back.")
    raise_caught(f"{what}: call {step + 1} (T_new = {chunks[step]})", run, hint=hint)


def output_shapes(what: str, run: dict, expected, chunks, nh: int, hs: int, tol: float, sizes: dict) -> None:
    """Judge side: every call's output has the shape (B, T_new, C), or the message says which does not."""
    start = 0
    for step, out in enumerate(run["outs"]):
        want = expected[:, start : start + chunks[step]]
        start += chunks[step]
        if isinstance(out, torch.Tensor) and out.shape == want.shape:
            continue
        if isinstance(out, torch.Tensor) and tuple(out.shape) == (len(want), chunks[step], nh * hs):
            raise CheckFailed(f"{what}: call {step + 1} returned {tuple(out.shape)} = (B, T_new, nh*hs), the heads "
                              "side by side: project them back to C with self.to_output.")
        raise CheckFailed(explain_mismatch(want, out, what=f"{what}: the output of call {step + 1}", atol=tol, rtol=tol,
                                           axes=("B", "T", "C"), sizes={**sizes, "T": chunks[step]}))


def steady(run: dict, got: torch.Tensor, tol: float) -> bool:
    """Same output again, and each sequence alone its own row: only then may a behavioural mistake be named."""
    again, alone = run.get("again"), run.get("alone")
    if not isinstance(again, torch.Tensor) or again.shape != got.shape or not close(got, again, tol, tol):
        return False
    return isinstance(alone, list) and all(isinstance(a, torch.Tensor) and a.shape == got[b : b + 1].shape
                                           and close(got[b : b + 1], a, tol, tol) for b, a in enumerate(alone))


CAT_HINT = ("Concatenate the cached keys and the new ones along the time dimension, dim=2 of the "
            "(B, nh, T, hs) layout: torch.cat([cache[0], k], dim=2).")


def _at_the_zero_position(seed: int, expected: torch.Tensor, got: torch.Tensor, tol: float) -> str:
    """A sentence when every departing output is in the sequence that holds a position of exact zeros,
    from that position on (where its query, or its key, meets the others): what that input is."""
    if seed not in ZERO_POSITION_SEEDS or got.shape != expected.shape:
        return ""
    wrong = ~torch.isclose(got, expected, rtol=tol, atol=tol)  # (B, T, C); NaN counts as wrong
    rows, positions = wrong.any(dim=-1).nonzero(as_tuple=True)
    if not len(rows) or (rows != len(expected) - 1).any() or positions.min() != 1:
        return ""
    return (f" In this case x[{len(expected) - 1}, 1] is exactly 0: that position's query and key are 0, so its "
            "scores, as a query and as a key of the later positions, are exactly 0, real scores that must count. "
            "Is the mask read from the scores' values (a score of 0 taken for a hidden one) instead of from the "
            "positions?")


def _judge(with_kv: bool, name: str, cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, B, C, hs, nh, n_kv, chunks, dtype = case
            weights, x, mask = _inputs(case)
            w64 = {k: v.double() for k, v in weights.items()}
            expected, caches = chained(w64, x.double(), chunks, nh, n_kv)
            tol = tolerance(dtype)
            what = (f"{name}({C}, {hs}, {nh}{f', {n_kv}' if with_kv else ''}) on x of shape {tuple(x.shape)} "
                    f"in chunks of {chunks} new positions, each call given the cache the previous one returned")
            for step, (shape, (k_exp, _)) in enumerate(zip(run["shapes"], caches, strict=False)):
                if shape[0] != (want := list(k_exp.shape)) or shape[1] != want:
                    extra = " It holds only the new positions: return the grown cache, the past and the new together."
                    extra = extra if shape[0][2:3] == [chunks[step]] and step > 0 else ""
                    if not extra and with_kv and shape[0][1:2] == [nh] and nh != n_kv:
                        extra = (f" It holds the {nh} repeated heads: keep the {n_kv} key-value heads in the cache "
                                 "(that is the memory grouped-query attention saves) and repeat them only for the scores.")
                    raise CheckFailed(f"{what}: after call {step + 1} the cache's (k, v) have shapes {shape[0]} and "
                                      f"{shape[1]}; expected {want} each, the layout (B, {'n_kv' if with_kv else 'nh'}, "
                                      f"T_past + T_new, hs).{extra}")
            sizes = {**case_legend(case), "T": x.shape[1]}
            if stopped(run):
                call_error(what, run, chunks, (nh, n_kv) if with_kv else None, expected, tol)
            output_shapes(what, run, expected, chunks, nh, hs, tol, sizes)
            got = torch.cat(run["outs"], dim=1)
            if not close(expected, got, tol, tol):
                flavours = ["mask-not-offset", "no-mask", "self-hidden", "view-split", "returns-v-k", "cache-ignored", "new-first", "sqrt-C", "v-from-k-cache",
                            "k-from-v-cache", "values-are-keys"]
                if with_kv and nh != n_kv:
                    flavours.insert(0, "tiled")
                variants = {MISTAKES[f]: chained(w64, x.double(), chunks, nh, n_kv, f)[0] for f in flavours}
                label = identify(got, variants, tol, tol) if steady(run, got, tol) else None
                first = chunks[0]  # a mistake that shows only from the second call:
                if label is None and len(chunks) > 1 and steady(run, got, tol) and close(expected[:, :first], got[:, :first], tol, tol):
                    label = ("the first call (no cache) is right but the later ones are not: is what a later call "
                             "takes from the cache given back, or the mask's offset, wrong?")
                if label:
                    raise CheckFailed(f"{what}: {label}. Evidence: {first_mismatch(expected, got, tol, tol)}.")
                raise CheckFailed(explain_mismatch(expected, got, what=what, atol=tol, rtol=tol, axes=("B", "T", "C"),
                                                   sizes=sizes, again=run.get("again"), alone=run.get("alone"))
                                  + _at_the_zero_position(seed, expected, got, tol))
            for kind, part, want, other in (("k", run["k"], *caches[-1]), ("v", run["v"], *caches[-1][::-1])):
                if not close(want, part, tol, tol):
                    swapped = " The cache holds (v, k): return (k, v)." if close(other, part, tol, tol) else ""
                    raise CheckFailed(f"{what}: the cache's {kind} is not the {'keys' if kind == 'k' else 'values'} "
                                      f"of the positions so far.{swapped} Evidence: {first_mismatch(want, part, tol, tol)}.")
            given_cache_told(what, run, expected, chunks, tol)
            if "masked" in run:
                T = mask.shape[-1]
                want = chained(w64, x[:, :T].double(), [T], nh, n_kv, masks=[mask])[0]
                raise_caught(f"{name}: a call with mask= of shape {tuple(mask.shape)}", got := run["masked"])
                if not isinstance(got, torch.Tensor):
                    raise CheckFailed(f"{name}: a call with mask= of shape {tuple(mask.shape)} returned {describe(got)}.")
                if not close(want, got, tol, tol):
                    causal = chained(w64, x[:, :T].double(), [T], nh, n_kv)[0]
                    why = ("it ignored the mask: when mask is given, use it instead of the causal mask"
                           if close(causal, got, tol, tol) else "use mask as given: True = may attend")
                    raise CheckFailed(f"{name} with mask= of shape {tuple(mask.shape)}: {why}. "
                                      f"Evidence: {first_mismatch(want, got, tol, tol)}.")
                if "masked_step" in run:
                    step_mask = mask[..., T - 1:T, :T]
                    want = chained(w64, x[:, :T].double(), [T - 1, 1], nh, n_kv,
                                   masks=[mask[..., :T - 1, :T - 1], step_mask])[0][:, T - 1:]
                    what = (f"{name}: a one-token step after {T - 1} cached positions, with mask= of shape "
                            f"{tuple(step_mask.shape)}")
                    raise_caught(what, got := run["masked_step"])
                    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
                        raise CheckFailed(f"{what} returned {describe(got)}, expected shape {tuple(want.shape)}.")
                    if not close(want, got, tol, tol):
                        unmasked = chained(w64, x[:, :T].double(), [T - 1, 1], nh, n_kv,
                                           masks=[mask[..., :T - 1, :T - 1], None])[0][:, T - 1:]
                        why = ("the mask was not used: with one new token the causal mask hides nothing, but a given "
                               "mask (padding) still does; use mask whenever it is given"
                               if close(unmasked, got, tol, tol) else "use mask as given at every step: True = may attend")
                        raise CheckFailed(f"{what}: {why}. Evidence: {first_mismatch(want, got, tol, tol)}.")
                if run.get("mask_changed") is not False:
                    raise CheckFailed(f"{name} changed the caller's mask= in place (logical_not_, masked_fill_, ...): "
                                      "one mask serves every layer and every step; compute a new tensor, ~mask.")
        return (f"{name}: " + "; ".join(f"B={c[1]}, C={c[2]}, hs={c[3]}, nh={c[4]}" + (f", n_kv={c[5]}" if with_kv else "")
                                       + f", chunks {c[6]} ({str(c[7]).replace('torch.', '')})" for c in cases)
                + ": the outputs equal one pass over the whole sequence, the cache holds every position's keys "
                "and values" + ("" if with_kv else ", and a given mask is used") + ".")

    return judge


# (seed, B, C, hs, nh, n_kv, chunks, dtype)
CACHED_CASES = [(0, 2, 14, 5, 3, 3, [4, 3, 1], torch.float64)]
CACHED_HIDDEN_CASES = [(1, 3, 10, 4, 2, 2, [1, 1, 5, 2], torch.float64), (2, 1, 18, 7, 2, 2, [6, 1, 1], torch.float32)]
GQA_CASES = [(3, 3, 13, 4, 6, 2, [5, 2, 1], torch.float64), (4, 3, 11, 2, 5, 5, [7], torch.float64)]
GQA_HIDDEN_CASES = [(5, 3, 11, 5, 4, 1, [3, 1, 1, 1], torch.float64), (6, 1, 16, 5, 6, 3, [7, 2], torch.float32)]

check_cached_attention, check_cached_attention_hidden = core.visible_and_hidden(
    "check_cached_attention", partial(_probe, False), partial(_judge, False, "CachedSelfAttention"), CACHED_CASES, CACHED_HIDDEN_CASES)
check_grouped_query, check_grouped_query_hidden = core.visible_and_hidden(
    "check_grouped_query", partial(_probe, True), partial(_judge, True, "GroupedQueryAttention"), GQA_CASES, GQA_HIDDEN_CASES)

__all__ = ["check_cached_attention", "check_cached_attention_hidden", "check_grouped_query", "check_grouped_query_hidden"]
