"""Checks for lesson 03 (self-attention): the causal mask and a single attention head.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), hs head size (head_dim).
Every input is chosen so that no two of B, T, C, hs are equal: bugs hide when shapes agree.

No mistake costs two exercises: while the head's check runs the student's ``AttentionHead``, a
head that calls the notebook's ``apply_causal_mask`` gets the course's own mask instead, so a
wrong mask is counted by the causal-mask exercise alone.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

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
from helpers.checks.diagnose import case_sizes, diagnose, explain_mismatch
from helpers.reference import attention as ref

# ---------------------------------------------------------------------------------------------
# apply_causal_mask(scores) -> masked scores

# (seed, batch shape, T, dtype): one plain matrix, then batched ones of other sizes
MASK_CASES = [(0, (), 6, torch.float32)]
MASK_HIDDEN_CASES = [(1, (2,), 5, torch.float64), (2, (3, 2), 9, torch.float32), (3, (), 1, torch.float64)]


def _scores(seed: int, batch: tuple, T: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(*batch, T, T, generator=g, dtype=torch.float64)).to(dtype)


def _probe_mask(cases):
    def probe(apply_causal_mask) -> dict:
        if not callable(apply_causal_mask):
            raise CheckFailed(f"expected the function apply_causal_mask, got {describe(apply_causal_mask)}")
        runs = []
        for case in cases:
            scores = _scores(*case)
            out = apply_causal_mask(scores)
            runs.append({"out": out, "scores_after": scores})
        return {"runs": runs}

    return probe


def _judge_mask(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for case, run in zip(cases, runs, strict=True):
            scores = _scores(*case)
            shape = tuple(scores.shape)
            T = shape[-1]
            what = f"apply_causal_mask(scores) for scores of shape {shape}"
            after = run["scores_after"]
            if isinstance(after, torch.Tensor) and after.shape == scores.shape and not close(scores, after, 0, 0):
                raise CheckFailed(
                    f"{what} changed its input in place ({first_mismatch(scores, after, 0, 0)}). "
                    "Return a new tensor (masked_fill, not masked_fill_ or item assignment): "
                    "the caller may still need the unmasked scores."
                )
            out = expect_tensor(run["out"], shape, what)
            if not out.dtype.is_floating_point:
                raise CheckFailed(f"{what} returned a {out.dtype} tensor; keep the scores' float dtype.")
            future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1).expand(shape)
            past = ~future
            hidden = out == float("-inf")
            if (hidden & past).any() and not (hidden & future).any() and T > 1:
                i, j = (hidden & past).nonzero()[0][-2:].tolist()
                raise CheckFailed(
                    f"{what}: the mask is inverted. Query {i} cannot see key {j} (j <= i, the past), "
                    "while the future is left visible. Hide the entries above the diagonal "
                    "(torch.triu(..., diagonal=1)), not below it."
                )
            if (hidden & past).any():
                idx = (hidden & past).nonzero()[0].tolist()
                i, j = idx[-2:]
                if i == j:
                    raise CheckFailed(
                        f"{what}: query {i} cannot see key {j}, itself. A token may attend to its own "
                        "position; only keys after it (j > i) are hidden: use diagonal=1 with torch.triu."
                    )
                raise CheckFailed(
                    f"{what}: query {i} cannot see key {j}, although key {j} is not in its future "
                    f"(entry {tuple(idx)} is -inf but should be the score {scores[tuple(idx)].item():.4g})."
                )
            leaked = future & ~hidden
            if leaked.any():
                idx = tuple(leaked.nonzero()[0].tolist())
                i, j = idx[-2:]
                value = out[idx].item()
                if math.isfinite(value) and value < -1e3:
                    raise CheckFailed(
                        f"{what}: entry {idx} (query {i}, key {j}) is {value:.3g}, a finite number. "
                        "Use float('-inf'): exp(-inf) is exactly 0, a finite 'very negative' value is not "
                        "guaranteed to be (half precision cannot even store -1e9), and scores can be "
                        "more negative than you think."
                    )
                raise CheckFailed(
                    f"{what}: query {i} attends to key {j}: the mask lets the future in "
                    f"(entry {idx} should be -inf, got {value:.4g})."
                )
            if not close(scores.masked_fill(future, 0), out.masked_fill(future, 0), 0, 0):
                raise CheckFailed(
                    f"{what} changed scores it should have kept: "
                    f"{first_mismatch(scores.masked_fill(future, 0), out.masked_fill(future, 0), 0, 0)}. "
                    "Entries with j <= i must equal the input exactly (no scaling, no softmax here)."
                )
            expected = ref.apply_causal_mask(scores)
            if not close(expected, out, 0, 0):  # the reference is the last word
                raise CheckFailed(f"{what}: {first_mismatch(expected, out, 0, 0)}")
        shapes = ", ".join(str(tuple(_scores(*c).shape)) for c in cases)
        return (
            f"apply_causal_mask: scores of shape {shapes}: every future key is -inf, "
            "every other score unchanged, the input untouched."
        )

    return judge


check_causal_mask = Check("check_causal_mask", _probe_mask(MASK_CASES), _judge_mask(MASK_CASES))
check_causal_mask_hidden = Check(
    "check_causal_mask_hidden",
    _probe_mask(MASK_HIDDEN_CASES),
    _judge_mask(MASK_HIDDEN_CASES),
    hidden=True,
)

# ---------------------------------------------------------------------------------------------
# AttentionHead(emb_dim, head_dim): x (..., T, C) -> (..., T, hs)

# (seed, batch shape, T, C, hs, dtype)
HEAD_CASES = [(10, (2,), 6, 7, 3, torch.float64)]
HEAD_HIDDEN_CASES = [(11, (), 8, 5, 4, torch.float64), (12, (3,), 5, 9, 2, torch.float32)]
HEAD_PARAMS = ("query.weight", "key.weight", "value.weight")


def _head_inputs(seed, batch, T, C, hs, dtype):
    g = torch.Generator().manual_seed(seed)
    weights = {name: torch.randn(hs, C, generator=g, dtype=torch.float64) for name in HEAD_PARAMS}
    x = torch.randn(*batch, T, C, generator=g, dtype=torch.float64)
    replacement = torch.randn(*batch, T, C, generator=g, dtype=torch.float64)
    cast = {k: v.to(dtype) for k, v in weights.items()}
    return cast, x.to(dtype), replacement.to(dtype)


def _changed_at(x: torch.Tensor, replacement: torch.Tensor, j: int) -> torch.Tensor:
    """``x`` with only token ``j`` replaced: a later token must not move an earlier output."""
    changed = x.clone()
    changed[..., j, :] = replacement[..., j, :]
    return changed


def known_good_causal_mask(scores: torch.Tensor) -> torch.Tensor:
    """The course's ``apply_causal_mask``: the reference's arithmetic, written out here because
    the reference module of lesson 03 is hidden while lesson 03 is graded (probes cannot use it).
    ``tests/test_lesson03.py`` checks that the two agree."""
    T = scores.shape[-1]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=scores.device), diagonal=1)  # (T, T)
    return scores.masked_fill(future, float("-inf"))  # (..., T, T)


def _namespaces(cls) -> list[dict]:
    """The global namespaces of the functions written in ``cls`` and its own base classes: where
    a name such as ``apply_causal_mask`` is looked up when its methods run (the notebook's)."""
    found: dict[int, dict] = {}
    for klass in getattr(cls, "__mro__", ()):
        if klass is object or klass.__module__.startswith("torch."):
            continue
        for value in vars(klass).values():
            function = getattr(value, "__func__", value)  # staticmethod, classmethod
            scope = getattr(function, "__globals__", None)
            if isinstance(scope, dict):
                found.setdefault(id(scope), scope)
    return list(found.values())


@contextmanager
def course_mask_in(cls):
    """While active, ``apply_causal_mask`` means the course's mask to the methods of ``cls``.

    A head that calls the notebook's ``apply_causal_mask`` then gets a known-good mask: a mistake
    in the mask is counted by its own exercise, not a second time by the head's. A call with more
    arguments than the exercise's ``(scores)`` goes to the student's own function, unchanged.
    """
    saved = []
    for scope in _namespaces(cls):
        original = scope.get("apply_causal_mask")
        if original is None:
            continue

        def masked(scores, *args, _original=original, **kwargs):
            if args or kwargs:
                return _original(scores, *args, **kwargs)
            return known_good_causal_mask(scores)

        saved.append((scope, original))
        scope["apply_causal_mask"] = masked
    try:
        yield
    finally:
        for scope, original in reversed(saved):
            scope["apply_causal_mask"] = original


def _probe_head(cases):
    def probe(head_class) -> dict:
        with course_mask_in(head_class):
            return _run_head(head_class, cases)

    return probe


def _head_sizes(batch, T, C, hs) -> dict[str, int]:
    """The case's sizes by legend letter (no two equal: a size names its dimension)."""
    return {**({"B": batch[0]} if len(batch) == 1 else {}), "T": T, "C": C, "hs": hs}


def _run_head(head_class, cases) -> dict:
    runs = []
    for seed, batch, T, C, hs, dtype in cases:
        with case_sizes(_head_sizes(batch, T, C, hs)):
            runs.append(_run_head_case(head_class, seed, batch, T, C, hs, dtype))
    return {"runs": runs}


def _run_head_case(head_class, seed, batch, T, C, hs, dtype) -> dict:
    weights, x, replacement = _head_inputs(seed, batch, T, C, hs, dtype)
    head = head_class(C, hs)
    names = sorted(name for name, _ in head.named_parameters())
    if names != sorted(HEAD_PARAMS):
        raise CheckFailed(
            f"{head_class.__name__}({C}, {hs}) should have exactly the parameters "
            f"{', '.join(HEAD_PARAMS)} (three bias-free nn.Linear layers); it has {names}."
        )
    head = head.to(dtype)
    with torch.no_grad():
        for name, param in head.named_parameters():
            if tuple(param.shape) != tuple(weights[name].shape):
                raise CheckFailed(
                    f"{name} has shape {tuple(param.shape)}; nn.Linear({C}, {hs}) stores a "
                    f"weight of shape {tuple(weights[name].shape)} (out_features, in_features)."
                )
            param.copy_(weights[name])
        x_before = x.clone()
        out = head(x)
        x_changed = not torch.equal(x_before, x)
        again = head(x_before.clone())  # the same input once more: is the head deterministic?
        # each batch element alone (a batch of one): does the head mix the batch?
        alone = [head(x_before[b : b + 1].clone()) for b in range(batch[0])] if len(batch) == 1 else None
        leaks = [head(_changed_at(x_before, replacement, j)) for j in range(1, T)]
    return {"out": out, "x_after": x, "x_changed": x_changed, "leaks": leaks, "again": again, "alone": alone}


def head_variants(weights, x, hs: int) -> dict[str, torch.Tensor]:
    """What a head computes under each classic mistake (same weights and input)."""
    C = x.shape[-1]
    q = x @ weights["query.weight"].T  # (B, T, hs)
    k = x @ weights["key.weight"].T  # (B, T, hs)
    v = x @ weights["value.weight"].T  # (B, T, hs)
    T = x.shape[-2]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    past = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
    scores = q @ k.transpose(-2, -1)  # (B, T, T)

    def attend(s, dim=-1, mask=future):
        return torch.softmax(s.masked_fill(mask, float("-inf")), dim=dim) @ v

    scaled = scores / math.sqrt(hs)
    after = torch.softmax(scaled, dim=-1).masked_fill(future, 0.0) @ v
    variants = {
        f"you divided the scores by sqrt(emb_dim) = sqrt({C}) instead of sqrt(head_dim) = sqrt({hs})": attend(
            scores / math.sqrt(C)
        ),
        "you forgot to scale the scores by 1/sqrt(head_dim)": attend(scores),
        f"you divided the scores by head_dim = {hs}, not by its square root": attend(scores / hs),
        "you multiplied the scores by sqrt(head_dim) instead of dividing": attend(scores * math.sqrt(hs)),
        "you applied the mask after the softmax (zeroing weights leaves rows that no longer sum to 1); "
        "mask the scores, then take the softmax": after,
        "you took the softmax over the queries (dim=-2) instead of over the keys (dim=-1)": attend(
            scaled, dim=-2
        ),
        "you forgot the causal mask": torch.softmax(scaled, dim=-1) @ v,
        "the mask is inverted: it hides the past and shows the future": attend(scaled, mask=past),
        "you computed k @ q.T instead of q @ k.T (the scores are transposed)": attend(
            scaled.transpose(-2, -1)
        ),
        "the mask also hides the diagonal: a token may attend to itself": attend(
            scaled, mask=future | torch.eye(T, dtype=torch.bool)
        ),
    }
    return variants


def _judge_head(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for (seed, batch, T, C, hs, dtype), run in zip(cases, runs, strict=True):
            weights, x, replacement = _head_inputs(seed, batch, T, C, hs, dtype)
            shape = (*batch, T, hs)
            what = f"AttentionHead(emb_dim={C}, head_dim={hs}) on x of shape {tuple(x.shape)}"
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} modified its input x in place; a layer must leave x alone.")
            if isinstance(run["out"], torch.Tensor) and tuple(run["out"].shape) == (*batch, T, C):
                raise CheckFailed(
                    f"{what} should return shape {shape} (…, T, head_dim), got {tuple(run['out'].shape)} "
                    "(…, T, emb_dim): did you multiply the weights by x instead of by the values v?"
                )
            with torch.no_grad():
                head = ref.AttentionHead(C, hs).double()
                for name, param in head.named_parameters():
                    param.copy_(weights[name].double())
                expected = head(x.double())
            tol = 1e-9 if dtype == torch.float64 else 1e-4
            diagnosis = {
                "what": what, "atol": tol, "rtol": tol, "axes": (*("B" * len(batch)), "T", "hs"),
                "sizes": _head_sizes(batch, T, C, hs), "again": run.get("again"), "alone": run.get("alone"),
                "dtype": dtype,
            }
            if not isinstance(run["out"], torch.Tensor) or tuple(run["out"].shape) != shape:
                raise CheckFailed(explain_mismatch(expected, run["out"], **diagnosis))
            out = expect_tensor(run["out"], shape, what)
            again = run.get("again")
            if isinstance(again, torch.Tensor) and again.shape == out.shape and not close(out, again, tol, tol):
                # not deterministic: a leak or a mismatch found below would only be noise
                raise CheckFailed(explain_mismatch(expected, out, **diagnosis))
            rule, message = diagnose(expected, out, **diagnosis)
            if rule == "rule_batch":  # right alone, wrong together: a leak found below would be its echo
                raise CheckFailed(message)
            leaks = run.get("leaks")
            if not isinstance(leaks, list) or len(leaks) != T - 1:
                raise CheckFailed("the check's data is incomplete")
            leak = None
            for j, changed in enumerate(leaks, start=1):
                changed = expect_tensor(changed, shape, what)
                moved = ~torch.isclose(changed[..., :j, :].double(), out[..., :j, :].double(), atol=tol, rtol=tol)
                if moved.any():
                    i = int(moved.nonzero()[0][-2])
                    leak = f"changing only token {j} changed the output at position {i}: query {i} attends to key {j}"
                    break
            if close(expected, out, tol, tol) and leak is None:
                continue
            variants = head_variants({k: w.double() for k, w in weights.items()}, x.double(), hs)
            label = identify(out, variants, tol, tol)
            evidence = first_mismatch(expected, out, tol, tol)
            if label:
                seen = f" ({leak})" if leak else ""
                raise CheckFailed(f"{what}: {label}{seen}. Evidence: {evidence}.")
            if leak:
                raise CheckFailed(f"{what}: {leak}, so the mask lets the future in.")
            if torch.isnan(out).any():
                raise CheckFailed(
                    f"{what} returned NaN: a row of scores is entirely -inf (every key hidden from some "
                    f"query) or something divided by zero. Evidence: {evidence}."
                )
            raise CheckFailed(explain_mismatch(expected, out, **diagnosis))
        shapes = ", ".join(f"x{(*c[1], c[2], c[3])}→{(*c[1], c[2], c[4])}" for c in cases)
        return (
            f"AttentionHead: {shapes} match the reference, and no output moves when a later token changes."
        )

    return judge


check_attention_head = Check("check_attention_head", _probe_head(HEAD_CASES), _judge_head(HEAD_CASES))
check_attention_head_hidden = Check(
    "check_attention_head_hidden",
    _probe_head(HEAD_HIDDEN_CASES),
    _judge_head(HEAD_HIDDEN_CASES),
    hidden=True,
)
