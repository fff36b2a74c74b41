"""Checks for lesson 02 (language models without context): MLP(emb_dim, n_hidden), two linear
layers with a ReLU between them, in self.model = nn.Sequential(...).

Shape legend: B batch, T sequence length, C embedding size (emb_dim), H hidden units of the MLP
(n_hidden). No two of them are equal in any case.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks.core import (
    CheckFailed,
    expect_default_dtype,
    expect_module_class,
    need,
    runs,
    visible_and_hidden,
)
from helpers.checks.errors import raise_caught
from helpers.checks.verdict import judge_output, run_module, tolerance
from helpers.params import num_parameters
from helpers.reference import language_models as ref

# ---------------------------------------------------------------------------------------------
# MLP(emb_dim, n_hidden): x (..., C) -> (..., C)

# (seed, C, H, batch shape, T, dtype)
MLP_CASES = [(40, 5, 16, (2,), 3, torch.float64)]
MLP_HIDDEN_CASES = [(41, 7, 4, (), 3, torch.float32), (42, 6, 9, (4,), 2, torch.float64)]
MLP_LAYERS = {"model.0": "the first linear layer", "model.1": "the ReLU", "model.2": "the second linear layer"}


def _mlp_shapes(C: int, H: int) -> dict[str, list[int]]:
    return {"model.0.weight": [H, C], "model.0.bias": [H], "model.2.weight": [C, H], "model.2.bias": [C]}


def _mlp_inputs(seed, C, H, batch, T, dtype):
    g = torch.Generator().manual_seed(seed)
    weights = {name: torch.randn(*shape, generator=g, dtype=torch.float64) for name, shape in _mlp_shapes(C, H).items()}
    x = torch.randn(*batch, T, C, generator=g, dtype=torch.float64)
    return {k: v.to(dtype) for k, v in weights.items()}, x.to(dtype)


def _probe_mlp(cases):
    def probe(mlp_class) -> dict:
        expect_module_class(mlp_class, "MLP")
        found = []
        for seed, C, H, batch, T, dtype in cases:
            weights, x = _mlp_inputs(seed, C, H, batch, T, dtype)
            mlp = mlp_class(C, H)
            expect_default_dtype(mlp, f"MLP(emb_dim={C}, n_hidden={H})")
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
                    run.update(run_module(mlp, x, {**({"B": batch[0]} if batch else {}), "T": T, "C": C, "H": H},
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
    params, layers, want = need(run.get("params"), dict), run.get("layers") or [], _mlp_shapes(C, H)
    if params != want:
        first = params.get("model.0.weight")
        if not run.get("sequential"):
            problem = ("store the layers in self.model = nn.Sequential(...): the parameter names are part "
                       "of the interface")
        elif layers and layers[0] == "Linear" and layers[-1] == "Linear" and len(layers) > 3 and "ReLU" in layers:
            extra = [name for name in layers[1:-1] if name != "ReLU"] or layers[1:-1]
            problem = (f"the Sequential holds {layers}: {', '.join(extra)} between the layers is not part of this MLP "
                       "(Linear, ReLU, Linear), and it moves the second linear layer from model.2 to "
                       f"model.{len(layers) - 1}")
        elif set(params) != set(want) and sorted(map(tuple, params.values())) == sorted(map(tuple, want.values())) \
                and layers == ["Linear", "ReLU", "Linear"]:
            problem = ("the layers and their sizes are right, but their parameters have other names: an nn.Sequential "
                       "built from named layers (an OrderedDict) names them by those names, not by their places "
                       "(model.0, model.2), and the course's weights and checkpoints find them by place. Build it "
                       "as nn.Sequential(nn.Linear(...), nn.ReLU(), nn.Linear(...))")
        elif layers == ["Linear", "Linear"]:
            problem = ("self.model holds no ReLU between the two linear layers, so the second layer is model.1: keep "
                       "nn.ReLU() inside the Sequential (it has no parameters, but it takes the place model.1)")
        elif first == [C, H] and params.get("model.2.weight") == [H, C]:
            problem = (f"the layer sizes are swapped: the first layer goes from emb_dim={C} into "
                       f"n_hidden={H}, nn.Linear({C}, {H}), and the second comes back, nn.Linear({H}, {C})")
        elif first and "model.0.bias" not in params and "model.2.bias" not in params:
            problem = "the linear layers have no bias; keep nn.Linear's default bias=True"
        elif (unbiased := [k.removesuffix(".bias") for k in want if k.endswith(".bias") and k not in params
                           and params.get(k.removesuffix(".bias") + ".weight") == want[k.removesuffix(".bias") + ".weight"]]):
            problem = (f"{' and '.join(unbiased)} has no bias (the weights have the right shapes): was it built with "
                       "bias=False? Keep nn.Linear's default bias=True")
        elif first == [C, C] or params.get("model.2.weight") == [C, C]:
            problem = f"the hidden layer has emb_dim={C} units instead of n_hidden={H}"
        elif first and first[0] != H and first[1:] == [C] and params.get("model.2.weight") == [C, first[0]]:
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
            raise_caught(what, run)
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} changed its input x in place; a layer must leave x alone.")
            mlp = ref.MLP(C, H).double()
            with torch.no_grad():
                for name, param in mlp.named_parameters():
                    param.copy_(weights[name].double())
                expected = mlp(x.double())
            diagnosis = {"what": what, "atol": tolerance(dtype), "rtol": tolerance(dtype), "axes": (*"BT"[-x.ndim + 1:], "C"),
                         "sizes": {**({"B": batch[0]} if batch else {}), "T": T, "C": C, "H": H},
                         "again": run.get("again"), "alone": run.get("alone"), "dtype": dtype}
            try:
                judge_output(run, expected, diagnosis, reference=mlp, inputs=(x.double(),), dtype_too=True,
                             variants=partial(mlp_variants, {k: v.double() for k, v in weights.items()}, x.double()))
            except CheckFailed as failed:  # name the layers of the Sequential by what they are
                message = str(failed)
                for name, gloss in MLP_LAYERS.items():
                    message = message.replace(f"{name} ", f"{name} ({gloss}) ").replace(f"{name};", f"{name} ({gloss});")
                raise CheckFailed(message) from None
        shapes = ", ".join(f"MLP({c[1]}, {c[2]}) on {(*c[3], c[4], c[1])}" for c in cases)
        counts = ", ".join(str(c[1] * c[2] * 2 + c[1] + c[2]) for c in cases)
        return f"MLP: {shapes}: parameter names, shapes and counts ({counts}) and outputs match the reference."

    return judge


check_mlp, check_mlp_hidden = visible_and_hidden("check_mlp", _probe_mlp, _judge_mlp, MLP_CASES, MLP_HIDDEN_CASES)
