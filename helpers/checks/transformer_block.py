"""Checks for lesson 05 (the transformer layer), second exercise: the pre-LN TransformerBlock.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), hs head size (head_dim),
nh heads (n_heads), H the MLP's hidden size (n_hidden). Every input is chosen so that no two of
its dimensions are equal. The classic mistakes, as what each would compute, are in
``transformer_layer_mistakes``.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import nn

from helpers.checks.core import (
    CheckFailed,
    close,
    expect_default_dtype,
    expect_module_class,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import _gloss, case_sizes, trace, unused_outputs
from helpers.checks.transformer_layer_mistakes import DEFAULT_EPS, block_variants
from helpers.checks.verdict import (
    first_leak,
    gradients,
    judge_output,
    names_told,
    tolerance,
    unregistered,
)
from helpers.reference import transformer_layer as ref

# Check.__call__ and Check.record run every probe and judge inside torch.random.fork_rng: building
# modules here draws random numbers without moving the notebook's.


# ---------------------------------------------------------------------------------------------
# TransformerBlock(emb_dim, head_dim, n_heads, n_hidden): pre-LN, x (B, T, C) -> (B, T, C)

# (seed, batch shape, T, C, hs, nh, n_hidden, dtype)
BLOCK_CASES = [(40, (2,), 5, 6, 3, 4, 7, torch.float64)]
BLOCK_HIDDEN_CASES = [
    (41, (), 7, 5, 4, 2, 9, torch.float64),
    (42, (4,), 6, 10, 3, 2, 13, torch.float32),
]
NORMS = ("norm_before_attn", "norm_before_mlp")


def block_parameter_shapes(C: int, hs: int, nh: int, n_hidden: int) -> dict[str, tuple[int, ...]]:
    """The parameters of TransformerBlock(C, hs, nh, n_hidden), by name: part of the interface."""
    return {
        "norm_before_attn.weight": (C,),
        "norm_before_attn.bias": (C,),
        "attention.query.weight": (nh * hs, C),
        "attention.key.weight": (nh * hs, C),
        "attention.value.weight": (nh * hs, C),
        "attention.to_output.weight": (C, nh * hs),
        "norm_before_mlp.weight": (C,),
        "norm_before_mlp.bias": (C,),
        "mlp.model.0.weight": (n_hidden, C),
        "mlp.model.0.bias": (n_hidden,),
        "mlp.model.2.weight": (C, n_hidden),
        "mlp.model.2.bias": (C,),
    }


def _block_inputs(seed, batch, T, C, hs, nh, n_hidden, dtype):
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in block_parameter_shapes(C, hs, nh, n_hidden).items():
        noise = torch.randn(*shape, generator=g, dtype=torch.float64)
        if name.startswith("norm") and name.endswith(".weight"):
            weights[name] = 1 + 0.3 * noise  # two different norms: a shared norm shows
        elif len(shape) == 1:
            weights[name] = 0.3 * noise
        else:
            weights[name] = noise / math.sqrt(shape[1])
    x = 2 * torch.randn(*batch, T, C, generator=g, dtype=torch.float64) + 0.5
    replacement = torch.randn(*batch, T, C, generator=g, dtype=torch.float64)
    return {k: v.to(dtype) for k, v in weights.items()}, x.to(dtype), replacement.to(dtype)


def _block_sizes(batch, T, C, hs, nh, n_hidden) -> dict[str, int]:
    """The case's sizes by legend letter (no two equal: a size names its dimension)."""
    return {**({"B": batch[0]} if len(batch) == 1 else {}), "T": T, "C": C, "hs": hs, "nh": nh, "H": n_hidden}


def _probe_block(cases):
    def probe(block_class) -> dict:
        expect_module_class(block_class, "TransformerBlock")
        runs = []
        for seed, batch, T, C, hs, nh, n_hidden, dtype in cases:
            with case_sizes(_block_sizes(batch, T, C, hs, nh, n_hidden)):
                runs.append(_run_block_case(block_class, seed, batch, T, C, hs, nh, n_hidden, dtype))
        return {"runs": runs}

    return probe


def _run_block_case(block_class, seed, batch, T, C, hs, nh, n_hidden, dtype) -> dict:
    weights, x, replacement = _block_inputs(seed, batch, T, C, hs, nh, n_hidden, dtype)
    block = block_class(C, hs, nh, n_hidden)
    expect_default_dtype(block, f"TransformerBlock({C}, {hs}, {nh}, {n_hidden})")
    # Known-good norms in place of the student's LayerNorm (same names, same arithmetic), before
    # anything is checked, so that a mistake in the LayerNorm exercise (its parameters included)
    # does not cost this exercise's points.
    for attr in NORMS:
        if isinstance(getattr(block, attr, None), nn.Module):
            setattr(block, attr, nn.LayerNorm(C, eps=DEFAULT_EPS))
    names = sorted(name for name, _ in block.named_parameters())
    if names != sorted(weights):
        raise CheckFailed(
            f"{block_class.__name__}({C}, {hs}, {nh}, {n_hidden}): its parameters are not the expected ones: "
            f"{names_told(list(weights), names)}.{unregistered(block)} It should have exactly {', '.join(weights)} "
            f"(keep the constructor as given); it has {', '.join(names) or 'none'}."
        )
    block = block.to(dtype)
    with torch.no_grad():
        for name, param in block.named_parameters():
            param.copy_(weights[name])
        x_before = x.clone()
        out = block(x)
        x_changed = not torch.equal(x_before, x)
        again = block(x_before.clone())  # the same input once more: deterministic?
        # each batch element alone (a batch of one): does the block mix the batch?
        alone = [block(x_before[b : b + 1].clone()) for b in range(batch[0])] if len(batch) == 1 else None
        leaks = []
        for j in range(1, T):
            changed = x_before.clone()
            changed[..., j, :] = replacement[..., j, :]
            leaks.append(block(changed))
    # what each sub-layer received and returned, for the judge to find where the block goes wrong
    steps = trace(block, x_before.clone(), with_inputs=True)
    return {"out": out, "x_changed": x_changed, "leaks": leaks, "again": again, "alone": alone, "steps": steps,
            "calls": calls(block, x_before.clone()), "ignored": unused_outputs(block, x_before.clone()),
            "grads": gradients(block, x_before)}


def calls(module: nn.Module, *inputs, most: int = 3) -> dict:
    """Probe side: run ``module(*inputs)`` without gradients and return, for each direct child,
    how often it was called and the tensors its first ``most`` calls returned (``trace`` keeps
    only each submodule's first call; a sub-layer called twice is a mistake of its own)."""
    counts = {name: 0 for name, _ in module.named_children()}
    outputs: dict[str, list] = {name: [] for name in counts}

    def hook_for(name):
        def hook(_module, _args, output):
            counts[name] += 1
            if isinstance(output, torch.Tensor) and len(outputs[name]) < most:
                outputs[name].append(output.detach().clone())
        return hook

    handles = [child.register_forward_hook(hook_for(name)) for name, child in module.named_children()]
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return {"counts": counts, "outputs": outputs}


def calls_note(recorded, out: torch.Tensor, x: torch.Tensor, tol: float, once: bool = True) -> str:
    """Judge side: what ``calls`` recorded says about a wrong output, in words: the sub-layers
    called more than once (when the reference calls each ``once``), and which recorded value
    (or the input ``x``) the output is exactly; "" when it says nothing."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("counts"), dict):
        return ""

    def label(name):
        return f"{name} ({_gloss(name)})" if _gloss(name) else name

    notes = []
    twice = [f"{label(n)} {k} times" for n, k in recorded["counts"].items() if isinstance(k, int) and k > 1]
    if once and twice:
        notes.append(f"Your forward calls {', '.join(twice)}; the reference calls each sub-layer once.")
    same = [
        f"the output of call {i + 1} of {label(name)}"
        for name, outs in (recorded.get("outputs") or {}).items() if isinstance(outs, list)
        for i, value in enumerate(outs)
        if isinstance(value, torch.Tensor) and value.shape == out.shape and close(value, out, tol, tol)
    ]
    if close(x, out, tol, tol):
        same.insert(0, "its own input x, unchanged")
    if same:
        notes.append(f"It returns exactly {same[0]}.")
    return " ".join(notes)


def _judge_block(cases):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        for (seed, batch, T, C, hs, nh, n_hidden, dtype), run in zip(cases, found, strict=True):
            weights, x, replacement = _block_inputs(seed, batch, T, C, hs, nh, n_hidden, dtype)
            shape = (*batch, T, C)
            what = (
                f"TransformerBlock(emb_dim={C}, head_dim={hs}, n_heads={nh}, n_hidden={n_hidden}) "
                f"on x of shape {shape} ({str(dtype).replace('torch.', '')})"
            )
            if run.get("x_changed") is not False:
                raise CheckFailed(
                    f"{what} modified its input x in place: `x += ...` writes into the caller's tensor "
                    "(in a model, the embeddings), and so does += on a view of x (x[:], x.view(...), a slice: "
                    "views share x's memory; x.clone() copies). Write x = x + ... instead."
                )
            tol = tolerance(dtype)
            with torch.no_grad():
                block = ref.TransformerBlock(C, hs, nh, n_hidden).double()
                for name, param in block.named_parameters():
                    param.copy_(weights[name].double())
                xd = x.double()
                expected = block(xd)
            diagnosis = {
                "what": what, "atol": tol, "rtol": tol, "axes": (*("B" * len(batch)), "T", "C"),
                "sizes": _block_sizes(batch, T, C, hs, nh, n_hidden), "again": run.get("again"),
                "alone": run.get("alone"), "dtype": dtype,
            }
            out = run.get("out")
            judge_output(run, expected, diagnosis, variants=partial(block_variants, block, xd), reference=block,
                         inputs=(xd,), known={"the block's input x": xd}, noun="the block", part="sub-layer",
                         leak=partial(first_leak, out, run.get("leaks"), tol, what),
                         leak_means=". A block must stay causal: only the attention mixes positions, and only with the past.",
                         note=partial(calls_note, run.get("calls"), out, xd, tol))
        shapes = ", ".join(f"x{(*c[1], c[2], c[3])}" for c in cases)
        return (
            f"TransformerBlock: {shapes} with known weights match the reference pre-LN block "
            "x + attention(norm(x)), then + mlp(norm(...)); the input is untouched and no output "
            "moves when a later token changes."
        )

    return judge


check_transformer_block, check_transformer_block_hidden = visible_and_hidden(
    "check_transformer_block", _probe_block, _judge_block, BLOCK_CASES, BLOCK_HIDDEN_CASES
)
