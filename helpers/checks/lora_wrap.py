"""Checks for lesson 12 (fine-tuning), exercises 2 and 3: ``add_lora`` wraps a model's chosen
linear maps in LoRA adapters in place, ``merge_lora`` folds them back into plain ``nn.Linear`` maps.

Shape legend: B batch, T time, C embedding size, V vocabulary, nh heads, hs head size, L layers,
H the MLP's hidden size, r the rank. The probes adapt lesson 06's reference ``TransformerLM`` (an
earlier lesson: importable while grading) and run the student's function with ``lora_known``'s
``LoRALinear`` under that name, so a mistake in exercise 1 costs nothing here. What the model holds
afterwards (which modules are wrapped, what they wrap, what trains, the merged weights) is read
from the model itself; a cause is stated only when those facts show it.
"""

from __future__ import annotations

import torch
from torch import nn

from helpers.checks.core import (
    CheckFailed,
    close,
    describe,
    expect_callable,
    first_mismatch,
    identify,
    need,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import caught, raise_caught
from helpers.checks.lora_known import (
    LoRALinear,
    adapter_values,
    known_good_lora,
    shallow_wrapped,
    small_lm,
    wrap_known_good,
)
from helpers.checks.lora_mistakes import MERGE_HINTS, weight_variants

__all__ = ["check_add_lora", "check_merge_lora"]

# (seed, V, C, nh, hs, L, H, T, targets, r, alpha, attention biases); nh * hs != C, so that every map is not square
ADD_CASES = [(160, 11, 12, 2, 4, 2, 20, 5, ("query", "value"), 2, 4.0, False),
             (161, 13, 10, 2, 3, 2, 14, 4, ("to_output",), 3, 9.0, True)]
ADD_HIDDEN_CASES = [(162, 9, 12, 3, 2, 3, 16, 6, ("key", "query", "to_output"), 1, 2.0, False),
                    (163, 7, 8, 2, 3, 1, 12, 3, ("value",), 4, 2.0, True),
                    (164, 9, 10, 2, 3, 2, 14, 4, ("0",), 2, 3.0, False),  # the MLPs' first maps: layers.i.mlp.model.0
                    (165, 11, 12, 2, 4, 2, 20, 5, ("lm_head", "value"), 2, 4.0, False),  # a map of the model itself
                    (166, 9, 10, 2, 3, 2, 14, 4, ("queries",), 2, 3.0, False),  # no map of that name: all frozen
                    (167, 9, 10, 2, 3, 2, 14, 4, ("output", "value"), 2, 3.0, False)]  # the end of to_output, not its name
MERGE_CASES = [(170, 11, 12, 2, 4, 2, 20, 5, ("query", "value"), 3, 4.5, True),
               (171, 13, 10, 2, 3, 2, 14, 4, ("to_output", "key"), 4, 2.0, False)]
MERGE_HIDDEN_CASES = [(172, 9, 12, 3, 2, 3, 16, 6, ("value",), 1, 2.5, True),
                      (173, 7, 8, 2, 3, 1, 12, 3, ("query", "key", "value", "to_output"), 3, 6.0, False)]


def _model(case) -> nn.Module:
    seed, V, C, nh, hs, L, H, T, targets, r, alpha, bias = case
    return small_lm(seed, V, C, nh, hs, L, H, max_len=T + 2, bias=bias)


def _ids(case) -> torch.Tensor:
    seed, V, C, nh, hs, L, H, T, *_ = case
    return torch.randint(V, (2, T), generator=torch.Generator().manual_seed(seed + 9))  # (B, T)


def _sizes(case) -> dict:
    seed, V, C, nh, hs, L, H, T, *_ = case
    return {"B": 2, "T": T, "C": C, "V": V, "H": H}


def _targeted(model: nn.Module, targets) -> list[str]:
    """The names of the nn.Linear maps whose last part is one of ``targets``, in the model's order."""
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.rpartition(".")[2] in targets]


def _dotted(model: nn.Module) -> list[str]:
    return [f"{name}.{key}" if name else key for name, m in model.named_modules() for key in m._modules if "." in key]


def _refuse_dotted(what: str, dotted: list, state: str) -> None:
    """Fail when the student's function put modules under dotted names (``setattr`` with a path)."""
    if dotted:
        raise CheckFailed(f"{what}: the model has new children named with dots ({', '.join(map(str, dotted[:3]))}) and "
                          f"{state}: setattr(model, 'layers.0.attention.query', ...) does not follow the path, it adds a "
                          "module under that whole name. Set the attribute on the parent module: "
                          "model.get_submodule('layers.0.attention'), then setattr(parent, 'query', ...).")


def _text(case, fn: str) -> str:
    seed, V, C, nh, hs, L, H, T, targets, r, alpha, bias = case
    return f"{fn}(model, targets={targets}, r={r}, alpha={alpha:g}) on a TransformerLM of {L} layer{'s' * (L > 1)}"


# ---------------------------------------------------------------------------------------------
# add_lora(model, targets, r, alpha) -> the wrapped modules' names


def _probe_add(cases):
    def probe(add_lora) -> dict:
        expect_callable(add_lora, "add_lora")
        found = []
        for case in cases:
            seed, V, C, nh, hs, L, H, T, targets, r, alpha, bias = case
            model = _model(case)
            originals = dict(model.named_modules())
            try:
                with case_sizes(_sizes(case)), known_good_lora(add_lora):
                    returned = add_lora(model, targets, r, alpha)
            except Exception as exc:  # noqa: BLE001 - the error is evidence
                found.append(caught(exc))
                continue
            wrapped = {n: {"r": m.r, "alpha": float(m.alpha), "base_kept": m.base is originals.get(n)}
                       for n, m in model.named_modules() if isinstance(m, LoRALinear)}
            listed = isinstance(returned, (list, tuple)) and all(isinstance(n, str) for n in returned)
            run = {"returned": list(returned) if listed else describe(returned),
                   "wrapped": wrapped, "dotted": _dotted(model),
                   "trains": [n for n, p in model.named_parameters() if p.requires_grad]}
            try:
                with torch.no_grad():
                    for name in wrapped:
                        lora = model.get_submodule(name)
                        A, B = adapter_values(name, lora.lora_A.shape, lora.lora_B.shape, seed)
                        lora.lora_A.copy_(A)
                        lora.lora_B.copy_(B)
                    run["out"] = model.double()(_ids(case))
            except Exception as exc:  # noqa: BLE001
                run.update(caught(exc))
            found.append(run)
        return {"runs": found, "shallow": shallow_wrapped(add_lora)}

    return probe


def _judge_add(cases):
    def judge(data: dict) -> str:
        from helpers.reference import fine_tuning as ref

        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, V, C, nh, hs, L, H, T, targets, r, alpha, bias = case
            what = _text(case, "add_lora")
            raise_caught(what, run if "wrapped" not in run else {})
            reference = _model(case)
            want = ref.add_lora(reference, targets, r, alpha)
            want_trains = sorted(n for n, p in reference.named_parameters() if p.requires_grad)
            _refuse_dotted(what, need(run.get("dotted"), list), "its layers are unchanged")
            wrapped = need(run.get("wrapped"), dict)
            missing, extra = [n for n in want if n not in wrapped], [n for n in wrapped if n not in want]
            if missing or extra:
                told = []
                if missing and not wrapped and data.get("shallow") == ["query"]:
                    told.append("nothing was wrapped here, where every target is nested inside a block; on a model with "
                                "a map named query as its direct child and another inside a block, only the direct "
                                "child was wrapped: the search walks the model's direct children only "
                                "(named_children()). named_modules() walks the whole tree, blocks included")
                elif missing and not wrapped:
                    told.append(f"nothing was wrapped. Does the test that picks a module ever hold? A module is chosen "
                                f"when the last part of its name, after the last dot, is one of targets ('{want[0].rsplit('.', 1)[-1]}' "
                                f"in {want[0]}: name.rsplit('.', 1)[-1]), not its first part or its whole name")
                elif missing:
                    told.append(f"not wrapped: {', '.join(missing)}")
                # a LoRALinear under a name no layer of the model had: set on another module than the layer's parent
                astray = [n for n in extra if n.rsplit(".", 1)[-1] in targets and n not in dict(reference.named_modules())]
                if astray:
                    told.append(f"LoRALinear layers were set where the model had no layer: {', '.join(astray)}, while "
                                "the layers they wrap stay where they were (setattr on the layer's parent module, "
                                "model.get_submodule of the name before the last dot, puts them in their place)")
                stray = [n for n in extra if n not in astray]
                if stray:
                    ends = [(n, t) for n in stray for t in targets if n.endswith(t) and n.rsplit(".", 1)[-1] != t][:1]
                    why = (f": {ends[0][0]} ends in '{ends[0][1]}', but its last part is "
                           f"'{ends[0][0].rsplit('.', 1)[-1]}'. Is the name matched with endswith? A target names a "
                           "layer's whole last part" if ends and all(any(n.endswith(t) for t in targets) for n in stray)
                           else "")
                    told.append(f"wrapped although targets do not name them: {', '.join(stray)} "
                                f"(a module is chosen when the last part of its name, after the last dot, is one of targets){why}")
                raise CheckFailed(f"{what} should wrap {', '.join(want)}; {'; '.join(told)}.")
            for name, facts in wrapped.items():
                facts = need(facts, dict)
                if facts.get("r") != r or facts.get("alpha") != alpha:
                    raise CheckFailed(f"{what}: {name} was wrapped with r={facts.get('r')}, alpha={facts.get('alpha')}, not the "
                                      f"r={r}, alpha={alpha:g} given to add_lora: pass them on to LoRALinear.")
                if facts.get("base_kept") is not True:
                    raise CheckFailed(f"{what}: the LoRALinear at {name} wraps a new layer, not the model's own {name}: its "
                                      "trained weights are lost. Pass the module that is there (getattr(parent, child)).")
            returned = run.get("returned")
            if not isinstance(returned, list) or sorted(map(str, returned)) != sorted(want):
                raise CheckFailed(f"{what} should return the names of the modules it wrapped, {want} (in any order); it "
                                  f"returned {returned if isinstance(returned, (list, str)) else describe(returned)}.")
            trains = sorted(need(run.get("trains"), list))
            if trains != want_trains:
                still, stuck = [n for n in trains if n not in want_trains], [n for n in want_trains if n not in trains]
                if still:
                    more = f" and {len(still) - 3} others" if len(still) > 3 else ""
                    none = (" No map's name ends in a target here, so nothing is wrapped, and every parameter must still "
                            "be frozen: is the freezing skipped when nothing matches (a return before it)?") if not want else ""
                    raise CheckFailed(f"{what}: after it, {', '.join(still[:3])}{more} still train: only the adapters' "
                                      "lora_A and lora_B may. Freeze every parameter of the model (requires_grad_(False)), "
                                      f"then wrap.{none}")
                raise CheckFailed(f"{what}: the adapters {', '.join(stuck[:4])} do not train (requires_grad is False): they were "
                                  "frozen after wrapping. Freeze the model first, then wrap: a new LoRALinear's A and B train.")
            raise_caught(what + ", then the model's forward", run)
            expected_model = wrap_known_good(_model(case), want, r, alpha, seed).double()
            with torch.no_grad():
                expected = expected_model(_ids(case))
            out = run.get("out")
            if not isinstance(out, torch.Tensor) or out.shape != expected.shape or not close(expected, out, 1e-9, 1e-9):
                if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
                    raise CheckFailed(f"{what}: the adapted model returned {describe(out)}, expected shape {tuple(expected.shape)}.")
                raise CheckFailed(explain_mismatch(expected, out, what=f"{what}: the adapted model's logits", atol=1e-9,
                                                   rtol=1e-9, dtype=torch.float64))
        return ("add_lora: exactly the targeted maps wrapped around the model's own layers, with r and alpha passed on; "
                "only the adapters train; the names returned; the adapted model's logits match the reference.")

    return judge


check_add_lora, check_add_lora_hidden = visible_and_hidden("check_add_lora", _probe_add, _judge_add, ADD_CASES,
                                                           ADD_HIDDEN_CASES)

# ---------------------------------------------------------------------------------------------
# merge_lora(model) -> the model, each LoRALinear replaced by a plain nn.Linear


def _adapted(case) -> tuple[nn.Module, list[str]]:
    seed, V, C, nh, hs, L, H, T, targets, r, alpha, bias = case
    model = _model(case).double()
    names = _targeted(model, targets)
    return wrap_known_good(model, names, r, alpha, seed), names


def _probe_merge(cases):
    def probe(merge_lora) -> dict:
        expect_callable(merge_lora, "merge_lora")
        found = []
        for case in cases:
            model, names = _adapted(case)
            seed, V, C, nh, hs, L, H, T, targets, r, alpha, bias = case
            before = {n: model.get_submodule(n).base.weight.detach().clone() for n in names}
            try:
                with case_sizes({"r": r, "C": C, "nh*hs": nh * hs}), known_good_lora(merge_lora), torch.no_grad():
                    result = merge_lora(model)
            except Exception as exc:  # noqa: BLE001 - the error is evidence
                found.append(caught(exc))
                continue
            kept = [n for n, m in model.named_modules() if isinstance(m, LoRALinear) and n in before]
            copied = isinstance(result, nn.Module) and result is not model and not any(  # merged, but on another model
                isinstance(m, LoRALinear) or hasattr(m, "lora_A") for m in result.modules())
            run = {"same_model": result is model, "returned": describe(result), "dotted": _dotted(model), "copied": copied,
                   "merged_in_place": [n for n in kept if not torch.equal(before[n], model.get_submodule(n).base.weight)],
                   "left": [n for n, m in model.named_modules() if isinstance(m, LoRALinear) or hasattr(m, "lora_A")],
                   "params": {n: list(p.shape) for n, p in model.named_parameters()},
                   "kinds": {n: type(m).__name__ for n, m in model.named_modules() if n in names}, "layers": {}}
            for name in names:
                module = model.get_submodule(name)
                weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
                run["layers"][name] = {"weight": weight.detach().clone() if isinstance(weight, torch.Tensor) else None,
                                       "bias": bias.detach().clone() if isinstance(bias, torch.Tensor) else None}
            try:
                with torch.no_grad():
                    run["out"] = model(_ids(case))
            except Exception as exc:  # noqa: BLE001
                run.update(caught(exc))
            found.append(run)
        return {"runs": found}

    return probe


def _judge_merge(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, V, C, nh, hs, L, H, T, targets, r, alpha, bias = case
            what = f"merge_lora on a TransformerLM of {L} layer{'s' * (L > 1)} with LoRA adapters (r={r}, alpha={alpha:g}) on {targets}"
            raise_caught(what, run if "left" not in run else {}, hints=MERGE_HINTS)
            adapted, names = _adapted(case)
            plain = {n: list(p.shape) for n, p in _model(case).named_parameters()}
            with torch.no_grad():
                expected = adapted(_ids(case))
            _refuse_dotted(what, need(run.get("dotted", []), list), "the adapters are still in place")
            left = need(run.get("left"), list)
            if left:
                none = sorted(map(str, left)) == sorted(names)
                merged = need(run.get("merged_in_place", []), list)
                if merged:
                    found = (f" Their base layers' weights did change ({', '.join(map(str, merged[:2]))}): the merge was "
                             "computed, but each adapter still sits in its place and still adds its update.")
                elif run.get("copied") is True:
                    found = (" It returned another model object, in which no adapter is left: the merge was done on a "
                             "copy, and the model it was given keeps its adapters. Merge in place: replace the adapters "
                             "of the model given (setattr on their parents), then return that model.")
                else:
                    found = (f" None of the {len(names)} was replaced or changed, and each sits {names[0].count('.') + 1} "
                             "modules deep (layers.i.attention...): does your search reach every depth? named_modules() "
                             "does; named_children() sees the first level only." if none and all(n.count(".") >= 2 for n in names)
                             else "")
                raise CheckFailed(f"{what}: {', '.join(map(str, left[:3]))} {'are' if len(left) > 1 else 'is'} still a LoRALinear "
                                  "afterwards: each should be replaced by a plain nn.Linear on its parent module (setattr), "
                                  f"whose weight is W + (alpha / r) B @ A.{found}")
            kinds = need(run.get("kinds"), dict)
            odd = {n: k for n, k in kinds.items() if k != "Linear"}
            if odd:
                raise CheckFailed(f"{what}: after it, {', '.join(f'{n} is a {k}' for n, k in odd.items())}: each should be an nn.Linear.")
            params = need(run.get("params"), dict)
            if params != plain:
                missing, extra = sorted(set(plain) - set(params)), sorted(set(params) - set(plain))
                raise CheckFailed(f"{what}: the merged model should have exactly the plain model's parameters (the same names "
                                  f"and shapes, so that its state_dict loads into a TransformerLM); missing: "
                                  f"{', '.join(missing[:4]) or 'none'}, extra: {', '.join(extra[:4]) or 'none'}, other shapes: "
                                  f"{', '.join(n for n in plain if n in params and params[n] != plain[n]) or 'none'}.")
            layers = need(run.get("layers"), dict)
            for name in names:
                lora = adapted.get_submodule(name)
                want_w = lora.base.weight + lora.scale * (lora.lora_B @ lora.lora_A)
                got = need(layers.get(name), dict)
                w = got.get("weight")
                if not isinstance(w, torch.Tensor) or w.shape != want_w.shape:
                    raise CheckFailed(f"{what}: {name}.weight is {describe(w)}, expected shape {tuple(want_w.shape)}.")
                if w.dtype != want_w.dtype:
                    raise CheckFailed(f"{what}: {name}.weight is {str(w.dtype)[6:]} while the adapted model is "
                                      f"{str(want_w.dtype)[6:]}: a new nn.Linear is built in PyTorch's default dtype; build "
                                      "it in the base weight's dtype and on its device (or reuse the base layer).")
                if not close(want_w.detach(), w, 1e-10, 1e-10):
                    label = identify(w, weight_variants(lora.base.weight.detach(), lora.lora_A.detach(), lora.lora_B.detach(),
                                                        r, alpha), 1e-10, 1e-10)
                    evidence = first_mismatch(want_w.detach(), w, 1e-10, 1e-10)
                    raise CheckFailed(f"{what}: {name}.weight should be W + (alpha / r) B @ A" +
                                      (f"; {label}" if label else "") + f". Evidence: {evidence}.")
                if bias:
                    b = got.get("bias")
                    if not isinstance(b, torch.Tensor) or not close(lora.base.bias.detach(), b, 1e-12, 1e-12):
                        raise CheckFailed(f"{what}: {name}.bias is not the base layer's bias ({describe(b)}): a new "
                                          "nn.Linear starts with a random bias of its own; keep the base's.")
            if run.get("same_model") is not True:
                raise CheckFailed(f"{what} should return the model it merged (the same object); it returned {run.get('returned')}.")
            raise_caught(what + ", then the model's forward", run)
            out = run.get("out")
            if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
                raise CheckFailed(f"{what}: the merged model returned {describe(out)}, expected shape {tuple(expected.shape)}.")
            if not close(expected, out, 1e-9, 1e-9):
                raise CheckFailed(explain_mismatch(expected, out, what=f"{what}: the merged model's logits (against the adapted "
                                                   "model's)", atol=1e-9, rtol=1e-9, dtype=torch.float64))
        return ("merge_lora: every LoRALinear replaced by an nn.Linear holding W + (alpha / r) B @ A and the base's bias; "
                "the plain model's parameter names; the merged model's logits equal the adapted model's.")

    return judge


check_merge_lora, check_merge_lora_hidden = visible_and_hidden("check_merge_lora", _probe_merge, _judge_merge, MERGE_CASES,
                                                               MERGE_HIDDEN_CASES)
