"""Checks for lesson 02 (language models without context): a bare-bones LM with tied weights,
the cross-entropy loss by hand, and the MLP.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), V vocabulary size (n_vocab),
H hidden units of the MLP (n_hidden), N positions (B*T). No two of them are equal in any case.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks.core import CheckFailed, close, describe, first_mismatch, identify
from helpers.checks.diagnose import diagnose, explain_mismatch, first_divergence, trace
from helpers.checks.errors import attempt, fail_if_raised, runs
from helpers.checks.tokens import checks
from helpers.params import num_parameters
from helpers.reference import language_models as ref


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tol(dtype: torch.dtype) -> float:
    return 1e-9 if dtype == torch.float64 else 1e-4


def _class(obj, name: str) -> None:
    if not isinstance(obj, type) or not issubclass(obj, nn.Module):
        raise CheckFailed(f"expected the class {name} (an nn.Module), got {describe(obj)}")


def _run_module(module: nn.Module, x: torch.Tensor, sizes: dict, batched: bool) -> dict:
    """The module's output on x, on x again (deterministic?), on each batch element alone (does it
    mix the batch?) and every submodule's output on the way (where does it depart?)."""
    run = attempt(module, x, sizes=sizes)
    if "out" in run:
        run["again"] = attempt(module, x.clone(), sizes=sizes).get("out")
        if batched:
            run["alone"] = [attempt(module, x[b:b + 1].clone(), sizes=sizes).get("out") for b in range(x.shape[0])]
        run["steps"] = attempt(lambda v: trace(module, v, with_inputs=True), x.clone(), sizes=sizes).get("out")
    return run


def _mismatch(expected, out, variants: dict, diagnosis: dict, run: dict, ours: dict | None = None) -> None:
    """Raise the message for a wrong output: a catalogued mistake's name, what the output itself
    establishes, and where inside the module the first value departs from the reference's."""
    what, tol = diagnosis["what"], diagnosis["atol"]
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
        raise CheckFailed(explain_mismatch(expected, out, **diagnosis))
    if close(expected, out, tol, tol) and out.dtype == diagnosis["dtype"]:
        return
    rule, message = diagnose(expected, out, **diagnosis)
    label = None if rule in ("rule_determinism", "rule_batch") else identify(out, variants, tol, tol)
    if label:
        raise CheckFailed(f"{what}: {label}. Evidence: {first_mismatch(expected, out, tol, tol)}.")
    steps = run.get("steps")
    if rule in ("generic", "rule_localised") and ours and isinstance(steps, dict):
        inside = first_divergence(steps, ours, tol, tol)
        if inside:
            lead = f"{what} is wrong" if rule == "generic" else message.partition(" Evidence: ")[0].rstrip(".")
            message = f"{lead}. Inside the model, {inside}"
    raise CheckFailed(message)


# ---------------------------------------------------------------------------------------------
# BareBonesLM(n_vocab, emb_dim, tie_weights=True): ids (..., T) -> logits (..., T, V)

# (seed, V, C, batch shape, T, dtype)
LM_CASES = [(30, 13, 4, (3,), 6, torch.float64)]
LM_HIDDEN_CASES = [(31, 17, 6, (), 5, torch.float64), (32, 9, 2, (4,), 3, torch.float32)]
LM_STEP_LR = 0.5


def _lm_inputs(seed, V, C, batch, T, dtype):
    g = _gen(seed)
    w_emb = torch.randn(V, C, generator=g, dtype=torch.float64)
    w_head = torch.randn(V, C, generator=g, dtype=torch.float64)
    ids = torch.randint(0, V, (*batch, T), generator=g)
    direction = torch.randn(*batch, T, V, generator=g, dtype=torch.float64)  # d loss / d logits
    return w_emb.to(dtype), w_head.to(dtype), ids, direction.to(dtype)


def _lm_sizes(V, C, batch, T) -> dict[str, int]:
    return {**({"B": batch[0]} if batch else {}), "T": T, "V": V, "C": C}


def _structure(model: nn.Module) -> dict:
    emb = getattr(model, "word_to_embedding", None)
    head = getattr(model, "lm_head", None)
    if not isinstance(emb, nn.Embedding) or not isinstance(head, nn.Linear):
        raise CheckFailed(
            f"{type(model).__name__} should keep self.word_to_embedding (an nn.Embedding) and self.lm_head "
            f"(an nn.Linear); it has word_to_embedding = {describe(emb)}, lm_head = {describe(head)}."
        )
    w_emb, w_head = emb.weight, head.weight
    return {
        "shared": w_head is w_emb,
        "same_storage": bool(w_head.data_ptr() == w_emb.data_ptr()),
        "transposed": bool(w_head.shape == w_emb.shape[::-1] != w_emb.shape),
        "equal_values": bool(w_head.shape == w_emb.shape and torch.equal(w_head.detach(), w_emb.detach())),
        "head_shape": list(w_head.shape),
        "head_bias": head.bias is not None,
        "count": num_parameters(model),
    }


def _probe_lm(cases):
    def probe(lm_class) -> dict:
        _class(lm_class, "BareBonesLM")
        found = []
        for seed, V, C, batch, T, dtype in cases:
            w_emb, w_head, ids, direction = _lm_inputs(seed, V, C, batch, T, dtype)
            sizes, ids_before = _lm_sizes(V, C, batch, T), ids.clone()
            # tied (the default): structure, then known weights in, logits out, one step on the embedding
            tied = lm_class(V, C)
            run: dict = {"tied": _structure(tied)}
            tied = tied.to(dtype)
            with torch.no_grad():
                tied.word_to_embedding.weight.copy_(w_emb)
            result = run["tied_logits"] = _run_module(tied, ids, sizes, bool(batch))
            if isinstance(result.get("out"), torch.Tensor) and result["out"].shape == direction.shape:
                # a plain gradient step (torch.optim would import torch._dynamo, which rebinds
                # torch.manual_seed, and the grader would take that for tampering)
                weight = tied.word_to_embedding.weight
                weight.grad = None
                (result["out"] * direction).sum().backward()
                with torch.no_grad():
                    weight -= LM_STEP_LR * weight.grad
                run["after_step"] = {"embedding": weight.detach().clone(), "head": tied.lm_head.weight.detach().clone()}
            # untied: two separate matrices, each loaded with its own known weights
            untied = lm_class(V, C, tie_weights=False)
            run["untied"] = _structure(untied)
            untied = untied.to(dtype)
            if not run["untied"]["shared"] and tuple(untied.lm_head.weight.shape) == (V, C):
                with torch.no_grad():
                    untied.word_to_embedding.weight.copy_(w_emb)
                    untied.lm_head.weight.copy_(w_head)
                run["untied_logits"] = _run_module(untied, ids, sizes, bool(batch))
            run["ids_changed"] = not torch.equal(ids, ids_before)
            found.append(run)
        return {"runs": found}

    return probe


def lm_variants(w_emb: torch.Tensor, w_head: torch.Tensor, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Logits under each classic mistake of forward (same weights and ids)."""
    logits = F.embedding(ids, w_emb) @ w_head.T  # (B, T, V)
    return {
        "you returned probabilities (a softmax) instead of logits; return the raw scores, the loss "
        "takes the softmax itself": torch.softmax(logits, dim=-1),
        "you returned log-probabilities (log_softmax) instead of logits; return the raw scores": torch.log_softmax(
            logits, dim=-1
        ),
        "forward uses word_to_embedding.weight as the output layer, so tie_weights=False has no effect; "
        "call self.lm_head": F.embedding(ids, w_emb) @ w_emb.T,
    }


def _judge_structure(what: str, s: dict, V: int, C: int, tied: bool) -> None:
    if s.get("head_bias"):
        raise CheckFailed(f"{what}: lm_head has a bias; keep nn.Linear(emb_dim, n_vocab, bias=False).")
    if tied and not s.get("shared"):
        if s.get("same_storage") and s.get("transposed"):
            problem = (
                f"lm_head.weight is a new nn.Parameter made from the embedding transposed, shape "
                f"{tuple(s.get('head_shape'))}: nn.Linear stores its weight as (out, in) = (V, C), the "
                "table's own shape, so the head takes the table itself, with no .T; and a new Parameter "
                "is a second tensor (num_parameters counts it twice)"
            )
        elif s.get("same_storage"):
            problem = (
                "lm_head.weight shares the embedding's storage (.data) but is a second nn.Parameter: "
                "num_parameters counts it twice, and each gets its own gradient"
            )
        elif s.get("equal_values"):
            problem = (
                "lm_head.weight is a copy of the embedding (equal values, a different tensor), "
                "e.g. nn.Parameter(weight.clone()) or copy_: it drifts apart at the first step "
                "and counts twice"
            )
        else:
            problem = "lm_head.weight and word_to_embedding.weight are two separate matrices: nothing was tied"
        raise CheckFailed(
            f"{what} with tie_weights=True: {problem}. Tie by assigning the embedding's Parameter "
            f"object itself to the head's weight attribute. Evidence: lm_head.weight is "
            f"word_to_embedding.weight is False; num_parameters = {s.get('count')}, expected {V * C}."
        )
    if tied and s.get("count") != V * C:
        raise CheckFailed(f"{what}: num_parameters = {s.get('count')}, expected {V} x {C} = {V * C}.")
    if not tied and s.get("shared"):
        raise CheckFailed(
            f"{what} with tie_weights=False still ties the weights (lm_head.weight is "
            "word_to_embedding.weight); tie only when tie_weights is true."
        )
    if not tied and s.get("head_shape") != [V, C]:
        raise CheckFailed(
            f"{what} with tie_weights=False: lm_head.weight has shape {tuple(s.get('head_shape') or ())}, "
            f"expected ({V}, {C})."
        )
    if not tied and s.get("count") != 2 * V * C:
        raise CheckFailed(
            f"{what} with tie_weights=False: num_parameters = {s.get('count')}, expected "
            f"2 x {V} x {C} = {2 * V * C} (two separate matrices)."
        )


def _judge_logits(what: str, run: dict, model: nn.Module, ids, w_head, sizes: dict, dtype) -> torch.Tensor:
    """Compare the logits of ``run`` with ``model``'s (the reference's, float64); returns them."""
    fail_if_raised(what, run)
    ours = trace(model, ids, with_inputs=True)
    expected = model(ids)
    out = run.get("out")
    if isinstance(out, torch.Tensor) and out.ndim == expected.ndim and out.shape[:-1] == expected.shape[:-1] \
            and out.shape[-1] != expected.shape[-1]:
        raise CheckFailed(
            f"{what} should return logits of shape {tuple(expected.shape)} (…, V), got {tuple(out.shape)}: "
            "did you return the embeddings without applying lm_head?"
        )
    w_emb = model.word_to_embedding.weight.detach()
    diagnosis = {"what": what, "atol": _tol(dtype), "rtol": _tol(dtype), "axes": (*"BT"[-ids.ndim:], "V"),
                 "sizes": sizes, "again": run.get("again"), "alone": run.get("alone"), "dtype": dtype}
    _mismatch(expected.detach(), out, lm_variants(w_emb, w_head, ids), diagnosis, run, ours)
    return expected


def _judge_lm(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, V, C, batch, T, dtype = case
            w_emb, w_head, ids, direction = _lm_inputs(*case)
            what, sizes, tol = f"BareBonesLM({V}, {C})", _lm_sizes(V, C, batch, T), _tol(dtype)
            if not isinstance(run.get("tied"), dict) or not isinstance(run.get("untied"), dict):
                raise CheckFailed("the check's data is incomplete")
            _judge_structure(what, run["tied"], V, C, tied=True)
            _judge_structure(what, run["untied"], V, C, tied=False)
            if run.get("ids_changed") is not False:
                raise CheckFailed(f"{what} changed its input ids in place.")
            w64, h64 = w_emb.double(), w_head.double()
            model = ref.BareBonesLM(V, C).double()
            with torch.no_grad():
                model.word_to_embedding.weight.copy_(w64)
            on = f"{what} on ids of shape {tuple(ids.shape)}"
            expected = _judge_logits(on, run.get("tied_logits") or {}, model, ids, w64, sizes, dtype)
            # one step of SGD on the embedding: the tied head must move with it
            (expected * direction.double()).sum().backward()
            stepped = (w64 - LM_STEP_LR * model.word_to_embedding.weight.grad).detach()
            after = run.get("after_step")
            if not isinstance(after, dict) or not all(
                    isinstance(after.get(k), torch.Tensor) and after[k].shape == (V, C) for k in ("head", "embedding")):
                raise CheckFailed("the check's data is incomplete")
            head, emb = after["head"], after["embedding"]
            if not close(emb, head, 0, 0):
                raise CheckFailed(
                    f"{what}: after one gradient step on word_to_embedding.weight, lm_head.weight did not "
                    f"move with it ({first_mismatch(emb, head, 0, 0)}): they are not one tensor."
                )
            if not close(stepped, emb, tol, tol):
                raise CheckFailed(
                    f"{what}: one gradient step moved the tied weight differently from the reference "
                    f"({first_mismatch(stepped, emb, tol, tol)}): the gradient must flow through both uses "
                    "of the matrix, the lookup and the head."
                )
            if not isinstance(run.get("untied_logits"), dict):
                raise CheckFailed("the check's data is incomplete")
            untied = ref.BareBonesLM(V, C, tie_weights=False).double()
            with torch.no_grad():
                untied.word_to_embedding.weight.copy_(w64)
                untied.lm_head.weight.copy_(h64)
                _judge_logits(f"{what}, tie_weights=False, on ids of shape {tuple(ids.shape)}",
                              run["untied_logits"], untied, ids, h64, sizes, dtype)
        shapes = ", ".join(f"V={c[1]} C={c[2]} ids{(*c[3], c[4])}" for c in cases)
        return (
            f"BareBonesLM: {shapes}: the tied head is the embedding's own Parameter (V·C parameters, "
            "2·V·C untied), the logits match the reference, and a step on the embedding moves the head."
        )

    return judge


check_tied_lm, check_tied_lm_hidden = checks("check_tied_lm", _probe_lm, _judge_lm, (LM_CASES,), (LM_HIDDEN_CASES,))

# ---------------------------------------------------------------------------------------------
# cross_entropy(logits (..., V), targets (...)) -> 0-d tensor

# (seed, leading shape, V, kind, dtype). kind: "normal" (randn * 3), "large" (every row near
# +1000: a naive exp overflows), "spread" (one row near +600, one near -600: a single maximum for
# the whole tensor underflows), "uniform" (all zeros: the loss is ln V).
CE_CASES = [
    (50, (2, 3), 7, "normal", torch.float64),
    (51, (4,), 9, "normal", torch.float64),
    (52, (3,), 5, "large", torch.float64),
    (53, (2,), 6, "spread", torch.float64),
]
CE_HIDDEN_CASES = [
    (54, (3, 4), 6, "normal", torch.float32),
    (55, (5,), 256, "uniform", torch.float64),
    (56, (2, 5), 3, "large", torch.float32),
    (57, (4, 2, 3), 11, "normal", torch.float64),
]
_LARGE = {torch.float32: 100.0, torch.float64: 1000.0}  # exp overflows beyond 88.7 and 709.8


def _ce_inputs(seed, lead, V, kind, dtype):
    g = _gen(seed)
    logits = 3 * torch.randn(*lead, V, generator=g, dtype=torch.float64)
    targets = torch.randint(0, V, lead, generator=g)
    if kind == "large":
        logits = logits + _LARGE[dtype]
    elif kind == "spread":
        signs = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(lead[-1])], dtype=torch.float64)
        logits = logits + 600.0 * signs.reshape(*([1] * (len(lead) - 1)), lead[-1], 1)
    elif kind == "uniform":
        logits = torch.zeros_like(logits)
    return logits.to(dtype), targets


def _ce_sizes(lead, V) -> dict[str, int]:
    return {**(dict(zip("BT", lead, strict=True)) if len(lead) == 2 else {}), "N": math.prod(lead), "V": V}


def _probe_ce(cases):
    def probe(cross_entropy) -> dict:
        if not callable(cross_entropy):
            raise CheckFailed(f"expected the function cross_entropy, got {describe(cross_entropy)}")
        found = []
        for case in cases:
            logits, targets = _ce_inputs(*case)
            sizes, V = _ce_sizes(case[1], case[2]), case[2]
            logits.requires_grad_(True)
            run = attempt(cross_entropy, logits, targets, sizes=sizes)
            out = run.get("out")
            if isinstance(out, torch.Tensor) and out.numel() == 1:
                if out.requires_grad:
                    backward = attempt(lambda loss: loss.sum().backward(), out)
                    if "raised" in backward:
                        run["backward_raised"] = f"{backward['raised']}: {backward['message']}"
                    elif logits.grad is not None:
                        run["grad"] = logits.grad.clone()
                else:
                    run["no_grad"] = True
            # each row alone, as (1, V) logits: is one row's loss right, or only their combination wrong?
            rows, wanted = logits.detach().reshape(-1, V), targets.reshape(-1)
            run["alone"] = [attempt(cross_entropy, rows[i:i + 1].clone(), wanted[i:i + 1].clone(),
                                    sizes={"N": 1, "V": V}).get("out") for i in range(min(len(rows), 24))]
            found.append(run)
        return {"runs": found}

    return probe


def ce_variants(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """The loss under each classic mistake (float64 inputs)."""
    V = logits.shape[-1]
    rows, wanted = logits.reshape(-1, V), targets.reshape(-1)  # (N, V), (N,)
    N = rows.shape[0]

    def loss(log_probs):  # (N, V) -> the mean of -log p of the targets
        return -log_probs[torch.arange(N), wanted].mean()

    logp = torch.log_softmax(rows, dim=-1)  # (N, V)
    shifted = rows - rows.max(dim=-1, keepdim=True).values  # (N, V)
    by_column = rows - rows.max(dim=0, keepdim=True).values  # (N, V): one maximum per vocabulary entry
    lse = shifted.exp().sum(dim=-1, keepdim=True).log()  # (N, 1)
    total = loss(logp) * N  # the sum of the N losses
    variants = {
        "you summed over the positions instead of taking the mean": total,
        f"you averaged over the vocabulary too (divided by N·V instead of N); the mean is over the {N} "
        "positions only": total / (N * V),
        "the sign is wrong: the loss is the *negative* log-probability": -loss(logp),
        "you used log base 2 (or 10); use the natural log": loss(logp) / math.log(2),
        "you used log base 10; use the natural log": loss(logp) / math.log(10),
        "you forgot the log: that is the mean of -p, not of -log p": -logp.exp()[torch.arange(N), wanted].mean(),
        "you took every target in every row (logp[:, targets]); pick one entry per row, "
        "logp[torch.arange(N), targets]": -logp[:, wanted].mean(),
        "you did not normalise: the logits themselves are not log-probabilities; subtract the log of the "
        "sum of exponentials": loss(rows),
        "you did not normalise: subtracting the row's maximum is not enough, the log of the sum of the "
        "exponentials must be subtracted too": loss(shifted),
        "the log of the sum of exponentials is added instead of subtracted": loss(shifted + lse),
        "you subtracted the sum of the exponentials, not its log": loss(shifted - lse.exp()),
        "you took the mean of the exponentials inside the log instead of their sum: that makes every "
        f"loss smaller by ln V = ln {V}": loss(shifted - (lse - math.log(V))),
        "the softmax runs over the positions (dim 0 of the (N, V) rows), not over the vocabulary "
        "(dim=-1): every row must be normalised on its own": loss(torch.log_softmax(rows, dim=0)),
        "the maximum is taken over the positions (dim 0 of the (N, V) rows), not over each row "
        "(dim=-1): subtracting a different number from each entry of a row changes its softmax": loss(
            by_column - by_column.exp().sum(dim=-1, keepdim=True).log()),
        "the sum of the exponentials runs over the positions (dim 0 of the (N, V) rows), not over "
        "each row's vocabulary (dim=-1)": loss(shifted - shifted.exp().sum(dim=0, keepdim=True).log()),
        "you averaged the log-probabilities of every class, not only the target's: pick the one entry "
        "per row whose column is the target": -logp.mean(),
        "the targets are off by one: you picked column target - 1": loss(logp.roll(1, dims=-1)),
    }
    for dim in range(logits.ndim - 1) if logits.ndim >= 3 else ():
        wrong = torch.log_softmax(logits, dim=dim).reshape(-1, V)
        variants[f"the softmax runs over dimension {dim}, not over the vocabulary (the last dimension)"] = loss(wrong)
    for name, k in _ce_sizes(tuple(targets.shape), V).items():
        if k not in (1, N):
            variants[f"you divided the sum of the {N} losses by {name} = {k}; the mean divides by the number "
                     f"of positions, N = {N}"] = total / k
    return variants


def _ce_alone(what: str, run: dict, logits, targets, tol: float) -> str | None:
    """What the student's loss of each row alone establishes: whether one row's loss is right."""
    V = logits.shape[-1]
    rows, wanted = logits.double().reshape(-1, V), targets.reshape(-1)
    alone = run.get("alone")
    n = min(len(rows), 24)
    if not isinstance(alone, list) or len(alone) != n or not all(
            isinstance(a, torch.Tensor) and a.numel() == 1 for a in alone):
        return None
    mine = torch.stack([a.reshape(()).double() for a in alone])  # (n,)
    ours = -torch.log_softmax(rows[:n], dim=-1)[torch.arange(n), wanted[:n]]  # (n,)
    if close(ours, mine, tol, tol):
        return (f"{what}: each row alone, given as (1, V) logits, gets the right loss, but the rows together "
                "do not: the rows are combined wrongly (an operation across the rows, such as a max, a sum or "
                "a softmax over the positions instead of over dim=-1, or an average over something other "
                f"than the {len(rows)} positions).")
    rule, message = diagnose(ours, mine, what="the loss of each row given alone as (1, V) logits", atol=tol,
                             rtol=tol, axes=("N",), sizes={"N": n, "V": V})
    lnv = " (ln V: a mean where a sum belongs, or the reverse)" if f"{-math.log(V):.4g}" in message else ""
    return f"{what}: already wrong for a single row, so the mistake is in one row's loss: {message}{lnv}"


def _judge_ce(cases):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        for case, run in zip(cases, found, strict=True):
            seed, lead, V, kind, dtype = case
            logits, targets = _ce_inputs(*case)
            what = f"cross_entropy(logits {tuple(logits.shape)} {str(dtype).replace('torch.', '')}, targets {tuple(targets.shape)})"
            message = run.get("message", "")
            if "raised" in run and len(lead) > 1 and any("out" in r for c, r in zip(cases, found, strict=True)
                                                          if len(c[1]) == 1):
                fail_if_raised(what, run, hint=", although (N, V) logits worked: flatten first, "
                               "logits.reshape(-1, V) and targets.reshape(-1).")
            if "in-place" in message or "inplace" in message:
                fail_if_raised(what, run, hint=": do not change logits in place (x -= m); compute a new tensor (x - m).")
            fail_if_raised(what, run)
            out = run.get("out")
            if isinstance(out, float):
                raise CheckFailed(
                    f"{what} returned the Python float {out!r}; return the 0-d tensor (no .item()), so "
                    "that the loss can be differentiated."
                )
            if isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(lead):
                raise CheckFailed(
                    f"{what} returned one loss per position, shape {tuple(out.shape)}; return their mean, "
                    "a single number (a 0-d tensor)."
                )
            if not isinstance(out, torch.Tensor) or out.numel() != 1:
                raise CheckFailed(f"{what} should return a 0-d tensor, got {describe(out)}.")
            expected = ref.cross_entropy(logits.double(), targets)
            tol, got = _tol(dtype), out.reshape(())
            if not torch.isfinite(got):
                if kind == "large":
                    raise CheckFailed(
                        f"{what} returned {got.item()} for logits near {_LARGE[dtype]:.0f}: "
                        f"exp overflows to inf (in {str(dtype).replace('torch.', '')}, beyond "
                        f"exp({math.log(torch.finfo(dtype).max):.1f})) and inf/inf is nan. Subtract each "
                        f"row's maximum before exp. Expected {expected.item():.6g}."
                    )
                if kind == "spread":
                    raise CheckFailed(
                        f"{what} returned {got.item()} for one row of logits near +600 and one near -600: "
                        "you subtracted a single maximum for the whole tensor, so exp(-1200) underflows to 0 "
                        "and log(0) = -inf. Subtract each row's own maximum (max over dim=-1, keepdim=True). "
                        f"Expected {expected.item():.6g}."
                    )
            if got.dtype != dtype or not torch.isfinite(got):
                raise CheckFailed(explain_mismatch(expected, got, what=what, atol=tol, rtol=tol, dtype=dtype))
            if not close(expected, got, tol, tol):
                label = identify(got, ce_variants(logits.double(), targets), tol, tol)
                evidence = f"expected {expected.item():.10g}, got {got.item():.10g}"
                if label:
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
                raise CheckFailed(f"{_ce_alone(what, run, logits, targets, tol) or what + ':'} Evidence: {evidence}.")
            if run.get("no_grad"):
                raise CheckFailed(
                    f"{what} has the right value but is cut off from the logits (no grad_fn): do not use "
                    ".item(), .detach(), .data, numpy or torch.tensor(...) on the way."
                )
            if "backward_raised" in run:
                raise CheckFailed(f"{what}: backward() raised {run['backward_raised']}.")
            x = logits.detach().double().requires_grad_(True)
            ref.cross_entropy(x, targets).backward()
            grad = run.get("grad")
            if not isinstance(grad, torch.Tensor) or grad.shape != x.shape or not close(x.grad, grad, tol, tol):
                evidence = first_mismatch(x.grad, grad, tol, tol) if isinstance(grad, torch.Tensor) and \
                    grad.shape == x.shape else f"the gradient is {describe(grad)}"
                raise CheckFailed(f"{what}: the value is right but the gradient is not ({evidence}); something "
                                  "on the way is detached.")
        shapes = ", ".join(f"{(*c[1], c[2])} {c[3]}" for c in cases)
        return (
            f"cross_entropy: logits {shapes}: value and gradient match the reference, finite for large logits."
        )

    return judge


check_cross_entropy, check_cross_entropy_hidden = checks(
    "check_cross_entropy", _probe_ce, _judge_ce, (CE_CASES,), (CE_HIDDEN_CASES,)
)

# ---------------------------------------------------------------------------------------------
# MLP(emb_dim, n_hidden): x (..., C) -> (..., C)

# (seed, C, H, batch shape, T, dtype)
MLP_CASES = [(40, 5, 16, (2,), 3, torch.float64)]
MLP_HIDDEN_CASES = [(41, 7, 4, (), 3, torch.float32), (42, 6, 9, (4,), 2, torch.float64)]
MLP_LAYERS = {"model.0": "the first linear layer", "model.1": "the ReLU", "model.2": "the second linear layer"}


def _mlp_shapes(C: int, H: int) -> dict[str, list[int]]:
    return {"model.0.weight": [H, C], "model.0.bias": [H], "model.2.weight": [C, H], "model.2.bias": [C]}


def _mlp_inputs(seed, C, H, batch, T, dtype):
    g = _gen(seed)
    weights = {name: torch.randn(*shape, generator=g, dtype=torch.float64) for name, shape in _mlp_shapes(C, H).items()}
    x = torch.randn(*batch, T, C, generator=g, dtype=torch.float64)
    return {k: v.to(dtype) for k, v in weights.items()}, x.to(dtype)


def _probe_mlp(cases):
    def probe(mlp_class) -> dict:
        _class(mlp_class, "MLP")
        found = []
        for seed, C, H, batch, T, dtype in cases:
            weights, x = _mlp_inputs(seed, C, H, batch, T, dtype)
            mlp = mlp_class(C, H)
            inner = getattr(mlp, "model", None)
            run: dict = {
                "params": {name: list(p.shape) for name, p in mlp.named_parameters()},
                "count": num_parameters(mlp),
                "sequential": isinstance(inner, nn.Sequential),
                "layers": [type(m).__name__ for m in inner] if isinstance(inner, nn.Sequential) else [],
            }
            if run["params"] == _mlp_shapes(C, H):
                mlp = mlp.to(dtype)
                with torch.no_grad():
                    for name, param in mlp.named_parameters():
                        param.copy_(weights[name])
                    before = x.clone()
                    run.update(_run_module(mlp, x, {**({"B": batch[0]} if batch else {}), "T": T, "C": C, "H": H},
                                           bool(batch)))
                    run["x_changed"] = not torch.equal(before, x)
            found.append(run)
        return {"runs": found}

    return probe


def mlp_variants(weights: dict, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What an MLP computes under each classic mistake (same weights and input)."""
    def lin(name, h):
        return h @ weights[f"{name}.weight"].T + weights[f"{name}.bias"]

    pre = lin("model.0", x)  # (..., H)
    out = lin("model.2", torch.relu(pre))  # (..., C)
    return {
        "you used GELU instead of ReLU; the interface is nn.ReLU()": lin("model.2", F.gelu(pre)),
        "you used tanh instead of ReLU; the interface is nn.ReLU()": lin("model.2", torch.tanh(pre)),
        "you used a sigmoid instead of ReLU; the interface is nn.ReLU()": lin("model.2", torch.sigmoid(pre)),
        "you used LeakyReLU instead of ReLU: negative values must become 0; the interface is nn.ReLU()": lin(
            "model.2", F.leaky_relu(pre)),
        "you used a softmax instead of ReLU; the interface is nn.ReLU()": lin("model.2", torch.softmax(pre, dim=-1)),
        "there is a ReLU after the last layer too: the output can never be negative; the MLP ends with "
        "the second linear layer": torch.relu(out),
        "forward adds the input (a residual connection, x + mlp(x)); the MLP returns only its own output "
        "(the residual comes later, in the Transformer block)": x + out,
        "the activation is missing: two linear layers in a row are just one linear map": lin("model.2", pre),
        "forward returns the input unchanged": x,
    }


def _mlp_structure(what: str, run: dict, C: int, H: int) -> None:
    params, layers, want = run.get("params"), run.get("layers") or [], _mlp_shapes(C, H)
    if not isinstance(params, dict):
        raise CheckFailed("the check's data is incomplete")
    if params != want:
        first = params.get("model.0.weight")
        if not run.get("sequential"):
            problem = ("store the layers in self.model = nn.Sequential(...): the parameter names are part "
                       "of the interface")
        elif layers == ["Linear", "Linear"]:
            problem = "the ReLU between the two linear layers is missing (so the second layer is model.1)"
        elif first == [C, H] and params.get("model.2.weight") == [H, C]:
            problem = (f"the layer sizes are swapped: the first layer goes from emb_dim={C} into "
                       f"n_hidden={H}, nn.Linear({C}, {H}), and the second comes back, nn.Linear({H}, {C})")
        elif first and "model.0.bias" not in params:
            problem = "the linear layers have no bias; keep nn.Linear's default bias=True"
        elif first == [C, C] or params.get("model.2.weight") == [C, C]:
            problem = f"the hidden layer has emb_dim={C} units instead of n_hidden={H}"
        elif first and first[1:] == [C] and params.get("model.2.weight") == [C, first[0]]:
            problem = f"the hidden layer has {first[0]} units instead of n_hidden={H}"
        elif layers and layers[0] != "Linear":
            problem = f"the Sequential should start with the linear layer; it holds {layers}"
        elif first and first[0] != H:
            problem = f"the first layer has {first[0]} outputs, but it should have n_hidden={H}: nn.Linear({C}, {H})"
        else:
            problem = f"the second layer should map n_hidden={H} back to emb_dim={C}, nn.Linear({H}, {C}); the layers are {layers}"
        names = ", ".join(f"{k} {tuple(v)}" for k, v in params.items()) or "none"
        expected = ", ".join(f"{k} {tuple(v)}" for k, v in want.items())
        raise CheckFailed(f"{what}: {problem}. Parameters: {names}; expected {expected}.")
    if run.get("count") != C * H + H + H * C + C:
        raise CheckFailed(f"{what}: num_parameters = {run.get('count')}, expected {C * H + H + H * C + C}.")


def _judge_mlp(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, C, H, batch, T, dtype = case
            weights, x = _mlp_inputs(*case)
            _mlp_structure(f"MLP(emb_dim={C}, n_hidden={H})", run, C, H)
            what = f"MLP(emb_dim={C}, n_hidden={H}) on x of shape {tuple(x.shape)}"
            fail_if_raised(what, run)
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} changed its input x in place; a layer must leave x alone.")
            mlp = ref.MLP(C, H).double()
            with torch.no_grad():
                for name, param in mlp.named_parameters():
                    param.copy_(weights[name].double())
                expected = mlp(x.double())
                ours = trace(mlp, x.double(), with_inputs=True)
            diagnosis = {"what": what, "atol": _tol(dtype), "rtol": _tol(dtype), "axes": (*"BT"[-x.ndim + 1:], "C"),
                         "sizes": {**({"B": batch[0]} if batch else {}), "T": T, "C": C, "H": H},
                         "again": run.get("again"), "alone": run.get("alone"), "dtype": dtype}
            try:
                _mismatch(expected, run.get("out"), mlp_variants({k: v.double() for k, v in weights.items()},
                                                                 x.double()), diagnosis, run, ours)
            except CheckFailed as failed:  # name the layers of the Sequential by what they are
                message = str(failed)
                for name, gloss in MLP_LAYERS.items():
                    message = message.replace(f"{name} ", f"{name} ({gloss}) ").replace(f"{name};", f"{name} ({gloss});")
                raise CheckFailed(message) from None
        shapes = ", ".join(f"MLP({c[1]}, {c[2]}) on {(*c[3], c[4], c[1])}" for c in cases)
        counts = ", ".join(str(c[1] * c[2] * 2 + c[1] + c[2]) for c in cases)
        return f"MLP: {shapes}: parameter names, shapes and counts ({counts}) and outputs match the reference."

    return judge


check_mlp, check_mlp_hidden = checks("check_mlp", _probe_mlp, _judge_mlp, (MLP_CASES,), (MLP_HIDDEN_CASES,))
