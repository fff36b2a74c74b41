"""Checks for lesson 07 (training): measuring a model, ``estimate_loss(model, splits, n_batches,
batch_size, block_size, seed)``, on the engine of ``helpers.checks.functions``.

The probe builds lesson 06's ``TransformerLM`` (with dropout, so that the mode matters) with known
float64 weights, hands it over in training or in evaluation mode, and calls the student's function
with a known-good ``get_batch`` in place of the notebook's (a mistake in exercise 1 costs exercise 1
only). A hook on the model records, for every forward pass, its mode and whether gradients were
being recorded; the probe also records the mode of every layer afterwards. The judge settles those
first (each is what the probe saw, never a guess), then compares the returned numbers with the
reference's and names an averaging mistake only when it gives the student's numbers in every case.

Shape legend: B batch, T sequence length, V vocabulary size, C embedding size. No two are equal.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from helpers.checks.core import CheckFailed
from helpers.checks.cross_entropy import memory_order_variants
from helpers.checks.functions import Compare, Spec, function_checks
from helpers.checks.invariants import dict_changed, rng_watch, tensors_kept
from helpers.reference import training_step as ref
from helpers.reference import transformer_lm

TOL = 1e-6  # the losses kept in float32 on the way (as nanoGPT does) agree to this; every mistake is far off
DEFAULT_SEED = 1234  # estimate_loss's default seed


@dataclass(frozen=True)
class Case:
    seed: int  # draws the weights and the texts
    lengths: tuple[tuple[str, int], ...]  # the splits: (name, number of ids)
    n_batches: int
    B: int
    T: int
    V: int
    C: int
    training: bool  # the mode the model is handed over in
    eval_seed: int | None = None  # passed as seed=...; None: the default is used

    @property
    def splits(self) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(500 + self.seed)
        return {name: torch.randint(self.V, (n,), generator=g) for name, n in self.lengths}


CASES = [
    Case(1, (("train", 40), ("val", 29)), n_batches=3, B=2, T=5, V=7, C=8, training=True),
    Case(2, (("val", 23),), n_batches=4, B=3, T=6, V=9, C=4, training=False, eval_seed=7),
]
HIDDEN_CASES = [
    Case(3, (("train", 31), ("val", 19), ("test", 26)), n_batches=2, B=4, T=3, V=6, C=8, training=False, eval_seed=11),
    Case(4, (("val", 37),), n_batches=5, B=1, T=7, V=5, C=4, training=True),
    Case(5, (("train", 17), ("val", 21)), n_batches=1, B=2, T=4, V=8, C=4, training=True, eval_seed=3),
]


def model_for(case: Case) -> torch.nn.Module:
    """Lesson 06's model with known float64 weights, dropout 0.3, in the case's mode."""
    config = transformer_lm.Config(n_vocab=case.V, max_len=case.T + 1, emb_dim=case.C, n_hidden=3 * case.C, head_dim=case.C // 2,
                    n_heads=2, n_layers=1, dropout=0.3)
    model = transformer_lm.TransformerLM(config).double()
    g = torch.Generator().manual_seed(900 + case.seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(0.7 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return model.train(case.training)


def known_get_batch(ids, batch_size, block_size, generator=None):
    """Exercise 1's answer, known good: the same random numbers as the reference's get_batch."""
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)  # (B,)
    positions = starts[:, None] + torch.arange(block_size)  # (B, T)
    return ids[positions], ids[positions + 1]


@contextlib.contextmanager
def _known_get_batch(function):
    """While active, get_batch means the known-good one to ``function`` (put back afterwards)."""
    scope, missing = getattr(function, "__globals__", None), object()
    saved = scope.get("get_batch", missing) if isinstance(scope, dict) else missing
    if isinstance(scope, dict):
        scope["get_batch"] = known_get_batch
    try:
        yield
    finally:
        if isinstance(scope, dict):
            scope.pop("get_batch", None) if saved is missing else scope.__setitem__("get_batch", saved)


def _plain(value):
    """A returned value as data: a float as it is, a tensor as a tensor, anything else in words."""
    if isinstance(value, float) or isinstance(value, torch.Tensor):
        return value.detach() if isinstance(value, torch.Tensor) else value
    return {"kind": type(value).__name__, "text": repr(value)[:120]}


def _call(function, case: Case) -> dict:
    model = model_for(case)
    seen: list[list[bool]] = []
    model.register_forward_pre_hook(lambda module, args: seen.append([module.training, torch.is_grad_enabled()]))
    kwargs = {} if case.eval_seed is None else {"seed": case.eval_seed}
    splits = case.splits
    given = tensors_kept(splits)  # the caller's dict, kept to compare
    with rng_watch() as rng:  # nothing here draws: PyTorch's global generator must stay where it was
        out = function(model, splits, case.n_batches, case.B, case.T, **kwargs)
    changed = dict_changed(splits, given)
    plain = {str(k): _plain(v) for k, v in out.items()} if isinstance(out, dict) else {"__not_a_dict__": _plain(out)}
    again = function(model_for(case), case.splits, case.n_batches, case.B, case.T, **kwargs)  # the same call again
    same = isinstance(out, dict) and isinstance(again, dict) and out.keys() == again.keys() and all(
        isinstance(out[k], float) and out[k] == again[k] for k in out)
    return {"out": plain, "forwards": seen, "modes_after": [m.training for m in model.modules()],
            "grads": [n for n, p in model.named_parameters() if p.grad is not None], "same_again": same, "rng": rng,
            "splits_changed": changed, "returned_splits": out is splits}


def _read(out):
    if not isinstance(out, dict):
        return out
    return {k: torch.tensor(v, dtype=torch.float64) if isinstance(v, float) else v for k, v in out.items()}


def _estimate(case: Case, *, seeding="split", average="mean", reduction="mean", seed=None,
              regrouped: str | None = None) -> dict[str, torch.Tensor]:
    """The case's estimate as written, or put together the way a classic mistake puts it.
    seeding: "split" (a new generator per split), "once" (one for all splits), "batch" (re-seeded
    before every batch); average: "mean", "sum", "last" or "by_B" (divided by batch_size);
    regrouped: the words of one of ``memory_order_variants`` (the logits regrouped in memory order)."""
    model = model_for(case).eval()
    seed = (DEFAULT_SEED if case.eval_seed is None else case.eval_seed) if seed is None else seed
    out, generator = {}, torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, ids in case.splits.items():
            if seeding == "split":
                generator = torch.Generator().manual_seed(seed)
            losses = []
            for _ in range(case.n_batches):
                if seeding == "batch":
                    generator = torch.Generator().manual_seed(seed)
                x, y = known_get_batch(ids, case.B, case.T, generator=generator)  # (B, T) each
                logits = model(x)  # (B, T, V)
                losses.append(memory_order_variants(logits, y)[regrouped].item() if regrouped else
                              F.cross_entropy(logits.reshape(-1, case.V), y.reshape(-1), reduction=reduction).item())
            value = {"mean": sum(losses) / len(losses), "sum": sum(losses), "last": losses[-1] / len(losses),
                     "by_B": sum(losses) / case.B}[average]
            out[name] = torch.tensor(value, dtype=torch.float64)
    return out


def _expected(case: Case) -> dict[str, torch.Tensor]:
    model = model_for(case)
    kwargs = {} if case.eval_seed is None else {"seed": case.eval_seed}
    found = ref.estimate_loss(model, case.splits, case.n_batches, case.B, case.T, **kwargs)
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in found.items()}


def _variants(case: Case) -> dict[str, dict]:
    return {
        "you summed the batch losses: the estimate is their mean, so divide the total by n_batches":
            _estimate(case, average="sum"),
        "only the last batch counts: the loss of each batch replaced the total instead of adding to it "
        "(total += ..., then divide by n_batches)": _estimate(case, average="last"),
        "you divided the total by batch_size instead of n_batches: each batch's loss is already a mean over its "
        "B * T positions, so average over the batches": _estimate(case, average="by_B"),
        "you summed the cross-entropy over the positions of each batch (reduction='sum'): each batch's loss "
        "is the mean over its B * T positions": _estimate(case, reduction="sum"),
        "one generator served every split: make a new generator seeded with seed for each split, so that "
        "every split's batches are the same whichever splits come before it": _estimate(case, seeding="once"),
        "you seeded the generator again before every batch, so all the batches are the same windows: "
        "seed one generator per split and let it run": _estimate(case, seeding="batch"),
        f"you ignored the seed argument (your batches are those of seed {DEFAULT_SEED}): seed the generator with seed":
            _estimate(case, seed=DEFAULT_SEED),
        "every estimate is divided by ln 2 (bits per character, 1.443 × the loss): the estimate is the mean "
        "cross-entropy in nats, as train_step's loss, so that the two can be compared":
            {k: v / math.log(2) for k, v in _estimate(case).items()},
        **{words: _estimate(case, regrouped=words)
           for words in memory_order_variants(torch.zeros(1, case.T, case.V), torch.zeros(1, case.T, dtype=torch.long))},
    }


def _arguments(case: Case) -> str:
    splits = ", ".join(f"{name} ({n} ids)" for name, n in case.lengths)
    seed = "" if case.eval_seed is None else f", seed={case.eval_seed}"
    mode = "training" if case.training else "evaluation"
    return f"a model with dropout in {mode} mode, splits {splits}, n_batches={case.n_batches}, B={case.B}, T={case.T}{seed}"


def _form(what: str, case: Case, got, run: dict) -> str | None:
    forwards, after = run.get("forwards"), run.get("modes_after")
    if not isinstance(forwards, list) or not isinstance(after, list) or not isinstance(run.get("grads"), list):
        raise CheckFailed("the check's data is incomplete")
    if not forwards:
        return f"{what} never called the model: every batch's loss comes from model(x)."
    modes = [f[0] if isinstance(f, list) and f else None for f in forwards]
    n = case.n_batches
    if len(modes) > n and not any(modes[:n]) and all(m is True for m in modes[n:]):
        return (f"{what}: the first split's {n} forward passes ran in evaluation mode and every later one in training "
                "mode: after the first split the model was back in training mode. Is the mode put back inside the "
                "loop over the splits, instead of once after it?")
    if any(f[0] is True for f in forwards if isinstance(f, list) and f):
        return (f"{what}: {sum(f[0] is True for f in forwards)} of your {len(forwards)} forward passes ran in training "
                "mode: call model.eval() before measuring. In training mode dropout zeroes a random share of the "
                "activations, so the loss is noisier and higher than the model's.")
    if any(f[1] is True for f in forwards if isinstance(f, list) and len(f) > 1):
        return (f"{what}: your forward passes recorded gradients (torch.is_grad_enabled() was True): run them under "
                "torch.no_grad(). Nothing calls backward() here, and without it every batch builds a graph of all "
                "its activations for nothing.")
    if after and all(m is case.training for m in after[:1]) and any(m is not case.training for m in after[1:]):
        return (f"{what}: the model itself is back in {'training' if case.training else 'evaluation'} mode but "
                "its layers are not: setting model.training changes the flag of the model alone. "
                "model.train(mode) sets the model and every layer inside it.")
    if after and after[0] is not case.training:
        return (f"{what}: the model came in evaluation mode and left in training mode. Put it back in the mode it "
                "came in (read model.training first, then model.train(that) at the end), not always in training mode."
                if not case.training else
                f"{what}: the model came in training mode and you left it in evaluation mode. A caller in the middle "
                "of training would go on training in evaluation mode: read model.training first and put it back at "
                "the end (model.train(that)).")
    if run["grads"]:
        return f"{what}: the model's parameters hold gradients afterwards ({run['grads'][0]}...): measuring must not call backward()."
    out = run.get("out")
    floats = isinstance(out, dict) and all(isinstance(v, float) for v in out.values())
    if floats and run.get("same_again") is False:
        return (f"{what}: two calls with the same model, splits and seed gave different estimates: your batches depend "
                "on random numbers other than seed's. Cut every batch with the split's own generator, "
                "get_batch(..., generator=generator), never the global one.")
    rng = run.get("rng") if isinstance(run.get("rng"), dict) else {}
    if floats and rng.get("moved") is True and isinstance(rng.get("seeded"), int):
        return (f"{what} reseeds PyTorch's global generator: after it, its seed is {rng['seeded']}, as a "
                f"torch.manual_seed({rng['seeded']}) in the function leaves it, so whatever draws next (the next training "
                "batches, dropout, an initialisation) repeats the same numbers after every evaluation. Make a generator "
                "of the split's own, torch.Generator().manual_seed(seed), and pass it to get_batch: the global one stays "
                "untouched.")
    if floats and rng.get("moved") is True:
        return (f"{what} draws from PyTorch's global generator (its state moved during the call), which nothing here "
                "should use: the model is measured in evaluation mode and every batch "
                "comes from the split's own generator, get_batch(..., generator=generator).")
    if run.get("splits_changed"):
        return (f"{what} changed the caller's splits dict: {run['splits_changed']}"
                f"{' (the dict returned is the one given, its ids replaced by the losses)' if run.get('returned_splits') else ''}. "
                "The caller measures again later, and trains, with that same dict: build a new dict for the losses.")
    if isinstance(out, dict) and "__not_a_dict__" in out:
        return (f"{what} returned {_words(out['__not_a_dict__'])}: return a dict with one Python float per split, "
                "{name: mean loss}, with the names of splits as keys.")
    if isinstance(out, dict) and sorted(out) != sorted(name for name, _ in case.lengths):
        return f"{what} returned the keys {sorted(out)}; the splits are {[name for name, _ in case.lengths]}: one entry per split, under its name."
    odd = {k: v for k, v in (out or {}).items() if not isinstance(v, float)}
    if odd:
        name, value = next(iter(odd.items()))
        return (f"{what}: the value of {name!r} is {_words(value)}: return a Python float for each split "
                "(loss.item() of each batch, or float(...) of the mean).")
    return None


def _words(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor ({value.dtype}, shape {tuple(value.shape)})"
    if isinstance(value, dict) and "kind" in value:
        return f"a {value['kind']} ({value.get('text', '')})"
    return repr(value)[:80]


def _reading(case: Case, got, expected) -> str | None:
    wrong = [k for k in expected if not torch.allclose(got[k], expected[k], rtol=TOL, atol=TOL)]
    parts = [f"{k!r}: {float(got[k]):.6f} where the mean of the reference's {case.n_batches} batch losses is "
             f"{float(expected[k]):.6f} ({float(got[k]) / float(expected[k]):.4g} × it)" for k in wrong]
    return "wrong mean loss for " + "; ".join(parts)


SPEC = Spec(
    label="estimate_loss",
    call=_call,
    expected=_expected,
    variants=_variants,
    arguments=_arguments,
    summary="estimate_loss: the model in evaluation mode without gradients, put back in the mode it came in (training "
            "or evaluation, every layer), and every split's mean loss over its batches as the reference's (float64)",
    read=_read,
    compare=Compare({torch.float64: TOL}),
    sizes=lambda case: {"B": case.B, "T": case.T, "V": case.V, "C": case.C},
    around=_known_get_batch,
    form=_form,
    reading=_reading,
    evidence=lambda case, expected, got: "; ".join(
        f"{k}: expected {float(expected[k]):.6f}, got {float(got[k]):.6f}" for k in expected if k in got),
)

check_estimate_loss, check_estimate_loss_hidden = function_checks("check_estimate_loss", SPEC, CASES, HIDDEN_CASES)
