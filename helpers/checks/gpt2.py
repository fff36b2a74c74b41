"""Checks for lesson 10 (GPT-2 in the course's model): GELU, and loading GPT-2's checkpoint.

Shape legend: B batch, T time, C embedding size, V vocabulary, nh heads, hs head size, L layers.
The probes make a small checkpoint in GPT-2's format (``gpt2_format_checkpoint``, every size
different) and load it into lesson 06's TransformerLM (an earlier lesson: importable while
grading); the judges load it with the reference and compare every sub-layer's output in order.
"""

from __future__ import annotations

import math

import torch

from helpers.checks.core import Check, CheckFailed, describe, first_mismatch
from helpers.checks.diagnose import explain_mismatch
from helpers.checks.gpt2_format import gpt2_format_checkpoint, gpt2_shaped_config, sublayer_outputs

__all__ = ["check_gelu", "check_load_gpt2", "gpt2_format_checkpoint", "gpt2_shaped_config", "sublayer_outputs"]

# ---------------------------------------------------------------------------------------------
# gelu(x, approximate): the erf form ("none") and GPT-2's tanh form ("tanh")

GELU_CASES = [(70, (3, 7), torch.float64, "none"), (71, (3, 7), torch.float64, "tanh"), (72, (5,), torch.float64, "tanh")]
GELU_HIDDEN_CASES = [(73, (2, 4, 6), torch.float32, "none"), (74, (2, 4, 6), torch.float32, "tanh"), (75, (9,), torch.float64, "none")]


def _gelu_input(seed, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    x = 3 * torch.randn(*shape, generator=g, dtype=torch.float64)  # spread over the curve's bend
    x.view(-1)[:3] = torch.tensor([-9.0, 0.0, 9.0], dtype=torch.float64)  # both tails and zero
    return x.to(dtype)


def _probe_gelu(cases):
    def probe(gelu) -> dict:
        if not callable(gelu):
            raise CheckFailed(f"expected the function gelu, got {describe(gelu)}")
        runs = []
        for seed, shape, dtype, approximate in cases:
            x = _gelu_input(seed, shape, dtype)
            before = x.clone()
            try:
                out = gelu(x, approximate=approximate)
            except NotImplementedError:
                raise
            except Exception as exc:  # noqa: BLE001 - the error is evidence
                out = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            runs.append({"out": out, "x_changed": not torch.equal(before, x)})
        return {"runs": runs}

    return probe


def gelu_variants(x: torch.Tensor, approximate: str) -> dict[str, torch.Tensor]:
    """What gelu returns under each classic mistake (x in float64)."""
    c = math.sqrt(2 / math.pi)
    erf_form = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    tanh_form = 0.5 * x * (1 + torch.tanh(c * (x + 0.044715 * x**3)))
    other = tanh_form if approximate == "none" else erf_form
    return {
        f"you computed the other form: approximate={approximate!r} asks for the "
        + ("exact erf form, 0.5 x (1 + erf(x / sqrt 2))" if approximate == "none" else "tanh form"): other,
        "the erf form needs erf(x / sqrt(2)), not erf(x)": 0.5 * x * (1 + torch.erf(x)),
        "the tanh form lost its cubic term: tanh(sqrt(2/pi) * (x + 0.044715 x^3))": 0.5 * x * (1 + torch.tanh(c * x)),
        "the tanh form's constant is sqrt(2/pi), about 0.798, not sqrt(2 pi)": 0.5 * x * (1 + torch.tanh(math.sqrt(2 * math.pi) * (x + 0.044715 * x**3))),
        "the leading 0.5 is missing": x * (1 + torch.erf(x / math.sqrt(2))) if approximate == "none" else x * (1 + torch.tanh(c * (x + 0.044715 * x**3))),
        "this is the sigmoid approximation x * sigmoid(1.702 x), a third form; use the one asked for": x * torch.sigmoid(1.702 * x),
        "this is ReLU, not GELU": torch.relu(x),
    }


def _judge_gelu(cases):
    def judge(data: dict) -> str:
        from helpers.reference.gpt2 import gelu

        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for (seed, shape, dtype, approximate), run in zip(cases, runs, strict=True):
            what = f"gelu(x, approximate={approximate!r}) on a {str(dtype)[6:]} x of shape {shape}"
            got = run.get("out")
            if isinstance(got, dict) and "error" in got:
                raise CheckFailed(f"{what} raised {got['error']}")
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} changed x in place: return a new tensor.")
            x = _gelu_input(seed, shape, dtype).double()
            expected = gelu(x, approximate=approximate)
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(shape):
                raise CheckFailed(f"{what} should return a tensor of shape {shape}, got {describe(got)}.")
            if got.dtype != dtype:
                raise CheckFailed(f"{what} returned {str(got.dtype)[6:]}: keep x's dtype.")
            tol = 1e-12 if dtype == torch.float64 else 1e-5
            if torch.allclose(got.double(), expected, atol=tol, rtol=tol):
                continue
            evidence = first_mismatch(expected, got, tol, tol)
            for label, output in gelu_variants(x, approximate).items():
                if torch.allclose(got.double(), output, atol=tol, rtol=tol):
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            raise CheckFailed(explain_mismatch(expected, got, what=what, atol=tol, rtol=tol))
        return "gelu: the erf form and the tanh form match the reference in float64 and float32, tails and zero included; x untouched."

    return judge


check_gelu = Check("check_gelu", _probe_gelu(GELU_CASES), _judge_gelu(GELU_CASES))
check_gelu_hidden = Check("check_gelu_hidden", _probe_gelu(GELU_HIDDEN_CASES), _judge_gelu(GELU_HIDDEN_CASES), hidden=True)

# ---------------------------------------------------------------------------------------------
# load_gpt2_state_dict(model, state_dict): GPT-2's names and layouts onto the course's modules

# (seed, V, P, C, L, nh, B, T, dtype)
LOAD_CASES = [(80, 23, 11, 12, 2, 3, 2, 9, torch.float64)]
LOAD_HIDDEN_CASES = [(81, 29, 13, 10, 3, 2, 3, 7, torch.float64), (82, 19, 9, 8, 1, 4, 3, 6, torch.float32)]


def _case_text(case) -> str:
    seed, V, P, C, L, nh, B, T, dtype = case
    return (f"a GPT-2-format checkpoint with V={V}, {P} positions, C={C}, {L} layer{'s' if L > 1 else ''} of "
            f"{nh} heads ({str(dtype)[6:]}), on ids of shape ({B}, {T})")


def _ids(case) -> torch.Tensor:
    seed, V, P, C, L, nh, B, T, dtype = case
    return torch.randint(V, (B, T), generator=torch.Generator().manual_seed(seed + 500))  # (B, T)


def _fresh_model(case):
    from helpers.reference.transformer_lm import (  # lesson 06: importable while grading
        Config,
        TransformerLM,
    )

    seed, V, P, C, L, nh, B, T, dtype = case
    torch.manual_seed(seed)  # known initial weights: a weight that was not loaded keeps them
    return TransformerLM(Config(**gpt2_shaped_config(V, P, C, L, nh))).to(dtype).eval()


def _probe_load(cases):
    def probe(load_gpt2_state_dict) -> dict:
        if not callable(load_gpt2_state_dict):
            raise CheckFailed(f"expected the function load_gpt2_state_dict, got {describe(load_gpt2_state_dict)}")
        runs = []
        for case in cases:
            seed, V, P, C, L, nh, B, T, dtype = case
            model = _fresh_model(case)  # seeded: a weight left unloaded keeps known values
            try:
                load_gpt2_state_dict(model, gpt2_format_checkpoint(V, P, C, L, seed, dtype))
                params = {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}
                tied = model.lm_head.weight is model.word_to_embedding.weight
                outputs = sublayer_outputs(model, _ids(case))
            except NotImplementedError:
                raise
            except Exception as exc:  # noqa: BLE001 - the error is evidence
                runs.append({"error": f"{type(exc).__name__}: {exc}"[:600]})
                continue
            runs.append({"params": params, "tied": tied, "outputs": outputs})
        return {"runs": runs}

    return probe


def gpt2_source(name: str) -> str:
    """The checkpoint entry a course parameter comes from."""
    parts = name.split(".")
    last = parts[-1]
    if name.startswith("word_to_embedding") or name.startswith("lm_head"):
        return "wte.weight"
    if name.startswith("pos_to_embedding"):
        return "wpe.weight"
    if name.startswith("final_norm"):
        return f"ln_f.{last}"
    i, part = parts[1], parts[2]
    if part in ("norm_before_attn", "norm_before_mlp"):
        return f"h.{i}.{'ln_1' if part == 'norm_before_attn' else 'ln_2'}.{last}"
    if part == "attention":
        if parts[3] == "to_output":
            return f"h.{i}.attn.c_proj.{last}"
        k = ("query", "key", "value").index(parts[3])
        return f"{parts[3]}'s third of h.{i}.attn.c_attn.{last} (output features {k}C to {k + 1}C)"
    return f"h.{i}.mlp.{'c_fc' if parts[4] == '0' else 'c_proj'}.{last}"


def _same(a, b) -> bool:  # noqa: D103
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=1e-6, rtol=1e-5)


def _cause(name, got, expected, initial, C, nh) -> str:
    """The most likely reason why parameter ``name`` holds ``got`` instead of ``expected``."""
    want, source = expected[name], gpt2_source(name)
    have = got.get(name)
    if not isinstance(have, torch.Tensor):
        return f"the model has no parameter {name} any more (keep the modules; copy into their parameters)"
    if have.shape != want.shape:
        return f"{name} has shape {tuple(have.shape)}, it should keep its {tuple(want.shape)}"
    if _same(have, initial[name]):
        return f"{name} was not loaded: it still holds its initial random values; it comes from {source}"
    if have.dim() == 2 and have.shape[0] == have.shape[1] and _same(have, want.T):
        if ".attention.query" in name or ".attention.key" in name or ".attention.value" in name:
            return ("the fused query/key/value weight (c_attn) was not transposed: GPT-2's Conv1D stores it "
                    "(in, out) = (C, 3C); nn.Linear wants (out, in), so transpose before splitting")
        return f"{source} was not transposed: GPT-2's Conv1D stores (in, out), nn.Linear (out, in)"
    prefix = name.rsplit(".", 2)[0]
    if ".attention." in name and name.split(".")[-2] in ("query", "key", "value"):
        kind = name.split(".")[-1]
        for other in ("query", "key", "value"):
            if other != name.split(".")[-2] and _same(have, expected[f"{prefix}.{other}.{kind}"]):
                return ("query, key and value came out of c_attn in the wrong order: its output features are "
                        f"query (0:C), then key (C:2C), then value (2C:3C); your {name.split('.')[-2]} holds {other}'s")
        hs = C // nh
        fused = torch.cat([expected[f"{prefix}.{p}.{kind}"] for p in ("query", "key", "value")])  # (3C, ...)
        by_head = fused.reshape(nh, 3, hs, *fused.shape[1:])  # the per-head layout some other models use
        part = ("query", "key", "value").index(name.split(".")[-2])
        if _same(have, by_head[:, part].reshape(C, *fused.shape[1:])):
            return ("you split c_attn head by head (nh, 3, hs); GPT-2 keeps all of query's C features first, "
                    "then key's, then value's: split the 3C features into three blocks of C")
    if name.endswith(".weight") and _same(have, expected.get(name[: -len("weight")] + "bias", want * 0)):
        return f"{name} holds the bias: weight and bias were swapped ({source})"
    for other, tensor in expected.items():
        if other != name and tensor.shape == want.shape and _same(have, tensor) and other.split(".")[-1] == name.split(".")[-1]:
            return f"{name} holds what belongs in {other} (from {gpt2_source(other)}); it comes from {source}"
    return f"{name} differs from {source}: " + first_mismatch(want, have, 1e-6, 1e-5)


def _judge_load(cases):
    def judge(data: dict) -> str:
        from helpers.reference.gpt2 import load_gpt2_state_dict

        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for case, run in zip(cases, runs, strict=True):
            seed, V, P, C, L, nh, B, T, dtype = case
            what = f"load_gpt2_state_dict on {_case_text(case)}"
            if "error" in run:
                error = str(run["error"])  # the student's code raised
                if "attn.bias" in error or "masked_bias" in error:
                    raise CheckFailed(f"{what} raised {error}: attn.bias and attn.masked_bias are buffers "
                                      "(a causal mask and a constant), not weights; skip them.")
                if "size" in error or "shape" in error:
                    raise CheckFailed(f"{what} raised {error}: a weight does not fit its module. GPT-2's Conv1D "
                                      "weights are stored (in, out); nn.Linear's are (out, in): transpose them.")
                raise CheckFailed(f"{what} raised {error}")
            initial_model = _fresh_model(case)
            initial = {n: p.detach().clone() for n, p in initial_model.named_parameters(remove_duplicate=False)}
            model = _fresh_model(case)
            load_gpt2_state_dict(model, gpt2_format_checkpoint(V, P, C, L, seed, dtype))
            expected = {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}
            wanted = sublayer_outputs(model, _ids(case))
            got_params, got_outputs = run.get("params") or {}, run.get("outputs") or {}
            tol = 1e-9 if dtype == torch.float64 else 1e-4
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
                if place.startswith("layer"):
                    prefix = _PLACES[place.split(" ", 2)[-1]].format(i=place.split()[1])
                else:
                    prefix = _PLACES[place]
                suspects = [n for n in expected if n.startswith(prefix) and not _same(got_params.get(n), expected[n])]
                if suspects:
                    cause = _cause(suspects[0], got_params, expected, initial, C, nh)
                    raise CheckFailed(f"{head}: {cause}. Evidence: {evidence}.")
                raise CheckFailed(explain_mismatch(want, have, what=f"{head}: its weights match, but the output", atol=tol, rtol=tol))
            if run.get("tied") is not True:
                raise CheckFailed(f"{what}: lm_head.weight is no longer the same tensor as word_to_embedding.weight: "
                                  "copy into the existing parameters (weight.copy_(...)) so the head stays tied.")
        sizes = "; ".join(_case_text(c) for c in cases)
        return (f"load_gpt2_state_dict: {sizes}: every sub-layer's output (embeddings, ln_1, attention, ln_2, MLP of "
                "every layer, the final norm and the logits) matches the reference; lm_head stays tied.")

    return judge


_PLACES = {"embeddings": ("word_to_embedding.", "pos_to_embedding."), "ln_1": "layers.{i}.norm_before_attn.",
           "attention": "layers.{i}.attention.", "ln_2": "layers.{i}.norm_before_mlp.", "MLP": "layers.{i}.mlp.",
           "final norm": "final_norm.", "logits": "lm_head."}

check_load_gpt2 = Check("check_load_gpt2", _probe_load(LOAD_CASES), _judge_load(LOAD_CASES))
check_load_gpt2_hidden = Check("check_load_gpt2_hidden", _probe_load(LOAD_HIDDEN_CASES), _judge_load(LOAD_HIDDEN_CASES), hidden=True)
