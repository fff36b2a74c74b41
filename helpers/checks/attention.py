"""Checks for lesson 03 (self-attention): the causal mask and a single attention head.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), hs head size (head_dim).
Every input is chosen so that no two of B, T, C, hs are equal: bugs hide when shapes agree.
No mistake costs two exercises: while the head's check runs, a head that calls the notebook's
``apply_causal_mask`` gets the course's own mask, so a wrong mask costs the mask exercise alone.
The first section, shared with lesson 04's checks, runs a causal layer's cases (``student_case``,
``run_causal``) and judges them (``judge_causal``), knowing attention's classic mistakes.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from functools import partial

import torch

from helpers.checks import diagnose as layer
from helpers.checks.core import Check, CheckFailed, close, describe, first_mismatch, identify
from helpers.checks.diagnose import case_sizes, diagnose, explain_mismatch, explain_parts
from helpers.reference import attention as ref

# ---------------------------------------------------------------------------------------------
# Shared by lessons 03 and 04


def legend(batch: tuple, **sizes: int) -> dict[str, int]:
    """A case's sizes by legend letter (B only for one batch dimension)."""
    return {**({"B": batch[0]} if len(batch) == 1 else {}), **sizes}


def changed_at(x: torch.Tensor, replacement: torch.Tensor, j: int) -> torch.Tensor:
    """``x`` with only token ``j`` replaced: a later token must not move an earlier output."""
    changed = x.clone()
    changed[..., j, :] = replacement[..., j, :]
    return changed


def _what_it_means(exc: Exception, sizes: dict) -> str | None:
    """What errors common in these lessons mean, where the diagnosis layer has no words yet."""
    text = str(exc)
    if "only supports boolean masks" in text:
        return ("masked_fill needs a boolean mask, True where the score is hidden: create the (T, T) "
                "matrix with dtype=torch.bool (torch.ones(T, T) alone is float).")
    if "must be tuple of ints,but got float" in text:
        return "A size given to view/reshape is a float (a / division makes one): sizes are ints, use //."
    m = re.search(r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)", text)
    if m:
        named = [k for k, v in sizes.items() if v == int(m[3])]
        size = f"{m[3]} ({named[0]})" if len(named) == 1 else m[3]
        return (f"Axis {m[2]} has only {size} entries: an index counted from the front lands on another "
                "axis when the input has more dimensions (a batch); index from the end (x[..., i, j]).")
    return None


@contextmanager
def student_case(sizes: dict, reason=None):
    """Probe side: one case of a check. An error of the student's code is explained in the case's
    legend (``case_sizes``); ``reason(exc)`` may name the mistake that the error establishes."""
    try:
        with case_sizes(sizes):
            yield
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as exc:
        lead, meaning = (reason(exc) if reason else None), _what_it_means(exc, sizes)
        if lead is None and meaning is None:
            raise  # Check explains it in the case's legend: nothing to add
        lines = [lead, *explain_parts(exc, sizes), meaning, f"(The error itself: {type(exc).__name__}: {exc})"]
        raise CheckFailed("\n".join(line for line in lines if line)) from None


def run_causal(module, x: torch.Tensor, replacement: torch.Tensor) -> dict:
    """Probe side: the output, on the same input again (deterministic?), each batch element alone
    (is the batch mixed?), with one later token changed at a time, and the sub-modules' values."""
    x_before = x.clone()
    with torch.no_grad():
        out = module(x)
        x_changed = not torch.equal(x_before, x)
        again = module(x_before.clone())
        alone = [module(x_before[b : b + 1].clone()) for b in range(x.shape[0])] if x.dim() == 3 else None
        leaks = [module(changed_at(x_before, replacement, j)) for j in range(1, x.shape[-2])]
    steps = layer.trace(module, x_before.clone(), with_inputs=True)
    return {"out": out, "x_changed": x_changed, "again": again, "alone": alone, "leaks": leaks, "steps": steps}


def load_known(module, params: dict[str, torch.Tensor], what: str, layout: str) -> None:
    """Probe side: copy the check's weights into the student's module, whose parameters must have
    exactly these names and shapes (``layout``: what the given ``__init__`` builds)."""
    names = sorted(name for name, _ in module.named_parameters())
    if names != sorted(params):
        raise CheckFailed(f"{what} should have exactly the parameters {sorted(params)} ({layout}); it has {names}.")
    with torch.no_grad():
        for name, param in module.named_parameters():
            if tuple(param.shape) != tuple(params[name].shape):
                raise CheckFailed(
                    f"{what}: {name} has shape {tuple(param.shape)}, expected {tuple(params[name].shape)} "
                    "(nn.Linear(in, out) stores a weight of shape (out, in)); keep the given __init__."
                )
            param.copy_(params[name])


def attend(q, k, v, *, scale, mask="causal", dim=-1, transposed=False):
    """Attention, q, k, v (..., T, hs) -> (..., T, hs), under a named mistake (float64)."""
    T = q.shape[-2]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    hidden = {"causal": future, "inverted": future.T, "diagonal": future | torch.eye(T, dtype=torch.bool)}
    scores = (k @ q.transpose(-2, -1) if transposed else q @ k.transpose(-2, -1)) * scale  # (..., T, T)
    weights = torch.softmax(scores.masked_fill(hidden.get(mask, future & ~future), float("-inf")), dim=dim)
    return (weights.masked_fill(future, 0.0) if mask == "after" else weights) @ v


def attention_variants(run, *, C: int, T: int, hs: int, over=None) -> dict[str, torch.Tensor]:
    """The classic mistakes of scaled, masked attention: ``run(**kwargs)`` computes the layer with
    ``attend``'s keyword arguments. ``over``: (dim, its name) a softmax without dim= picks."""
    s = 1 / math.sqrt(hs)
    variants = {
        f"you divided the scores by sqrt(emb_dim) = sqrt({C}) instead of sqrt(head_dim) = sqrt({hs})":
            run(scale=1 / math.sqrt(C)),
        "you forgot to scale the scores by 1/sqrt(head_dim)": run(scale=1.0),
        f"you divided the scores by head_dim = {hs}, not by its square root": run(scale=1 / hs),
        "you multiplied the scores by sqrt(head_dim) instead of dividing": run(scale=math.sqrt(hs)),
        f"you divided the scores by sqrt(T) = sqrt({T}), the sequence length, instead of sqrt(head_dim) = "
        f"sqrt({hs})": run(scale=1 / math.sqrt(T)),
        "you divided the output by sqrt(head_dim) instead of the scores: the scale belongs inside the "
        "softmax, on q @ k.T": run(scale=1.0) * s,
        "you applied the mask after the softmax (zeroing weights leaves rows that no longer sum to 1); "
        "mask the scores, then take the softmax": run(scale=s, mask="after"),
        "you took the softmax over the queries (dim=-2) instead of over the keys (dim=-1)": run(scale=s, dim=-2),
        "you forgot the causal mask": run(scale=s, mask="none"),
        "the mask is inverted: it hides the past and shows the future": run(scale=s, mask="inverted"),
        "the mask also hides the diagonal: a token may attend to itself": run(scale=s, mask="diagonal"),
        "you computed k @ q.T instead of q @ k.T (the scores are transposed)": run(scale=s, transposed=True),
    }
    if over:
        variants[
            f"you took the softmax over axis {over[0]}, {over[1]}, instead of over the keys (dim=-1): "
            f"F.softmax without dim= picks dim={over[0]} for a {3 + over[0]}-D tensor"
        ] = run(scale=s, dim=over[0])
    return variants


def runs_of(data: dict, cases) -> list[dict]:
    runs = data.get("runs")
    if not isinstance(runs, list) or len(runs) != len(cases) or not all(isinstance(r, dict) for r in runs):
        raise CheckFailed("the check's data is incomplete")
    return runs


def settled(out, expected: torch.Tensor, diagnosis: dict, dtype_too: bool = False):
    """What must hold before any verdict on the values: the shape (and dtype), determinism, the
    batch. Returns ``diagnose``'s ``(rule, message)`` when they hold; raises otherwise."""
    wrong_type = dtype_too and isinstance(out, torch.Tensor) and out.dtype != diagnosis["dtype"]
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape or wrong_type:
        raise CheckFailed(explain_mismatch(expected, out, **diagnosis))
    again, tol = diagnosis.get("again"), diagnosis["atol"]
    if isinstance(again, torch.Tensor) and again.shape == out.shape and not close(out, again, tol, tol):
        raise CheckFailed(explain_mismatch(expected, out, **diagnosis))  # not deterministic
    rule, message = diagnose(expected, out, **diagnosis)
    if rule == "rule_batch":
        raise CheckFailed(message)
    return rule, message


def judge_causal(run: dict, expected: torch.Tensor, variants, diagnosis: dict, *, reference, x, noun) -> None:
    """Judge side, for a causal layer's output: shape, determinism and batch first (a leak found
    after them would be their echo), then a leak, a catalogued mistake (``variants()``: {message:
    output}), and last what the output and ``reference``'s sub-modules establish."""
    what, tol, out = diagnosis["what"], diagnosis["atol"], run.get("out")
    rule, message = settled(out, expected, diagnosis)
    leaks, leak = run.get("leaks"), None
    if not isinstance(leaks, list) or len(leaks) != out.shape[-2] - 1:
        raise CheckFailed("the check's data is incomplete")
    for j, changed in enumerate(leaks, start=1):  # the first earlier output a later token moves
        if not isinstance(changed, torch.Tensor) or changed.shape != out.shape:
            raise CheckFailed(f"with token {j} changed, the output is {describe(changed)}, not {tuple(out.shape)}")
        moved = ~torch.isclose(changed[..., :j, :].double(), out[..., :j, :].double(), atol=tol, rtol=tol, equal_nan=True)
        if moved.any():
            i = int(moved.nonzero()[0][-2])
            leak = f"changing only token {j} changed the output at position {i}: query {i} attends to key {j}"
            break
    if close(expected, out, tol, tol) and leak is None:
        return
    if rule == "rule_nonfinite":
        leak = None  # inf - inf and 0 * inf move with any token: not evidence of a leak
    label = identify(out, variants(), tol, tol)
    if label:
        seen = f" ({leak})" if leak else ""
        raise CheckFailed(f"{what}: {label}{seen}. Evidence: {first_mismatch(expected, out, tol, tol)}.")
    if leak:
        raise CheckFailed(f"{what}: {leak}, so the layer lets the future in: the causal mask is missing or wrong, "
                          "or an operation mixes time steps.")
    steps = run.get("steps")
    if rule not in ("generic", "rule_localised") or not isinstance(steps, dict) or not steps:
        raise CheckFailed(message)
    known = {"the input x": x}
    ours = layer.trace(reference, x, with_inputs=True)
    inside = layer.first_divergence(steps, ours, tol, tol, known=known)
    if inside is None:  # every sub-module saw and returned the reference's values
        extra = layer.difference_from(out, expected, ours, tol, tol, known=known)
        exactly = f" The output is the reference's {'' if extra.startswith('minus') else 'plus '}{extra}." if extra else ""
        inside = (
            "every sub-module received and returned exactly what the reference's did, so the difference "
            f"comes from forward's own arithmetic after the last sub-module call.{exactly} Evidence: "
            f"{first_mismatch(expected, out, tol, tol)}."
        )
    lead = f"{what} is wrong" if rule == "generic" else message.partition(" Evidence: ")[0].rstrip(".")
    raise CheckFailed(f"{lead}. Inside {noun}, {inside}")


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
            scores, batch = _scores(*case), case[1]
            with student_case(legend(batch, T=case[2])):
                out = apply_causal_mask(scores)
                again = apply_causal_mask(_scores(*case))  # the same input once more
                alone = [apply_causal_mask(_scores(*case)[b : b + 1]) for b in range(batch[0])] if batch else None
            runs.append({"out": out, "scores_after": scores, "again": again, "alone": alone})
        return {"runs": runs}

    return probe


def _judge_mask(cases):
    def judge(data: dict) -> str:
        for (seed, batch, T, dtype), run in zip(cases, runs_of(data, cases), strict=True):
            scores = _scores(seed, batch, T, dtype)
            shape = tuple(scores.shape)
            what = f"apply_causal_mask(scores) for scores of shape {shape}"
            after = run.get("scores_after")
            if isinstance(after, torch.Tensor) and after.shape == scores.shape and not close(scores, after, 0, 0):
                raise CheckFailed(
                    f"{what} changed its input in place ({first_mismatch(scores, after, 0, 0)}). Return a new tensor "
                    "(masked_fill, not masked_fill_ or item assignment): the caller may still need the unmasked scores."
                )
            expected = ref.apply_causal_mask(scores)
            diagnosis = {"what": what, "atol": 0, "rtol": 0, "axes": ("B",) * len(batch) + ("i", "j"),
                         "sizes": legend(batch, T=T), "again": run.get("again"), "alone": run.get("alone"),
                         "dtype": dtype}
            out = run.get("out")
            settled(out, expected, diagnosis, dtype_too=True)
            future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1).expand(shape)
            past = ~future
            hidden = out == float("-inf")
            if (hidden & past).any() and not (hidden & future).any() and T > 1:
                i, j = (hidden & past).nonzero()[0][-2:].tolist()
                raise CheckFailed(
                    f"{what}: the mask is inverted. Query {i} cannot see key {j} (j <= i, the past), while the future "
                    "is left visible. Hide the entries above the diagonal (torch.triu(..., diagonal=1)), not below it."
                )
            if (hidden & past).any():
                idx = (hidden & past).nonzero()[0].tolist()
                i, j = idx[-2:]
                if i == j:
                    raise CheckFailed(f"{what}: query {i} cannot see key {j}, itself. A token may attend to its own "
                                      "position; only keys after it (j > i) are hidden: use diagonal=1 with torch.triu.")
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
                        f"{what}: entry {idx} (query {i}, key {j}) is {value:.3g}, a finite number. Use float('-inf'): "
                        "exp(-inf) is exactly 0, a finite 'very negative' value is not guaranteed to be (half precision "
                        "cannot even store -1e9), and scores can be more negative than you think."
                    )
                raise CheckFailed(f"{what}: query {i} attends to key {j}: the mask lets the future in "
                                  f"(entry {idx} should be -inf, got {value:.4g}).")
            if not close(expected, out, 0, 0):  # every future entry is -inf: some kept one differs
                kept = {**diagnosis, "what": f"{what}, on the scores to keep (j <= i)", "again": None, "alone": None}
                raise CheckFailed(explain_mismatch(expected.masked_fill(future, 0), out.masked_fill(future, 0), **kept))
        shapes = ", ".join(str(tuple(_scores(*c).shape)) for c in cases)
        return f"apply_causal_mask: scores of shape {shapes}: every future key is -inf, every other score unchanged, the input untouched."

    return judge


check_causal_mask = Check("check_causal_mask", _probe_mask(MASK_CASES), _judge_mask(MASK_CASES))
check_causal_mask_hidden = Check("check_causal_mask_hidden", _probe_mask(MASK_HIDDEN_CASES),
                                 _judge_mask(MASK_HIDDEN_CASES), hidden=True)

# ---------------------------------------------------------------------------------------------
# AttentionHead(emb_dim, head_dim): x (..., T, C) -> (..., T, hs)

# (seed, batch shape, T, C, hs, dtype)
HEAD_CASES = [(10, (2,), 6, 7, 3, torch.float64)]
HEAD_HIDDEN_CASES = [(11, (), 8, 5, 4, torch.float64), (12, (3,), 5, 9, 2, torch.float32)]
HEAD_PARAMS = ("query.weight", "key.weight", "value.weight")


def _head_inputs(seed, batch, T, C, hs, dtype):
    g = torch.Generator().manual_seed(seed)
    weights = {name: torch.randn(hs, C, generator=g, dtype=torch.float64) for name in HEAD_PARAMS}
    x, replacement = (torch.randn(*batch, T, C, generator=g, dtype=torch.float64) for _ in range(2))
    return {k: v.to(dtype) for k, v in weights.items()}, x.to(dtype), replacement.to(dtype)


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
            scope = getattr(getattr(value, "__func__", value), "__globals__", None)  # (static/class)methods too
            if isinstance(scope, dict):
                found.setdefault(id(scope), scope)
    return list(found.values())


@contextmanager
def course_mask_in(cls):
    """While active, ``apply_causal_mask`` means the course's mask to the methods of ``cls``, so that
    a mistake in the notebook's mask is counted by its own exercise, not a second time by the head's.
    A call with more arguments than the exercise's ``(scores)`` goes to the student's own function."""
    saved = []
    for scope in _namespaces(cls):
        original = scope.get("apply_causal_mask")
        if original is None:
            continue

        def masked(scores, *args, _original=original, **kwargs):
            return _original(scores, *args, **kwargs) if args or kwargs else known_good_causal_mask(scores)

        saved.append((scope, original))
        scope["apply_causal_mask"] = masked
    try:
        yield
    finally:
        for scope, original in reversed(saved):
            scope["apply_causal_mask"] = original


def _probe_head(cases):
    def probe(head_class) -> dict:
        runs = []
        with course_mask_in(head_class):
            for seed, batch, T, C, hs, dtype in cases:
                weights, x, replacement = _head_inputs(seed, batch, T, C, hs, dtype)
                with student_case(legend(batch, T=T, C=C, hs=hs)):
                    head = head_class(C, hs).to(dtype)
                    load_known(head, weights, f"{head_class.__name__}({C}, {hs})", "three bias-free nn.Linear layers")
                    runs.append(run_causal(head, x, replacement))
        return {"runs": runs}

    return probe


def head_variants(weights, x, hs: int) -> dict[str, torch.Tensor]:
    """What a head computes under each classic mistake (same weights and input)."""
    q, k, v = (x @ weights[f"{p}.weight"].T for p in ("query", "key", "value"))  # (B, T, hs)
    over = (0, "the batch") if x.dim() == 3 else None
    return attention_variants(partial(attend, q, k, v), C=x.shape[-1], T=x.shape[-2], hs=hs, over=over)


def _judge_head(cases):
    def judge(data: dict) -> str:
        for (seed, batch, T, C, hs, dtype), run in zip(cases, runs_of(data, cases), strict=True):
            weights, x, _ = _head_inputs(seed, batch, T, C, hs, dtype)
            what = f"AttentionHead(emb_dim={C}, head_dim={hs}) on x of shape {tuple(x.shape)}"
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} modified its input x in place; a layer must leave x alone.")
            if isinstance(run.get("out"), torch.Tensor) and tuple(run["out"].shape) == (*batch, T, C):
                raise CheckFailed(
                    f"{what} should return shape {(*batch, T, hs)} (…, T, head_dim), got {tuple(run['out'].shape)} "
                    "(…, T, emb_dim): did you multiply the weights by x instead of by the values v?"
                )
            with torch.no_grad():
                head = ref.AttentionHead(C, hs).double()
                for name, param in head.named_parameters():
                    param.copy_(weights[name].double())
                xd, tol = x.double(), (1e-9 if dtype == torch.float64 else 1e-4)
                diagnosis = {"what": what, "atol": tol, "rtol": tol, "axes": (*("B" * len(batch)), "T", "hs"),
                             "sizes": legend(batch, T=T, C=C, hs=hs), "again": run.get("again"),
                             "alone": run.get("alone"), "dtype": dtype}
                variants = partial(head_variants, {k: w.double() for k, w in weights.items()}, xd, hs)
                judge_causal(run, head(xd), variants, diagnosis, reference=head, x=xd, noun="the head")
        shapes = ", ".join(f"x{(*c[1], c[2], c[3])}→{(*c[1], c[2], c[4])}" for c in cases)
        return f"AttentionHead: {shapes} match the reference, and no output moves when a later token changes."

    return judge


check_attention_head = Check("check_attention_head", _probe_head(HEAD_CASES), _judge_head(HEAD_CASES))
check_attention_head_hidden = Check("check_attention_head_hidden", _probe_head(HEAD_HIDDEN_CASES),
                                    _judge_head(HEAD_HIDDEN_CASES), hidden=True)
