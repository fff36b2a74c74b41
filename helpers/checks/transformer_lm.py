"""Checks for lesson 06 (the TransformerLM), second exercise: the model's forward pass.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), V vocabulary size (n_vocab),
L layers (n_layers). Every input is chosen so that no two of its dimensions are equal.

The errors of the student's code are data here, and the classic mistakes are recognised by their
behaviour over all inputs (``transformer_lm_mistakes``). The reference is imported inside the
judges only.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass

import torch

from helpers.checks.core import (
    CheckFailed,
    expect_default_dtype,
    expect_module_class,
    first_mismatch,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import case_sizes, diagnose, precision_lost, trace, unused_outputs
from helpers.checks.errors import caught, outcome, raise_caught, same_behaviour
from helpers.checks.transformer_lm_mistakes import lm_variants
from helpers.checks.verdict import (
    WEAK,
    first_leak,
    gradients,
    inside,
    judge_gradients,
    names_told,
    tolerance,
    unregistered,
)
from helpers.reference import transformer_lm as ref

# Check.__call__ and Check.record run every probe and judge inside torch.random.fork_rng: building
# modules here draws random numbers without moving the notebook's.


# ---------------------------------------------------------------------------------------------
# TransformerLM(config).forward: input_ids (B, T) or (T,) -> logits (B, T, V) or (T, V)


@dataclass
class ProbeConfig:
    """The fields of lesson 06's Config, so that a probe can build a model without the reference."""

    n_vocab: int = 256
    max_len: int = 50
    emb_dim: int = 5
    n_hidden: int = 16
    head_dim: int = 256
    n_heads: int = 2
    n_layers: int = 1
    tie_weights: bool = True
    bare_bones: bool = False
    final_norm: bool = True
    attn_bias: bool = False  # lesson 10's GPT-2 options: the checks here keep the defaults
    activation: str = "relu"
    dropout: float = 0.0


# (seed, Config fields, dtype, B, T)
LM_CASES = [
    (60, dict(n_vocab=13, max_len=9, emb_dim=6, n_hidden=10, head_dim=4, n_heads=3, n_layers=2), torch.float64, 3, 7),
    (61, dict(n_vocab=11, max_len=8, emb_dim=5, n_hidden=7, head_dim=3, n_heads=3, tie_weights=False), torch.float64, 2, 6),
]
LM_HIDDEN_CASES = [
    (
        62,
        dict(n_vocab=17, max_len=12, emb_dim=5, n_hidden=16, head_dim=8, n_heads=2, bare_bones=True, final_norm=False),
        torch.float32,
        2,
        10,
    ),
    (63, dict(n_vocab=19, max_len=14, emb_dim=7, n_hidden=12, head_dim=5, n_heads=2, n_layers=3, tie_weights=False), torch.float64, 4, 11),
]


def _config_text(fields: dict) -> str:
    return "Config(" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")"


def _lm_weights(seed: int, shapes: list[tuple[str, list[int]]]) -> dict[str, torch.Tensor]:
    """Known weights for parameters given as (name, shape), in sorted name order."""
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in sorted(shapes):
        noise = torch.randn(*shape, generator=g, dtype=torch.float64)
        if "norm" in name and name.endswith(".weight"):
            weights[name] = 1 + 0.3 * noise
        elif "to_embedding" in name:
            weights[name] = 0.5 * noise
        elif len(shape) == 1:
            weights[name] = 0.3 * noise
        else:
            weights[name] = noise / math.sqrt(shape[1])
    return weights


def _lm_ids(seed: int, V: int, B: int, T: int, max_len: int):
    g = torch.Generator().manual_seed(seed + 1000)
    ids = torch.randint(V, (B, T), generator=g)  # (B, T)
    full = torch.randint(V, (B, max_len), generator=g)  # (B, max_len)
    long = torch.randint(V, (B, max_len + 1), generator=g)  # (B, max_len + 1)
    replacement = torch.randint(V, (B, T), generator=g)  # (B, T)
    return ids, full, long, replacement


def _probe_lm(cases):
    def probe(model_class) -> dict:
        expect_module_class(model_class, "TransformerLM")
        runs = []
        for seed, fields, dtype, B, T in cases:
            config = ProbeConfig(**fields)
            model = model_class(config)
            expect_default_dtype(model, "TransformerLM(config)")
            shapes = [(name, list(p.shape)) for name, p in model.named_parameters()]
            weights = _lm_weights(seed, shapes)
            model = model.to(dtype)
            with torch.no_grad():
                for name, param in model.named_parameters():
                    param.copy_(weights[name])
            model.eval()
            ids, full, long, replacement = _lm_ids(seed, config.n_vocab, B, T, config.max_len)
            run: dict = {"shapes": shapes, "unregistered": unregistered(model)}
            sizes = _lm_sizes(config, B, T)

            def call(inputs, model=model, sizes=sizes):
                here = {**sizes, "T": inputs.shape[-1]} if inputs.dim() == 2 else {"T": inputs.shape[-1], "V": sizes["V"]}
                try:
                    with torch.no_grad(), case_sizes(here):
                        return model(inputs)
                except Exception as exc:  # noqa: BLE001 - errors are evidence here
                    return caught(exc, here)

            for key, inputs in (("out", ids), ("single", ids[0]), ("full", full), ("long", long)):
                run[key] = call(inputs)
            run["again"] = call(ids)  # the same input once more: deterministic?
            run["alone"] = [call(ids[b : b + 1]) for b in range(B)]  # each sequence as a batch of one
            leaks = []
            for j in range(1, T):
                changed = ids.clone()
                changed[:, j] = replacement[:, j]
                leaks.append(call(changed))
            run["leaks"] = leaks
            if isinstance(run["out"], torch.Tensor):  # what each submodule received and returned
                run["steps"] = trace(model, ids, with_inputs=True)
                run["ignored"] = unused_outputs(model, ids, depth=2)  # the model's own parts, not the blocks' insides
                run["grads"] = gradients(model, ids)
            run["no_layers"] = _no_layers_in_training(model_class, fields, dtype, ids)
            params = {name for name, _ in model.named_parameters(remove_duplicate=False)}
            run["saved"] = sorted(set(model.state_dict()) - params)  # buffers in checkpoints (after the calls)
            runs.append(run)
        return {"runs": runs}

    return probe


def _no_layers_in_training(model_class, fields: dict, dtype, ids) -> str | None:
    """The model with no layers and dropout 0.5: "same" when its output in training mode is its output
    in evaluation mode (dropout acts on the sub-layers' outputs only, and there are none), "differs"
    when not; None when it cannot be built or run (the other checks say why)."""
    try:
        bare = model_class(ProbeConfig(**{**fields, "n_layers": 0, "dropout": 0.5})).to(dtype)
        with torch.no_grad():
            measured = bare.eval()(ids)
            torch.manual_seed(3)
            trained = bare.train()(ids)
    except Exception:  # noqa: BLE001 - a model of no layers the student's code cannot build: not this rule's
        return None
    if not isinstance(measured, torch.Tensor) or not isinstance(trained, torch.Tensor):
        return None
    return "same" if measured.shape == trained.shape and torch.equal(measured, trained) else "differs"


def _lm_sizes(config, B: int, T: int) -> dict[str, int]:
    """The case's sizes by legend letter."""
    return {"B": B, "T": T, "C": config.emb_dim, "V": config.n_vocab, "nh": config.n_heads,
            "hs": config.head_dim, "H": config.n_hidden}


def _lm_mismatch(model, ids, expected, got, run, here, tol, key, cfg, dtype) -> str:
    """The message for logits that no catalogued mistake explains: what the logits establish, and
    for the batch, the first submodule whose input or output departs from the reference's."""
    B, T = (1, *ids.shape) if ids.dim() == 1 else ids.shape
    diagnosis = {"what": here, "atol": tol, "rtol": tol, "sizes": _lm_sizes(cfg, B, T), "dtype": dtype,
                 "axes": ("T", "V") if ids.dim() == 1 else ("B", "T", "V")}
    if key == "out":
        diagnosis.update(again=run.get("again"), alone=run.get("alone"))
    rule, message = diagnose(expected, got, **diagnosis)
    steps = run.get("steps")
    if rule not in WEAK or key != "out" or not isinstance(steps, dict):
        return message
    lost = precision_lost(expected, got, here, dtype, tol, lambda: copy.deepcopy(model).float()(ids))
    if lost:
        return lost
    with torch.no_grad():
        tokens = model.word_to_embedding(ids)  # (B, T, C)
        known = {"the token embeddings": tokens,
                 "the position embeddings": model.pos_to_embedding(torch.arange(T)).expand_as(tokens)}
    found = inside(run, expected, got, model, (ids,), tol, known=known)
    return f"{message.partition(' Evidence: ')[0].rstrip('.')}. Inside the model, {found}"


def _judge_lm(cases):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        for (seed, fields, dtype, B, T), run in zip(cases, found, strict=True):
            cfg = ref.Config(**fields)
            what = f"TransformerLM({_config_text(fields)})"
            with torch.no_grad():
                model = ref.TransformerLM(cfg)
                shapes = [(name, list(p.shape)) for name, p in model.named_parameters()]
                got_shapes = [tuple(s) if isinstance(s, list) else s for s in run.get("shapes", [])]
                if sorted(map(tuple, got_shapes)) != sorted(shapes):
                    want = ", ".join(f"{n} {tuple(s)}" for n, s in shapes)
                    have = ", ".join(f"{n} {tuple(s)}" for n, s in got_shapes)
                    names = [n for n, _ in got_shapes if isinstance(n, str)]
                    told = names_told([n for n, _ in shapes], names)
                    switch = next((f" This config has {field}={value}: the given constructor builds {field} only when "
                                   f"config.{field} is true." for field, value in fields.items()
                                   if value is False and any(n.startswith(f"{field}.") for n in names)
                                   and not any(n.startswith(f"{field}.") for n, _ in shapes)), "")
                    raise CheckFailed(
                        f"{what}: its parameters are not the given constructor's: {told or 'other shapes'}.{switch}"
                        f"{str(run.get('unregistered') or '')[:600]} Expected (keep the constructor as given): {want}; "
                        f"it has {have}."
                    )
                saved = run.get("saved")
                if isinstance(saved, list) and saved:
                    raise CheckFailed(
                        f"{what} saves {', '.join(map(str, saved[:4]))} in its state_dict besides the parameters: a buffer "
                        "registered with register_buffer(...) is part of every checkpoint, so the course's checkpoints "
                        "(and GPT-2's weights) no longer load (load_state_dict: missing key). Make it in forward, or "
                        "register it with persistent=False."
                    )
                weights = _lm_weights(seed, shapes)
                model = model.double()
                for name, param in model.named_parameters():
                    param.copy_(weights[name])
                model.eval()
                ids, full, long, replacement = _lm_ids(seed, cfg.n_vocab, B, T, cfg.max_len)
                inputs = {"out": ids, "single": ids[0], "full": full}
                expected = {key: model(value) for key, value in inputs.items()}
                tol = tolerance(dtype)
                described = {
                    "out": f"input_ids of shape ({B}, {T})",
                    "single": f"a single sequence of shape ({T},)",
                    "full": f"input_ids of shape ({B}, {cfg.max_len}), T = max_len",
                }
                bad = [key for key in inputs if not same_behaviour(run.get(key), expected[key], tol)]
                if bad:
                    key = bad[0]
                    got, wanted = run.get(key), expected[key]
                    here = f"{what} on {described[key]}"
                    if isinstance(got, torch.Tensor) and got.shape == wanted.shape:
                        evidence = first_mismatch(wanted, got, tol, tol)
                    else:
                        evidence = f"it {outcome(got)}; expected logits of shape {tuple(wanted.shape)}"
                    for label, outcomes in lm_variants(model, inputs).items():
                        if all(same_behaviour(run.get(k), outcomes[k], tol) for k in inputs):
                            raise CheckFailed(f"{here}: {label}. Evidence: {evidence}.")
                    if key == "full" and isinstance(got, dict) and got.get("kind") == "ValueError":
                        raise CheckFailed(
                            f"{here} raised {got['error']}, but T = max_len = {cfg.max_len} fits: the "
                            "positions run 0 ... max_len-1. Raise only when T > max_len (not >=)."
                        )
                    raise_caught(here, got)
                    raise CheckFailed(_lm_mismatch(model, inputs[key], wanted, got, run, here, tol, key, cfg, dtype))
                judge_gradients(run.get("grads"), model, ids, f"{what} on {described['out']}", dtype)
            long = run.get("long")
            L = cfg.max_len + 1
            here = f"{what} on input_ids of shape ({B}, {L}), longer than max_len = {cfg.max_len}"
            if not isinstance(long, dict) or "error" not in long:
                raise CheckFailed(f"{here} {outcome(long)}; it must raise a ValueError naming both lengths.")
            if long.get("kind") != "ValueError":
                missed = "index out of range" in long["error"]  # the position lookup itself failed
                raise CheckFailed(
                    f"{here}: " + (f"no length check stopped it before the embedding lookups, so the lookup failed "
                                   f"(is the check missing, does it compare two other numbers than T = input_ids.shape[-1] "
                                   f"= {L} and config.max_len = {cfg.max_len} (the batch size, n_vocab?), or does it come "
                                   "after the lookups?); " if missed else "")
                    + f"check the length yourself before the lookup and raise a ValueError that names both lengths "
                    f"({L} and {cfg.max_len}), so the user knows what went wrong. What it raised instead: {long['error']}"
                )
            message = long["error"].split(":", 1)[-1]
            numbers = {int(n) for n in re.findall(r"\d+", message)}
            if L not in numbers or cfg.max_len not in numbers:
                raise CheckFailed(
                    f"{here} raised a ValueError, good, but its message should name both lengths, "
                    f"{L} and {cfg.max_len}; it says: {message.strip()!r}."
                )
            leak = first_leak(run["out"], run.get("leaks"), tol, what, noun="the logits")
            if leak:
                raise CheckFailed(f"{what}: {leak}: the model must not see the future.")
            if run.get("no_layers") == "differs":
                raise CheckFailed(
                    f"TransformerLM({_config_text({**fields, 'n_layers': 0, 'dropout': 0.5})}): the same "
                    "model with no layers gives other logits in training mode than in evaluation mode, so something "
                    "outside the blocks is random in training: dropout acts on each sub-layer's output only (inside "
                    "the blocks), and with no blocks nothing is dropped. Is dropout applied to the embeddings, or "
                    "before the final norm or the head?")
        configs = "; ".join(f"{_config_text(c[1])} on ({c[3]}, {c[4]})" for c in cases)
        return (
            f"TransformerLM.forward: {configs}: logits match the reference, batched and unbatched, "
            "up to T = max_len; a longer input raises a ValueError naming both lengths; no logit "
            "moves when a later token changes."
        )

    return judge


check_transformer_lm, check_transformer_lm_hidden = visible_and_hidden(
    "check_transformer_lm", _probe_lm, _judge_lm, LM_CASES, LM_HIDDEN_CASES
)
