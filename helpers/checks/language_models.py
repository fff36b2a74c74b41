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

from helpers.checks.core import (
    Check,
    CheckFailed,
    close,
    describe,
    expect_tensor,
    first_mismatch,
    identify,
)
from helpers.params import num_parameters
from helpers.reference import language_models as ref


def _attempt(fn, *args) -> dict:
    """Call the student's code; an exception becomes data (the judge names the likely cause).
    ``NotImplementedError`` passes through: the exercise is not answered yet."""
    try:
        return {"out": fn(*args)}
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - any error of the student's code is data here
        return {"raised": type(exc).__name__, "message": str(exc)[:500]}


def _runs(data: dict, n: int) -> list:
    runs = data.get("runs")
    if not isinstance(runs, list) or len(runs) != n or not all(isinstance(r, dict) for r in runs):
        raise CheckFailed("the check's data is incomplete")
    return runs


def _raised(what: str, run: dict) -> None:
    if "raised" in run:
        raise CheckFailed(f"{what} raised {run['raised']}: {run.get('message', '')}")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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
        "equal_values": bool(w_head.shape == w_emb.shape and torch.equal(w_head.detach(), w_emb.detach())),
        "head_is_parameter": isinstance(w_head, nn.Parameter),
        "head_shape": list(w_head.shape),
        "head_bias": head.bias is not None,
        "count": num_parameters(model),
        "names": sorted(name for name, _ in model.named_parameters()),
    }


def _probe_lm(cases):
    def probe(lm_class) -> dict:
        if not isinstance(lm_class, type) or not issubclass(lm_class, nn.Module):
            raise CheckFailed(f"expected the class BareBonesLM (an nn.Module), got {describe(lm_class)}")
        runs = []
        for seed, V, C, batch, T, dtype in cases:
            w_emb, w_head, ids, direction = _lm_inputs(seed, V, C, batch, T, dtype)
            ids_before = ids.clone()
            run: dict = {}
            # tied (the default): structure, then known weights in, logits out, one step on the embedding
            tied = lm_class(V, C)
            run["tied"] = _structure(tied)
            tied = tied.to(dtype)
            with torch.no_grad():
                tied.word_to_embedding.weight.copy_(w_emb)
            result = _attempt(tied, ids)
            run["tied_logits"] = result
            if "out" in result and isinstance(result["out"], torch.Tensor) and result["out"].shape == direction.shape:
                # a plain gradient step (torch.optim would import torch._dynamo, which rebinds
                # torch.manual_seed, and the grader would take that for tampering)
                weight = tied.word_to_embedding.weight
                weight.grad = None
                (result["out"] * direction).sum().backward()
                with torch.no_grad():
                    weight -= LM_STEP_LR * weight.grad
                run["after_step"] = {
                    "embedding": tied.word_to_embedding.weight.detach().clone(),
                    "head": tied.lm_head.weight.detach().clone(),
                }
            # untied: two separate matrices, each loaded with its own known weights
            untied = lm_class(V, C, tie_weights=False)
            run["untied"] = _structure(untied)
            untied = untied.to(dtype)
            if not run["untied"]["shared"] and tuple(untied.lm_head.weight.shape) == (V, C):
                with torch.no_grad():
                    untied.word_to_embedding.weight.copy_(w_emb)
                    untied.lm_head.weight.copy_(w_head)
                run["untied_logits"] = _attempt(untied, ids)
            run["ids_changed"] = not torch.equal(ids, ids_before)
            runs.append(run)
        return {"runs": runs}

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
    if tied:
        if not s.get("shared"):
            count = s.get("count")
            if s.get("same_storage"):
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
                f"word_to_embedding.weight is False; num_parameters = {count}, expected {V * C}."
            )
        if s.get("count") != V * C:
            raise CheckFailed(f"{what}: num_parameters = {s.get('count')}, expected {V} x {C} = {V * C}.")
    else:
        if s.get("shared"):
            raise CheckFailed(
                f"{what} with tie_weights=False still ties the weights (lm_head.weight is "
                "word_to_embedding.weight); tie only when tie_weights is true."
            )
        if s.get("head_shape") != [V, C]:
            raise CheckFailed(
                f"{what} with tie_weights=False: lm_head.weight has shape {tuple(s.get('head_shape') or ())}, "
                f"expected ({V}, {C})."
            )
        if s.get("count") != 2 * V * C:
            raise CheckFailed(
                f"{what} with tie_weights=False: num_parameters = {s.get('count')}, expected "
                f"2 x {V} x {C} = {2 * V * C} (two separate matrices)."
            )


def _judge_logits(what: str, run: dict, expected: torch.Tensor, variants: dict, tol: float, ids) -> None:
    _raised(what, run)
    out = run.get("out")
    if isinstance(out, torch.Tensor) and out.ndim == expected.ndim and out.shape[:-1] == expected.shape[:-1] \
            and out.shape[-1] != expected.shape[-1]:
        raise CheckFailed(
            f"{what} should return logits of shape {tuple(expected.shape)} (…, V), got {tuple(out.shape)}: "
            "did you return the embeddings without applying lm_head?"
        )
    out = expect_tensor(out, tuple(expected.shape), what)
    if close(expected, out, tol, tol):
        return
    label = identify(out, variants, tol, tol)
    evidence = first_mismatch(expected, out, tol, tol)
    if label:
        raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
    raise CheckFailed(f"{what} differs from the reference. Evidence: {evidence}.")


def _judge_lm(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, _runs(data, len(cases)), strict=True):
            seed, V, C, batch, T, dtype = case
            w_emb, w_head, ids, direction = _lm_inputs(*case)
            what = f"BareBonesLM({V}, {C})"
            tol = 1e-9 if dtype == torch.float64 else 1e-4
            if not isinstance(run.get("tied"), dict) or not isinstance(run.get("untied"), dict):
                raise CheckFailed("the check's data is incomplete")
            _judge_structure(what, run["tied"], V, C, tied=True)
            _judge_structure(what, run["untied"], V, C, tied=False)
            if run.get("ids_changed") is not False:
                raise CheckFailed(f"{what} changed its input ids in place.")
            w64, h64, d64 = w_emb.double(), w_head.double(), direction.double()
            model = ref.BareBonesLM(V, C).double()
            with torch.no_grad():
                model.word_to_embedding.weight.copy_(w64)
            expected = model(ids)
            on = f"{what} on ids of shape {tuple(ids.shape)}"
            _judge_logits(on, run.get("tied_logits", {}), expected.detach(), lm_variants(w64, w64, ids), tol, ids)
            # one step of SGD on the embedding: the tied head must move with it
            (expected * d64).sum().backward()
            stepped = (w64 - LM_STEP_LR * model.word_to_embedding.weight.grad).detach()
            after = run.get("after_step")
            if not isinstance(after, dict):
                raise CheckFailed("the check's data is incomplete")
            head = expect_tensor(after.get("head"), (V, C), f"{what}: lm_head.weight after a step")
            emb = expect_tensor(after.get("embedding"), (V, C), f"{what}: word_to_embedding.weight after a step")
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
            untied_run = run.get("untied_logits")
            if not isinstance(untied_run, dict):
                raise CheckFailed("the check's data is incomplete")
            untied = ref.BareBonesLM(V, C, tie_weights=False).double()
            with torch.no_grad():
                untied.word_to_embedding.weight.copy_(w64)
                untied.lm_head.weight.copy_(h64)
                expected_untied = untied(ids)
            _judge_logits(f"{what}, tie_weights=False, on ids of shape {tuple(ids.shape)}", untied_run,
                          expected_untied, lm_variants(w64, h64, ids), tol, ids)
        shapes = ", ".join(f"V={c[1]} C={c[2]} ids{(*c[3], c[4])}" for c in cases)
        return (
            f"BareBonesLM: {shapes}: the tied head is the embedding's own Parameter (V·C parameters, "
            "2·V·C untied), the logits match the reference, and a step on the embedding moves the head."
        )

    return judge


check_tied_lm = Check("check_tied_lm", _probe_lm(LM_CASES), _judge_lm(LM_CASES))
check_tied_lm_hidden = Check("check_tied_lm_hidden", _probe_lm(LM_HIDDEN_CASES), _judge_lm(LM_HIDDEN_CASES), hidden=True)

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


def _probe_ce(cases):
    def probe(cross_entropy) -> dict:
        if not callable(cross_entropy):
            raise CheckFailed(f"expected the function cross_entropy, got {describe(cross_entropy)}")
        runs = []
        for case in cases:
            logits, targets = _ce_inputs(*case)
            logits.requires_grad_(True)
            run = _attempt(cross_entropy, logits, targets)
            out = run.get("out")
            if isinstance(out, torch.Tensor) and out.numel() == 1:
                if out.requires_grad:
                    backward = _attempt(lambda loss: loss.sum().backward(), out)
                    if "raised" in backward:
                        run["backward_raised"] = f"{backward['raised']}: {backward['message']}"
                    elif logits.grad is not None:
                        run["grad"] = logits.grad.clone()
                else:
                    run["no_grad"] = True
            runs.append(run)
        return {"runs": runs}

    return probe


def ce_variants(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """The loss under each classic mistake (float64 inputs)."""
    V = logits.shape[-1]
    rows, wanted = logits.reshape(-1, V), targets.reshape(-1)  # (N, V), (N,)
    N = rows.shape[0]
    logp = torch.log_softmax(rows, dim=-1)  # (N, V)
    picked = logp[torch.arange(N), wanted]  # (N,)
    loss = -picked.mean()
    variants = {
        "you summed over the positions instead of taking the mean": -picked.sum(),
        f"you averaged over the vocabulary too (divided by N·V instead of N); the mean is over the {N} "
        "positions only": loss / V,
        "the sign is wrong: the loss is the *negative* log-probability": -loss,
        "you used log base 2 (or 10); use the natural log": loss / math.log(2),
        "you used log base 10; use the natural log": loss / math.log(10),
        "you forgot the log: that is the mean of -p, not of -log p": -picked.exp().mean(),
        "you took every target in every row (logp[:, targets]); pick one entry per row, "
        "logp[torch.arange(N), targets]": -logp[:, wanted].mean(),
        "you did not normalise: the logits themselves are not log-probabilities; subtract the log of the "
        "sum of exponentials": -rows[torch.arange(N), wanted].mean(),
    }
    wrong = torch.log_softmax(rows, dim=0)[torch.arange(N), wanted]
    variants["the softmax runs over the positions (dim 0 of the (N, V) rows), not over the vocabulary "
             "(dim=-1): every row must be normalised on its own"] = -wrong.mean()
    for dim in range(logits.ndim - 1) if logits.ndim >= 3 else ():
        wrong = torch.log_softmax(logits, dim=dim).reshape(-1, V)[torch.arange(N), wanted]
        variants[f"the softmax runs over dimension {dim}, not over the vocabulary (the last dimension)"] = -wrong.mean()
    return variants


def _judge_ce(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, _runs(data, len(cases)), strict=True):
            seed, lead, V, kind, dtype = case
            logits, targets = _ce_inputs(*case)
            what = f"cross_entropy(logits {tuple(logits.shape)} {str(dtype).replace('torch.', '')}, targets {tuple(targets.shape)})"
            if "raised" in run:
                flat_worked = any(
                    "out" in r for c, r in zip(cases, data["runs"], strict=False) if isinstance(r, dict) and len(c[1]) == 1
                )
                if len(lead) > 1 and flat_worked:
                    raise CheckFailed(
                        f"{what} raised {run['raised']} ({run.get('message', '')}), although (N, V) logits "
                        "worked: flatten first, logits.reshape(-1, V) and targets.reshape(-1)."
                    )
                if "in-place" in run.get("message", "") or "inplace" in run.get("message", ""):
                    raise CheckFailed(
                        f"{what} raised {run['raised']} ({run.get('message', '')}): do not change logits in "
                        "place (x -= m); compute a new tensor (x - m)."
                    )
                _raised(what, run)
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
            tol = 1e-9 if dtype == torch.float64 else 1e-4
            got = out.reshape(())
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
                raise CheckFailed(f"{what} returned {got.item()}; expected {expected.item():.6g}.")
            if not close(expected, got, tol, tol):
                label = identify(got, ce_variants(logits.double(), targets), tol, tol)
                evidence = f"expected {expected.item():.10g}, got {got.item():.10g}"
                raise CheckFailed(f"{what}: {label}. Evidence: {evidence}." if label else f"{what}: {evidence}.")
            if run.get("no_grad"):
                raise CheckFailed(
                    f"{what} has the right value but is cut off from the logits (no grad_fn): do not use "
                    ".item(), .detach(), .data, numpy or torch.tensor(...) on the way."
                )
            if "backward_raised" in run:
                raise CheckFailed(f"{what}: backward() raised {run['backward_raised']}.")
            grad = run.get("grad")
            expected_grad = _ref_grad(logits, targets)
            grad = expect_tensor(grad, tuple(logits.shape), f"{what}: the gradient of the loss")
            if not close(expected_grad, grad, tol, tol):
                raise CheckFailed(
                    f"{what}: the value is right but the gradient is not "
                    f"({first_mismatch(expected_grad, grad, tol, tol)}); something on the way is detached."
                )
        shapes = ", ".join(f"{(*c[1], c[2])} {c[3]}" for c in cases)
        return (
            f"cross_entropy: logits {shapes}: value and gradient match the reference, finite for large logits."
        )

    return judge


def _ref_grad(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    x = logits.detach().double().requires_grad_(True)
    ref.cross_entropy(x, targets).backward()
    return x.grad


check_cross_entropy = Check("check_cross_entropy", _probe_ce(CE_CASES), _judge_ce(CE_CASES))
check_cross_entropy_hidden = Check(
    "check_cross_entropy_hidden", _probe_ce(CE_HIDDEN_CASES), _judge_ce(CE_HIDDEN_CASES), hidden=True
)

# ---------------------------------------------------------------------------------------------
# MLP(emb_dim, n_hidden): x (..., C) -> (..., C)

# (seed, C, H, batch shape, T, dtype)
MLP_CASES = [(40, 5, 16, (2,), 3, torch.float64)]
MLP_HIDDEN_CASES = [(41, 7, 4, (), 3, torch.float32), (42, 6, 9, (4,), 2, torch.float64)]


def _mlp_shapes(C: int, H: int) -> dict[str, tuple[int, ...]]:
    return {"model.0.weight": (H, C), "model.0.bias": (H,), "model.2.weight": (C, H), "model.2.bias": (C,)}


def _mlp_inputs(seed, C, H, batch, T, dtype):
    g = _gen(seed)
    weights = {name: torch.randn(*shape, generator=g, dtype=torch.float64) for name, shape in _mlp_shapes(C, H).items()}
    x = torch.randn(*batch, T, C, generator=g, dtype=torch.float64)
    return {k: v.to(dtype) for k, v in weights.items()}, x.to(dtype)


def _probe_mlp(cases):
    def probe(mlp_class) -> dict:
        if not isinstance(mlp_class, type) or not issubclass(mlp_class, nn.Module):
            raise CheckFailed(f"expected the class MLP (an nn.Module), got {describe(mlp_class)}")
        runs = []
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
            expected_shapes = {k: list(v) for k, v in _mlp_shapes(C, H).items()}
            if run["params"] == expected_shapes:
                mlp = mlp.to(dtype)
                with torch.no_grad():
                    for name, param in mlp.named_parameters():
                        param.copy_(weights[name])
                    before = x.clone()
                    run.update(_attempt(mlp, x))
                    run["x_changed"] = not torch.equal(before, x)
            runs.append(run)
        return {"runs": runs}

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
        "there is a ReLU after the last layer too: the output can never be negative; the MLP ends with "
        "the second linear layer": torch.relu(out),
        "forward adds the input (a residual connection, x + mlp(x)); the MLP returns only its own output "
        "(the residual comes later, in the Transformer block)": x + out,
        "the activation is missing: two linear layers in a row are just one linear map": lin("model.2", pre),
        "forward returns the input unchanged": x,
    }


def _judge_mlp(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, _runs(data, len(cases)), strict=True):
            seed, C, H, batch, T, dtype = case
            weights, x = _mlp_inputs(*case)
            what = f"MLP(emb_dim={C}, n_hidden={H})"
            expected_shapes = {k: list(v) for k, v in _mlp_shapes(C, H).items()}
            params = run.get("params")
            if not isinstance(params, dict):
                raise CheckFailed("the check's data is incomplete")
            layers = run.get("layers") or []
            if params != expected_shapes:
                names = ", ".join(f"{k} {tuple(v)}" for k, v in params.items()) or "none"
                want = ", ".join(f"{k} {tuple(v)}" for k, v in expected_shapes.items())
                if not run.get("sequential"):
                    problem = (
                        "store the layers in self.model = nn.Sequential(...): the parameter names are part "
                        "of the interface"
                    )
                elif layers == ["Linear", "Linear"]:
                    problem = "the ReLU between the two linear layers is missing (so the second layer is model.1)"
                elif params.get("model.0.weight") == [C, H] and params.get("model.2.weight") == [H, C]:
                    problem = (
                        f"the layer sizes are swapped: the first layer goes from emb_dim={C} into "
                        f"n_hidden={H}, nn.Linear({C}, {H}), and the second comes back, nn.Linear({H}, {C})"
                    )
                elif "model.0.weight" in params and "model.0.bias" not in params:
                    problem = "the linear layers have no bias; keep nn.Linear's default bias=True"
                elif params.get("model.0.weight") == [C, C] or params.get("model.2.weight") == [C, C]:
                    problem = f"the hidden layer has emb_dim={C} units instead of n_hidden={H}"
                elif layers and layers[0] != "Linear":
                    problem = f"the Sequential should start with the linear layer; it holds {layers}"
                else:
                    problem = f"the layers are {layers or 'not an nn.Sequential'}"
                raise CheckFailed(f"{what}: {problem}. Parameters: {names}; expected {want}.")
            if run.get("count") != C * H + H + H * C + C:
                raise CheckFailed(f"{what}: num_parameters = {run.get('count')}, expected {C * H + H + H * C + C}.")
            _raised(f"{what} on x of shape {tuple(x.shape)}", run)
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} changed its input x in place; a layer must leave x alone.")
            what = f"{what} on x of shape {tuple(x.shape)}"
            out = expect_tensor(run.get("out"), tuple(x.shape), what)
            mlp = ref.MLP(C, H).double()
            with torch.no_grad():
                for name, param in mlp.named_parameters():
                    param.copy_(weights[name].double())
                expected = mlp(x.double())
            tol = 1e-9 if dtype == torch.float64 else 1e-4
            if close(expected, out, tol, tol):
                continue
            w64 = {k: v.double() for k, v in weights.items()}
            label = identify(out, mlp_variants(w64, x.double()), tol, tol)
            evidence = first_mismatch(expected, out, tol, tol)
            if label:
                raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            raise CheckFailed(f"{what} differs from the reference. Evidence: {evidence}.")
        shapes = ", ".join(f"MLP({c[1]}, {c[2]}) on {(*c[3], c[4], c[1])}" for c in cases)
        counts = ", ".join(str(c[1] * c[2] * 2 + c[1] + c[2]) for c in cases)
        return f"MLP: {shapes}: parameter names, shapes and counts ({counts}) and outputs match the reference."

    return judge


check_mlp = Check("check_mlp", _probe_mlp(MLP_CASES), _judge_mlp(MLP_CASES))
check_mlp_hidden = Check("check_mlp_hidden", _probe_mlp(MLP_HIDDEN_CASES), _judge_mlp(MLP_HIDDEN_CASES), hidden=True)
