"""Checks for lesson 10 (GPT-2 in the course's model): GELU, and loading GPT-2's checkpoint.

Shape legend: B batch, T time, C embedding size, V vocabulary, nh heads, hs head size, L layers.
The probes make a small checkpoint in GPT-2's format (``gpt2_format_checkpoint``, every size
different) and load it into lesson 06's TransformerLM (an earlier lesson: importable while
grading); the judges load it with the reference and compare every sub-layer's output in order.
"""

from __future__ import annotations

import difflib
import re
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks.core import (
    CheckFailed,
    calls_to,
    describe,
    expect_callable,
    expect_tensor,
    first_mismatch,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import explain_mismatch
from helpers.checks.errors import attempt, caught, raise_caught
from helpers.checks.gelu_mistakes import GRID, gelu_reading, gelu_variants
from helpers.checks.gpt2_format import (
    WatchedCheckpoint,
    _cause,
    _same,
    changed_message,
    gpt2_format_checkpoint,
    gpt2_shaped_config,
    key_error_facts,
    key_error_hint,
    shared_message,
    shared_with_checkpoint,
    sublayer_outputs,
)
from helpers.checks.invariants import (
    dict_changed,
    input_gradients,
    judge_input_gradients,
    tensors_kept,
)
from helpers.checks.verdict import tolerance
from helpers.reference import gpt2, transformer_lm

__all__ = ["check_gelu", "check_load_gpt2", "gpt2_format_checkpoint", "gpt2_shaped_config", "sublayer_outputs"]

# ---------------------------------------------------------------------------------------------
# gelu(x, approximate): the erf form ("none") and GPT-2's tanh form ("tanh")

GELU_CASES = [(70, (3, 7), torch.float64, "none"), (71, (3, 7), torch.float64, "tanh"), (72, (5,), torch.float64, "tanh")]
GELU_HIDDEN_CASES = [(73, (2, 4, 6), torch.float32, "none"), (74, (2, 4, 6), torch.float32, "tanh"), (75, (9,), torch.float64, "none")]


def _gelu_input(seed, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    x = 3 * torch.randn(*shape, generator=g, dtype=torch.float64)  # spread over the curve's bend
    tails = torch.tensor([-9.0, 0.0, 9.0, 15.0, -40.0], dtype=torch.float64)  # both tails, far ones too, and zero
    x.view(-1)[:min(5, x.numel())] = tails[:min(5, x.numel())]
    return x.to(dtype)




def _probe_gelu(cases):
    def probe(gelu) -> dict:
        expect_callable(gelu, "gelu")
        runs = []
        for seed, shape, dtype, approximate in cases:
            x = _gelu_input(seed, shape, dtype)
            before = x.clone()
            try:
                with calls_to((F, "gelu", "F.gelu"), (nn.GELU, "forward", "nn.GELU"), kernels=("gelu",)) as library:
                    out = gelu(x, approximate=approximate)
                again = gelu(x.clone(), approximate=approximate)
            except Exception as exc:  # noqa: BLE001 - the error is evidence
                runs.append({"out": caught(exc), "x_changed": not torch.equal(before, x)})
                continue
            curve = attempt(gelu, GRID.clone(), approximate).get("out")  # the judge reads the curve from it
            runs.append({"out": out, "again": again, "curve": curve, "x_changed": not torch.equal(before, x),
                         "library": sorted(set(library)), "grads": input_gradients(partial(gelu, approximate=approximate), before)})
        return {"runs": runs}

    return probe


def _which_form(cases, found) -> str:
    """What the outputs for each value of approximate say about its test, read from every case: the
    same form whatever it says, or the two forms swapped."""
    forms: dict[str, set] = {}
    for (seed, shape, dtype, approximate), run in zip(cases, found, strict=True):
        got = run.get("out")
        x = _gelu_input(seed, shape, dtype).double()
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        fits = [form for form in ("none", "tanh") if isinstance(got, torch.Tensor) and got.shape == x.shape
                and torch.allclose(got.double(), gpt2.gelu(x, approximate=form), atol=tol, rtol=tol)]
        if len(fits) == 1:  # a case where the two forms agree (only tails and zero) tells nothing
            forms.setdefault(approximate, set()).add(fits[0])
    if forms.get("none") == {"none"} and forms.get("tanh") == {"none"}:
        return (" It returns the erf form for both values of approximate: is approximate read at all? Compare it: "
                "approximate == 'tanh' chooses the tanh form.")
    if forms.get("none") == {"tanh"} and forms.get("tanh") == {"tanh"}:
        return (" It returns the tanh form for both values: `if approximate:` is true for the string 'none' as well (a "
                "non-empty string is true); compare it, approximate == 'tanh'.")
    if forms.get("none") == {"tanh"} and forms.get("tanh") == {"none"}:
        return " It returns the tanh form for 'none' and the erf form for 'tanh': the test on approximate is the wrong way round."
    return ""


def _judge_gelu(cases):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        for (seed, shape, dtype, approximate), run in zip(cases, found, strict=True):
            what = f"gelu(x, approximate={approximate!r}) on a {str(dtype)[6:]} x of shape {shape}"
            got = run.get("out")
            raise_caught(what, got)
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} changed x in place: return a new tensor.")
            if run.get("library"):
                raise CheckFailed(f"{what} called {' and '.join(map(str, run['library']))}: the exercise is to write "
                                  "the formula yourself (the cell after the test compares yours with PyTorch's).")
            x = _gelu_input(seed, shape, dtype).double()
            expected = gpt2.gelu(x, approximate=approximate)
            got = expect_tensor(got, tuple(shape), what)
            if got.dtype != dtype:
                raise CheckFailed(f"{what} returned {str(got.dtype)[6:]}: keep x's dtype.")
            tol = 1e-12 if dtype == torch.float64 else 1e-5
            if torch.allclose(got.double(), expected, atol=tol, rtol=tol):
                judge_input_gradients(run.get("grads"), partial(gpt2.gelu, approximate=approximate), (x,), ("x",), what, dtype)
                continue
            evidence = first_mismatch(expected, got, tol, tol)
            for label, output in gelu_variants(x, approximate).items():
                if torch.allclose(got.double(), output, atol=tol, rtol=tol):
                    how = _which_form(cases, found) if label.startswith("you computed the other form") else ""
                    raise CheckFailed(f"{what}: {label}.{how} Evidence: {evidence}.")
            curve = run.get("curve")
            usable = isinstance(curve, torch.Tensor) and curve.shape == GRID.shape and bool(torch.isfinite(got).all())
            read = gelu_reading(curve.double(), approximate) if usable else None
            if read:
                raise CheckFailed(f"{what}: {read}. Evidence: {evidence}.")
            raise CheckFailed(explain_mismatch(expected, got, what=what, atol=tol, rtol=tol, again=run.get("again"), dtype=dtype))
        return "gelu: the erf form and the tanh form match the reference in float64 and float32, tails and zero included; x untouched."

    return judge


check_gelu, check_gelu_hidden = visible_and_hidden("check_gelu", _probe_gelu, _judge_gelu, GELU_CASES, GELU_HIDDEN_CASES)

# ---------------------------------------------------------------------------------------------
# load_gpt2_state_dict(model, state_dict): GPT-2's names and layouts onto the course's modules

# (seed, V, P, C, L, nh, B, T, dtype)
LOAD_CASES = [(80, 23, 11, 12, 2, 3, 2, 9, torch.float64)]
LOAD_HIDDEN_CASES = [(81, 29, 13, 10, 3, 2, 3, 7, torch.float64), (82, 19, 9, 8, 1, 4, 3, 6, torch.float32),
                     (83, 17, 8, 6, 2, 3, 2, 5, torch.float64)]
#: a case's checkpoint in another dtype than its model (a float32 download into a float64 model): by seed
CHECKPOINT_DTYPES = {83: torch.float32}


def _checkpoint(case) -> dict[str, torch.Tensor]:
    seed, V, P, C, L, nh, B, T, dtype = case
    return gpt2_format_checkpoint(V, P, C, L, seed, CHECKPOINT_DTYPES.get(seed, dtype))


def _case_text(case) -> str:
    seed, V, P, C, L, nh, B, T, dtype = case
    return (f"a GPT-2-format checkpoint with V={V}, {P} positions, C={C}, {L} layer{'s' if L > 1 else ''} of "
            f"{nh} heads ({_dtypes_text(case)}), on ids of shape ({B}, {T})")


def _dtypes_text(case) -> str:
    seed, dtype = case[0], case[-1]
    if seed in CHECKPOINT_DTYPES:
        return f"{str(CHECKPOINT_DTYPES[seed])[6:]}, into a {str(dtype)[6:]} model"
    return str(dtype)[6:]


def _ids(case) -> torch.Tensor:
    seed, V, P, C, L, nh, B, T, dtype = case
    return torch.randint(V, (B, T), generator=torch.Generator().manual_seed(seed + 500))  # (B, T)


def _fresh_model(case):
    """Lesson 06's model, seeded, in the shape of a GPT-2-format checkpoint."""
    seed, V, P, C, L, nh, B, T, dtype = case
    torch.manual_seed(seed)  # known initial weights: a weight that was not loaded keeps them
    return transformer_lm.TransformerLM(transformer_lm.Config(**gpt2_shaped_config(V, P, C, L, nh))).to(dtype).eval()


def _probe_load(cases):
    def probe(load_gpt2_state_dict) -> dict:
        expect_callable(load_gpt2_state_dict, "load_gpt2_state_dict")
        runs = []
        for case in cases:
            seed, V, P, C, L, nh, B, T, dtype = case
            model = _fresh_model(case)  # seeded: a weight left unloaded keeps known values
            checkpoint = WatchedCheckpoint(_checkpoint(case))
            before = tensors_kept(checkpoint)
            try:
                returned = load_gpt2_state_dict(model, checkpoint)
                params = {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}
                shared = shared_with_checkpoint(model, checkpoint)  # a parameter that is a view of the checkpoint
                dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
                tied = model.lm_head.weight is model.word_to_embedding.weight
                outputs = sublayer_outputs(model, _ids(case))
            except Exception as exc:  # noqa: BLE001 - the error is evidence
                runs.append({**caught(exc, {"V": V, "C": C}), **key_error_facts(load_gpt2_state_dict, lambda c=case: _fresh_model(c), checkpoint, exc)})
                continue
            runs.append({"params": params, "tied": tied, "outputs": outputs, "shared": shared, "dtypes": dtypes,
                         "returned": "the model" if returned is model else describe(returned),
                         "checkpoint_changed": dict_changed(checkpoint, before)})
        return {"runs": runs}

    return probe


def _load_hint(error: str, case, run: dict) -> str:
    """What a loader's error says about GPT-2's checkpoint: a buffer, a Conv1D weight, a name (a
    KeyError: what ``key_error_facts`` established)."""
    seed, V, P, C, L, nh, B, T, dtype = case
    if re.search(r"(?<!c_)attn\.(masked_)?bias", error):
        return "attn.bias and attn.masked_bias are buffers (a causal mask and a constant), not weights; skip them."
    sizes = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", error)
    if sizes and {int(sizes[1]), int(sizes[2])} in ({C, 3 * C}, {C, 4 * C}) and run.get("established") is not True:
        return ("A weight does not fit its module. GPT-2's Conv1D weights are stored (in, out); nn.Linear's are "
                "(out, in): transpose them.")
    key = re.fullmatch(r"KeyError: '(.*)'", error)
    if not key or key_error_hint(key[1], run):  # what the probe established about a KeyError comes first
        return key_error_hint(key[1], run) if key else ""
    key, names = key[1], list(_checkpoint(case))
    near = difflib.get_close_matches(key, names, n=2, cutoff=0.5)
    hint = ("the layer's prefix is missing: layer i's entries start with 'h.i.'" if f"h.0.{key}" in names else
            "the ending is missing: each entry ends in .weight or .bias" if f"{key}.weight" in names else
            "a part of the name is missing between two dots" if ".." in key else "no entry has that name")
    return (f"The checkpoint has no entry {key!r}; {hint}" + (f" (the nearest: {', '.join(near)})" if near else "")
            + ". Its names: wte.weight, wpe.weight, h.i.ln_1.weight, h.i.attn.c_attn.weight, ..., ln_f.bias.")


def _judge_load(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, V, P, C, L, nh, B, T, dtype = case
            what = f"load_gpt2_state_dict on {_case_text(case)}"
            raise_caught(what, run, hint=_load_hint(str(run.get("error")), case, run))
            initial_model = _fresh_model(case)
            initial = {n: p.detach().clone() for n, p in initial_model.named_parameters(remove_duplicate=False)}
            model = _fresh_model(case)
            gpt2.load_gpt2_state_dict(model, _checkpoint(case))
            expected = {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}
            came = str(dtype).removeprefix("torch.")
            if run.get("dtypes") not in (None, [came]):
                raise CheckFailed(
                    f"{what}: the model came in {came} and its parameters came back {' and '.join(run['dtypes'])}"
                    + (", the checkpoint's dtype" if run["dtypes"] == [str(CHECKPOINT_DTYPES.get(seed, dtype))[6:]] else "")
                    + ": the loader changed the dtype of the caller's model. copy_ converts each value into the "
                    "parameter's own dtype; was the model converted (model.to(...), .float()) or a parameter replaced?")
            wanted = sublayer_outputs(model, _ids(case))
            got_params, got_outputs = run.get("params") or {}, run.get("outputs") or {}
            tol = tolerance(dtype)
            for place, want in wanted.items():
                have = got_outputs.get(place)
                if isinstance(have, torch.Tensor) and have.shape == want.shape and torch.allclose(have.double(), want.double(), atol=tol, rtol=tol):
                    continue
                before = "everything before it matches" if place != "embeddings" else "it is the first"
                head = f"{what}: the first sub-layer that differs is {place} ({before})"
                if not isinstance(have, torch.Tensor) or have.shape != want.shape:
                    raise CheckFailed(f"{head}: it returned {describe(have)}, expected shape {tuple(want.shape)}.")
                evidence = first_mismatch(want, have, tol, tol)
                if place == "logits" and run.get("tied") is False:
                    raise CheckFailed(f"{head}: lm_head.weight is no longer word_to_embedding.weight. Assigning a new "
                                      "nn.Parameter to the token table unties it; copy into the existing tensor "
                                      f"(weight.copy_(...)) so that the head keeps sharing it. Evidence: {evidence}.")
                layer = place.startswith("layer")  # "layer 3 attention": that layer's attention
                prefix = _PLACES[place.split(" ", 2)[-1]].format(i=place.split()[1]) if layer else _PLACES[place]
                suspects = [n for n in expected if n.startswith(prefix) and not _same(got_params.get(n), expected[n])]
                if suspects:
                    cause = _cause(suspects[0], got_params, expected, initial, C, nh)
                    raise CheckFailed(f"{head}: {cause}. Evidence: {evidence}.")
                raise CheckFailed(explain_mismatch(want, have, what=f"{head}: its weights match, but the output", atol=tol, rtol=tol))
            if run.get("tied") is not True:
                raise CheckFailed(f"{what}: lm_head.weight is no longer the same tensor as word_to_embedding.weight: "
                                  "copy into the existing parameters (weight.copy_(...)) so the head stays tied.")
            if run.get("shared"):
                raise CheckFailed(shared_message(what, run["shared"]))
            if run.get("checkpoint_changed"):
                raise CheckFailed(changed_message(what, run["checkpoint_changed"]))
            if run.get("returned") != "the model":
                raise CheckFailed(f"{what}: the weights load, but the function returned {run.get('returned')}; return the "
                                  "model (as the docstring says), so that model = load_gpt2_state_dict(model, sd) works.")
        sizes = "; ".join(_case_text(c) for c in cases)
        return (f"load_gpt2_state_dict: {sizes}: every sub-layer's output (embeddings, ln_1, attention, ln_2, MLP of "
                "every layer, the final norm and the logits) matches the reference; lm_head stays tied; no parameter is a "
                "view of the checkpoint, which is left as it was; the model is returned.")

    return judge


_PLACES = {"embeddings": ("word_to_embedding.", "pos_to_embedding."), "ln_1": "layers.{i}.norm_before_attn.",
           "attention": "layers.{i}.attention.", "ln_2": "layers.{i}.norm_before_mlp.", "MLP": "layers.{i}.mlp.",
           "final norm": "final_norm.", "logits": "lm_head."}

check_load_gpt2, check_load_gpt2_hidden = visible_and_hidden("check_load_gpt2", _probe_load, _judge_load, LOAD_CASES, LOAD_HIDDEN_CASES)
