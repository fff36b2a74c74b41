"""Checks for lesson 07 (training): AdamW's parameter groups, ``param_groups(model, weight_decay)``,
on the engine of ``helpers.checks.functions``.

The rule the lesson teaches: a parameter is decayed exactly when it is the weight of an
``nn.Linear`` and no ``nn.Embedding`` holds it (a tied output layer shares the embedding table:
it is a table, not decayed); every other parameter (biases, LayerNorm's scale and shift, embedding
tables, a bare ``nn.Parameter``) is not; every parameter of the model is in exactly one group.

The probe builds models of several shapes (lesson 06's ``TransformerLM`` tied and untied, lesson
02's bare-bones model, modules of PyTorch's own layers) and turns the student's groups into data:
for each group its keys, its ``weight_decay`` and the names of its tensors (a tensor that is not a
parameter of the model is named as such). The judge compares the weight decay every parameter
gets (the order of the groups and inside them does not matter) with the reference's, and names a
classic rule only when it gives the student's groups on every model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn as nn

from helpers.checks.functions import EXACT, Spec, function_checks
from helpers.reference import language_models, transformer_lm
from helpers.reference import training_step as ref

ADAMW_DEFAULT = "AdamW's default weight_decay, 0.01 (the group has no 'weight_decay' key)"
STRANGER = "a tensor that is not a parameter of the model"
# what such a tensor is, established from its memory and values, and how the message says it
SHARED, COPIED, ELSEWHERE = (f"{STRANGER}, sharing a parameter's memory", f"{STRANGER}, holding a parameter's values",
                             f"{STRANGER}, nor a copy of one")
STRANGER_WORDS = {
    SHARED: "share a parameter's memory but are other tensor objects (.data, .detach() or a view): AdamW must get "
            "the model's own parameters",
    COPIED: "hold the values of a parameter but are other tensors (a copy: .clone(), torch.tensor(...)): AdamW must "
            "get the model's own parameters",
    ELSEWHERE: "are not the model's parameters, and no parameter of the model shares their memory or holds their "
               "values: tensors from somewhere else (another model's, kept from an earlier call by a list that "
               "outlives the call, such as a default argument or a global?)",
    STRANGER: "are not tensors: AdamW must get the model's own parameters",
}


class Projection(nn.Linear):
    """A layer of its own kind that is an nn.Linear (as PyTorch's nn.MultiheadAttention's out_proj, or a
    layer a library subclasses to mark it): its weight is an nn.Linear's weight."""


class Mixer(nn.Module):
    """A model of PyTorch's own layers: an embedding, a Linear with a bias, nn.LayerNorm, a bare
    2-D parameter (not a Linear's weight) and a bare 1-D one, and a Linear used twice; ``subclassed``:
    the output layer is a ``Projection``."""

    def __init__(self, V: int, C: int, bias: bool, subclassed: bool = False):
        super().__init__()
        self.embed = nn.Embedding(V, C)
        self.body = nn.Sequential(nn.Linear(C, 2 * C, bias=bias), nn.GELU(), nn.Linear(2 * C, C), nn.LayerNorm(C))
        self.shared = nn.Linear(C, C, bias=False)
        self.mixing = nn.Parameter(torch.zeros(C, C))  # (C, C): a matrix, but no Linear's weight
        self.gain = nn.Parameter(torch.ones(C))
        self.out = (Projection if subclassed else nn.Linear)(C, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.shared(self.shared(self.body(self.embed(ids)) @ self.mixing)) * self.gain  # (B, T, C)
        return self.out(x)  # (B, T, V)


@dataclass(frozen=True)
class Case:
    kind: str  # "lm" (lesson 06's TransformerLM), "bigram" (lesson 02's BareBonesLM), "mixer"
    V: int
    C: int
    weight_decay: float
    layers: int = 1
    tied: bool = True
    bias: bool = False  # attention's biases (lm) or the first Linear's (mixer)
    frozen: tuple[str, ...] = ()  # parameters handed over with requires_grad=False (fine-tuning freezes some)
    subclassed: bool = False  # (mixer) the output layer is of a subclass of nn.Linear
    copied: bool = False  # (untied lm) the head starts as a copy of the table's values: equal values, two tensors


CASES = [
    Case("lm", V=11, C=12, weight_decay=0.1, layers=2, tied=True),
    Case("lm", V=7, C=8, weight_decay=0.05, layers=1, tied=False, bias=True),
    Case("bigram", V=9, C=5, weight_decay=0.2),
]
HIDDEN_CASES = [
    Case("mixer", V=6, C=4, weight_decay=0.3, bias=True),
    Case("lm", V=13, C=6, weight_decay=0.01, layers=3, tied=False),
    Case("mixer", V=5, C=3, weight_decay=0.1, bias=False, subclassed=True),
    Case("lm", V=8, C=4, weight_decay=0.1, layers=2, tied=True,
         frozen=("pos_to_embedding.weight", "layers.0.attention.query.weight", "layers.1.norm_before_mlp.bias")),
    Case("lm", V=9, C=6, weight_decay=0.1, layers=1, tied=False, copied=True),
]


def model_for(case: Case) -> nn.Module:
    torch.manual_seed(0)  # the weights do not matter here, only which tensor is which
    if case.kind == "bigram":
        return language_models.BareBonesLM(case.V, case.C)
    if case.kind == "mixer":
        return Mixer(case.V, case.C, case.bias, case.subclassed)
    model = transformer_lm.TransformerLM(transformer_lm.Config(
        n_vocab=case.V, max_len=5, emb_dim=case.C, n_hidden=2 * case.C, head_dim=case.C // 2, n_heads=2,
        n_layers=case.layers, tie_weights=case.tied, attn_bias=case.bias))
    for name in case.frozen:
        model.get_parameter(name).requires_grad_(False)
    if case.copied:
        with torch.no_grad():
            model.lm_head.weight.copy_(model.word_to_embedding.weight)
    return model


def _names(model: nn.Module) -> dict[int, str]:
    """Each parameter's name by identity (a tied tensor under its first name)."""
    return {id(p): name for name, p in model.named_parameters()}


def _plain(groups, model: nn.Module):
    """The groups as data: per group its keys, weight decay and tensors' names."""
    if not isinstance(groups, (list, tuple)):
        return {"not_a_list": f"{type(groups).__name__}: {repr(groups)[:100]}"}
    names, out = _names(model), []
    for group in groups:
        if not isinstance(group, dict) or "params" not in group:
            out.append({"odd": f"{type(group).__name__}: {repr(group)[:100]}"})
            continue
        params = group["params"]
        if isinstance(params, (set, frozenset, dict)):  # AdamW refuses them: a set has no order to keep state by
            out.append({"odd": f"a dict whose 'params' is a {type(params).__name__}, which AdamW refuses (its "
                               "parameters must come in an order: a list)"})
            continue
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        decay = group.get("weight_decay", None)
        out.append({"keys": sorted(str(k) for k in group),
                    "weight_decay": decay if isinstance(decay, (int, float)) and not isinstance(decay, bool) else None,
                    "has_decay": "weight_decay" in group,
                    "params": [names.get(id(p)) or _stranger(p, model) for p in params]})
    return {"groups": out}


def _stranger(tensor, model: nn.Module) -> str:
    """Which kind of stranger ``tensor`` is: one that shares a parameter's memory, one that holds a
    parameter's values, or neither (or not a tensor at all)."""
    if not isinstance(tensor, torch.Tensor):
        return STRANGER
    params = list(model.parameters())
    try:
        mine = tensor.untyped_storage().data_ptr()
        if any(mine == p.untyped_storage().data_ptr() for p in params):
            return SHARED
    except (RuntimeError, NotImplementedError):  # a tensor with no storage of its own
        pass
    if any(p.shape == tensor.shape and p.dtype == tensor.dtype and torch.equal(p.detach(), tensor.detach())
           for p in params):
        return COPIED
    return ELSEWHERE


def _call(function, case: Case) -> dict:
    model = model_for(case)
    return {"out": _plain(function(model, case.weight_decay), model)}


def _read(out):
    """The weight decay each parameter gets, {name: [one entry per group that holds it]}, and the
    strangers; the order of the groups and of the tensors in them does not matter."""
    if not isinstance(out, dict) or not isinstance(out.get("groups"), list):
        return out
    got: dict[str, list] = {}
    for group in out["groups"]:
        if not isinstance(group, dict) or "params" not in group:
            continue
        decay = group.get("weight_decay") if group.get("has_decay") else ADAMW_DEFAULT
        for name in group["params"]:
            got.setdefault(name, []).append(decay)
    return {name: sorted(values, key=str) for name, values in sorted(got.items())}


def _expected(case: Case):
    model = model_for(case)
    return _read(_plain(ref.param_groups(model, case.weight_decay), model))


def _rule(case: Case, name: str):
    """The groups of a classic rule, as data."""
    model = model_for(case)
    wd = case.weight_decay
    exact = name == "exact-type"  # a module is a layer only when its type is exactly nn.Linear (nn.Embedding)
    walked = list(model.children()) if name == "children" else list(model.modules())  # the model's own layers only
    linears = [m for m in walked if (type(m) is nn.Linear if exact else isinstance(m, nn.Linear))]
    tables = {id(m.weight) for m in walked if (type(m) is nn.Embedding if exact else isinstance(m, nn.Embedding))}
    params = list(model.parameters())
    if name == "dim":
        decay = [p for p in params if p.dim() >= 2]
    elif name == "all":
        decay = params
    elif name == "weights":
        decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    elif name == "linear-all":
        decay = [p for m in linears for p in m.parameters() if id(p) not in tables]
    elif name == "tied-decayed":
        decay = [m.weight for m in linears]
    elif name == "equal-values":  # a table recognised by its values, not as the same tensor
        values = [m.weight for m in walked if isinstance(m, nn.Embedding)]
        decay = [m.weight for m in linears if not any(m.weight.shape == t.shape and torch.equal(m.weight, t) for t in values)]
    else:  # the right decayed group, the other one built wrongly
        decay = [m.weight for m in linears if id(m.weight) not in tables]
    chosen = {id(p) for p in decay}
    rest = [p for p in params if id(p) not in chosen]
    if name == "both":  # every Linear's weight decayed; the other modules' own parameters, tied table included
        decay = [m.weight for m in linears]
        rest = [p for m in model.modules() if not isinstance(m, nn.Linear) for p in m.parameters(recurse=False)]
        rest += [m.bias for m in linears if m.bias is not None]
    if name == "missing":  # the no-decay group from nn.Embedding, nn.LayerNorm and the Linear biases only
        rest = [p for m in model.modules() if isinstance(m, (nn.Embedding, nn.LayerNorm)) for p in m.parameters(recurse=False)]
        rest += [m.bias for m in linears if m.bias is not None]
    second = {"params": rest} if name == "no-key" else {"params": rest, "weight_decay": 0.0}
    groups = [{"params": decay, "weight_decay": 0.0 if name == "swapped" else wd},
              {**second, **({"weight_decay": wd} if name == "swapped" else {})}]
    return _read(_plain(groups, model))


RULES = {
    "dim": "you decayed every tensor of two or more dimensions: that takes in the embedding tables (and any bare "
           "matrix) too, which this lesson does not decay; only the weight of an nn.Linear that no nn.Embedding holds "
           "is decayed",
    "all": "every parameter gets weight decay: biases, LayerNorm's scale and shift and the embedding tables "
           "belong in the group with weight_decay 0.0",
    "weights": "you decayed every parameter whose name ends in 'weight': LayerNorm's scale (its .weight) and the "
               "embedding tables are called weight too, and are not decayed",
    "linear-all": "you decayed the biases of the Linear layers with their weights: a bias is a vector, not decayed",
    "tied-decayed": "the table that the embedding shares with the tied lm_head is decayed: lm_head is an nn.Linear, "
                    "but its weight is an embedding table, and tables are not decayed",
    "both": "the tied table is in both groups: once as lm_head's weight (decayed) and once as the embedding's "
            "(not decayed); AdamW refuses a parameter in two groups. Take each tensor once",
    "missing": "some parameters are in no group (those of the course's own LayerNorm, which is not an "
               "nn.LayerNorm): AdamW would never update them. Build the no-decay group from model.parameters(), "
               "minus the decayed ones",
    "no-key": "the no-decay group has no 'weight_decay' key, so AdamW gives it its default, 0.01: write "
              "'weight_decay': 0.0 in it",
    "children": "only the model's direct sub-modules were searched for layers (model.children()): the nn.Linear "
                "layers inside its blocks (layers.0.attention.query, ...) are not decayed. model.modules() walks the "
                "whole tree",
    "exact-type": "a layer of a subclass of nn.Linear (out, a Projection) keeps its weight out of weight decay: is "
                  "the layer recognised by its exact type (type(m) is nn.Linear)? A subclass of nn.Linear is an "
                  "nn.Linear, and its weight is decayed: isinstance(m, nn.Linear) says so",
    "equal-values": "lm_head.weight holds the values of the embedding table but is a tensor of its own (an untied head "
                    "that started as a copy), and it was kept out of decay: is a table recognised by its values "
                    "(torch.equal, ==) instead of as the same tensor (is)? Only a tied head is the table",
    "swapped": "the two values are swapped: the Linear weights get weight_decay 0.0 and everything else weight_decay",
}


def _variants(case: Case) -> dict[str, dict]:
    return {words: _rule(case, name) for name, words in RULES.items()}


def _form(what: str, case: Case, got, run: dict) -> str | None:
    out = run.get("out")
    if isinstance(out, dict) and "not_a_list" in out:
        return (f"{what} returned {out['not_a_list']}: return a list of two dicts, "
                "[{'params': [...], 'weight_decay': ...}, {'params': [...], 'weight_decay': 0.0}].")
    odd = next((g["odd"] for g in (out or {}).get("groups", []) if isinstance(g, dict) and "odd" in g), None)
    if odd:
        return f"{what}: a group is {odd}; each group is a dict with the key 'params' (and 'weight_decay')."
    return None


#: words a parameter's name may carry that say what its module is
_TYPE_WORDS = {"Linear": ("linear", "proj", "fc", "head", "query", "key", "value", "to_output", "mlp"),
               "LayerNorm": ("norm", "ln"), "Embedding": ("embed", "emb", "wte", "wpe", "table")}


def _reading(case: Case, got, expected) -> str:
    said = []
    twice = [n for n, v in got.items() if n not in STRANGER_WORDS and len(v) > 1]
    for kind, words in STRANGER_WORDS.items():
        if kind in got:
            said.append(f"{len(got[kind])} {'item' if kind == STRANGER else 'tensor'}(s) in your groups {words}")
    for n in twice[:4]:
        decays = sorted({repr(v) for v in got[n]})
        if len(decays) > 1:
            said.append(f"{n} is in two groups (weight_decay {' and '.join(decays)})")
        else:
            said.append(f"{n} is listed {len(got[n])} times, each time with weight_decay {decays[0]}: AdamW refuses a "
                        "parameter given twice; take each tensor once (a tied table is held by two modules, so "
                        "walking the modules' own parameters reaches it twice)")
    missing = [n for n in expected if n not in got]
    if missing and case.frozen and sorted(missing) == sorted(case.frozen):
        said.append(f"in no group: the {len(missing)} parameters handed over frozen (requires_grad=False: "
                    f"{', '.join(missing)}), and only they. Every parameter of model.parameters() belongs in a group, "
                    "frozen ones too: AdamW skips a parameter without a gradient, and one unfrozen later must "
                    "already be in a group")
    elif missing:
        said.append(f"in no group: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
    model, unnamed = model_for(case), []
    for n, v in expected.items():
        if n in got and len(got[n]) == 1 and got[n] != v:
            owner = type(model.get_submodule(n.rpartition(".")[0]) if "." in n else model)
            kind = owner.__name__
            label = f"an nn.{kind}" if owner.__module__.startswith("torch.nn") else f"the {kind}" if "." not in n else f"a {kind}"
            said.append(f"{n} (of {label}) gets weight_decay {got[n][0]!r} where the rule gives {v[0]!r}")
            if not any(word in n.lower() for word in _TYPE_WORDS.get(kind, (kind.lower(),))):
                unnamed.append(n)
    question = (f". {unnamed[0]}'s name does not say what its module is (a layer inside an nn.Sequential is named by "
                "its place): is the rule read from the parameters' names? The module's type (isinstance) says what "
                "it is") if unnamed and len(said) <= 6 else ""
    return "wrong groups: " + "; ".join(said[:6]) + question


def _arguments(case: Case) -> str:
    if case.kind == "lm":
        shape = (f"lesson 06's TransformerLM, {case.layers} layer(s), {'tied' if case.tied else 'untied'}"
                 f"{', attention with biases' if case.bias else ''}{', its head a copy of the table' if case.copied else ''}")
    elif case.kind == "bigram":
        shape = "lesson 02's bare-bones model (an embedding and its tied output layer)"
    else:
        shape = ("a model of nn.Embedding, nn.Linear (one used twice), nn.LayerNorm and two bare nn.Parameter "
                 "(a matrix and a vector)" + (", its output layer of a subclass of nn.Linear" if case.subclassed else ""))
    return f"{shape}, weight_decay={case.weight_decay}"


SPEC = Spec(
    label="param_groups",
    call=_call,
    expected=_expected,
    variants=_variants,
    arguments=_arguments,
    summary=lambda cases: (f"param_groups: on {len(cases)} models every parameter is in exactly one group, decayed "
                           "exactly when it is an nn.Linear's weight that no nn.Embedding holds"),
    read=_read,
    compare=EXACT,
    form=_form,
    reading=_reading,
    evidence=lambda case, expected, got: "; ".join(
        f"{n}: expected {expected.get(n)}, got {got.get(n, 'no group')}"
        for n in dict.fromkeys([*expected, *got]) if expected.get(n) != got.get(n))[:600],
)

def _vary(case: Case, rng) -> Case:
    """Grading's extra case: the same model, another weight decay."""
    return dataclasses.replace(case, weight_decay=round(rng.uniform(0.02, 0.5), 3))


check_param_groups, check_param_groups_hidden = function_checks("check_param_groups", SPEC, CASES, HIDDEN_CASES,
                                                                vary=_vary)
