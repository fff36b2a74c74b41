"""The judge's verdict on a module's output, shared by every check of a layer or a model.

The probe runs the student's module with ``run_module``: the output, the same input again
(deterministic?), each batch element alone (does it mix the batch?) and ``trace``'s record of
every sub-module's input and output. With a later token changed at a time (``leaks``), it also
shows whether an earlier output moves. The judge then calls ``judge_output``, which says, in this
order, what holds before any verdict on the values (shape, dtype, determinism, the batch), a leak
from the future, a catalogued mistake (``variants``: {message: the output that mistake computes}),
and last what the output establishes with where inside the module the first value departs from the
reference's (``inside``).
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from helpers.checks.core import CheckFailed, close, first_mismatch, identify, need
from helpers.checks.diagnose import (
    diagnose,
    difference_from,
    explain_mismatch,
    first_divergence,
    outside_told,
    precision_lost,
    trace,
    unused_outputs,
    unused_told,
)
from helpers.checks.errors import attempt, outcome
from helpers.checks.invariants import gradient_cut

#: what diagnose establishes that is worth less than a catalogued mistake or the inside view
WEAK = ("generic", "rule_localised")


def tolerance(dtype: torch.dtype) -> float:
    """The tolerance of a module's output computed in ``dtype``, against the float64 reference."""
    return 1e-9 if dtype == torch.float64 else 1e-4


def run_module(module, x: torch.Tensor, sizes: dict, batched: bool) -> dict:
    """Probe side: the module's output on x (``attempt``'s record), on x again, on each batch element
    alone when ``batched``, every sub-module's input and output on the way (``steps``) and the
    sub-modules whose output forward ignores (``ignored``)."""
    modes = {n: m.training for n, m in module.named_modules()}
    called: set[str] = set()
    hooks = [m.register_forward_pre_hook(lambda *_, n=n: called.add(n)) for n, m in module.named_children()]
    try:
        run = attempt(module, x, sizes=sizes)
    finally:
        for hook in hooks:
            hook.remove()
    run["mode_changed"], run["came_in_training"] = mode_changed(module, modes), modes[""]
    run["uncalled"] = _unused_children(module, x, [n for n, m in module.named_children()
                                                   if n not in called and any(True for _ in m.parameters())])
    if "out" in run:
        run["again"] = attempt(module, x.clone(), sizes=sizes).get("out")
        if batched:
            run["alone"] = [attempt(module, x[b:b + 1].clone(), sizes=sizes).get("out") for b in range(x.shape[0])]
        run["steps"] = attempt(lambda v: trace(module, v, with_inputs=True), x.clone(), sizes=sizes).get("out")
        run["ignored"] = attempt(lambda v: unused_outputs(module, v), x.clone(), sizes=sizes).get("out")
        run["grads"] = gradients(module, x)
    return run


def _unused_children(module, x: torch.Tensor, names: list[str]) -> list[str]:
    """Of the children ``names`` (never called by forward), those whose weights get no gradient from the
    output either (not used another way, such as F.linear(x, self.down.weight)), at most three."""
    if not names:
        return []
    try:
        with torch.enable_grad():
            out = module(x.clone())
            params = [p for n in names for p in module.get_submodule(n).parameters()]
            grads = torch.autograd.grad(out.double().sum(), params, allow_unused=True) if out.requires_grad else [None] * len(params)
    except Exception:  # noqa: BLE001 - what cannot be established is not said
        return []
    unused, k = [], 0
    for n in names:
        count = sum(1 for _ in module.get_submodule(n).parameters())
        if all(g is None or not g.any() for g in grads[k:k + count]):
            unused.append(f"self.{n} ({type(module.get_submodule(n)).__name__})")
        k += count
    return unused[:3]


def mode_changed(module, modes: dict[str, bool]) -> list[str]:
    """The sub-modules whose training flag a call changed (``modes``: the flags before it), at most four."""
    return [n or "the module itself" for n, m in module.named_modules() if n in modes and m.training != modes[n]][:4]


def mode_told(what: str, changed: list[str], came_in_training: bool) -> str:
    """The message for a call that changed its module's mode (``mode_changed``; ``came_in_training``: the
    module's own flag before the call)."""
    came, left = ("training", "evaluation") if came_in_training else ("evaluation", "training")
    return (f"{what}: the output is right, but a call made in {came} mode (set on every layer by "
            f"model.{'train' if came_in_training else 'eval'}()) "
            f"left {', '.join(changed)} in {left} mode: forward changes the mode of the caller's model (dropout reads "
            "it). Is there an .eval() or .train() in forward? The mode is the caller's to set.")


INPUT_GRAD = "(input)"


def gradients(module, x: torch.Tensor) -> dict | str | None:
    """Probe side: the gradient of a fixed weighting of ``module(x)`` with respect to every parameter
    (None where none arrives) and, for a float input, to ``x`` itself (``INPUT_GRAD``). The error's
    text when the backward pass raises; None when the forward pass raises or returns no tensor (the
    output's own checks say what is wrong then)."""
    try:
        with torch.enable_grad():
            x = x.detach().clone().requires_grad_(x.is_floating_point())
            out = module(x)
            if not isinstance(out, torch.Tensor) or not out.is_floating_point():
                return None
            named = list(module.named_parameters()) + ([(INPUT_GRAD, x)] if x.requires_grad else [])
            if not out.requires_grad:
                return {name: None for name, _ in named}
            weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(out.dtype)
    except Exception:  # noqa: BLE001
        return None
    try:
        with torch.enable_grad():
            found = torch.autograd.grad((out * weight).sum(), [t for _, t in named], allow_unused=True)
    except Exception as exc:  # noqa: BLE001 - an in-place change of what autograd saved, say
        return f"{type(exc).__name__}: {exc}"[:500]
    grads = {name: None if g is None else g.detach() for (name, _), g in zip(named, found, strict=True)}
    padding = {name: int(m.padding_idx) for name, m in module.named_modules()
               if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None}
    return {**grads, PADDING: padding} if padding else grads


#: the key under which ``gradients`` names the embeddings built with a padding_idx (module name -> row)
PADDING = "(padding_idx)"


def judge_gradients(grads, reference, x: torch.Tensor, what: str, dtype: torch.dtype, hint: str = "") -> None:
    """Judge side, once the output is right: every gradient the reference's output sends back must
    arrive in the student's module too, with the same values; fail naming the first that does not.
    ``hint``: what, in this exercise, most often cuts the gradient."""
    if isinstance(grads, str):
        raise CheckFailed(f"{what}: the output is right, but backpropagating through it raised {grads}. A layer must "
                          "be differentiable: torch operations on tensors (no .item(), no numpy, no in-place change "
                          f"of a tensor autograd saved).{hint}")
    if not isinstance(grads, dict):
        return
    ours = gradients(reference, x)
    tol = 1e-7 if dtype == torch.float64 else 1e-3
    for name, want in (ours if isinstance(ours, dict) else {}).items():
        if not isinstance(want, torch.Tensor) or not bool(want.abs().gt(0).any()):
            continue
        have = grads.get(name)
        where = "the input x" if name == INPUT_GRAD else name
        if not isinstance(have, torch.Tensor) or have.shape != want.shape:
            problem = f"no gradient reaches {where}" + (" (so nothing before this module would learn)"
                                                        if name == INPUT_GRAD else "")
        elif not close(want, have, tol, tol):
            problem = f"the gradient that reaches {where} is wrong ({first_mismatch(want, have, tol, tol)})"
            padded = _padding_told(grads, reference, x, name, tol)
            if padded:
                raise CheckFailed(f"{what}: the output is right, but {problem}: {padded}")
        else:
            continue
        raise CheckFailed(gradient_cut(what, problem, hint))


def _padding_told(grads: dict, reference, x: torch.Tensor, name: str, tol: float) -> str | None:
    """Why the gradient of ``name`` is wrong, when the student's module built its embedding with a
    padding_idx and the reference given the same padding_idx sends back exactly the student's
    gradients (verified, not guessed); None otherwise."""
    padding = grads.get(PADDING)
    for module_name, row in (padding.items() if isinstance(padding, dict) else ()):
        if f"{module_name}.weight" != name or not isinstance(row, int) or isinstance(row, bool):
            continue
        changed = copy.deepcopy(reference)
        embedding = changed.get_submodule(module_name) if module_name else changed
        if not isinstance(embedding, torch.nn.Embedding) or not -embedding.num_embeddings <= row < embedding.num_embeddings:
            continue
        embedding.padding_idx = row % embedding.num_embeddings
        theirs = gradients(changed, x)
        if isinstance(theirs, dict) and all(
                want is None or (isinstance(grads.get(n), torch.Tensor) and grads[n].shape == want.shape
                                 and close(want, grads[n], tol, tol))
                for n, want in theirs.items() if n != PADDING):
            return (f"{module_name} was built with padding_idx={row}, and the reference built that way sends back "
                    f"exactly your gradients: nn.Embedding(..., padding_idx={row}) gives row {row} no gradient from "
                    "the lookup, so that token's embedding never trains. The course's tokens have no padding token: "
                    "build the embedding without padding_idx.")
    return None


def load_weights(module, weights: dict[str, torch.Tensor], what: str, layout: str = "keep the constructor as given") -> None:
    """Probe side: copy the check's weights into the student's module, whose parameters must have
    exactly these names and shapes (``layout``: what the given constructor builds)."""
    names = sorted(name for name, _ in module.named_parameters())
    if names != sorted(weights):
        raise CheckFailed(f"{what}: its parameters are not the expected ones: {names_told(sorted(weights), names)}."
                          f"{unregistered(module)} It should have exactly {', '.join(sorted(weights))} ({layout}); "
                          f"it has {', '.join(names) or 'none'}.")
    with torch.no_grad():
        for name, param in module.named_parameters():
            if tuple(param.shape) != tuple(weights[name].shape):
                linear = " (nn.Linear(in, out) stores a weight of shape (out, in))" if param.dim() == 2 else ""
                raise CheckFailed(f"{what}: {name} has shape {tuple(param.shape)}, expected "
                                  f"{tuple(weights[name].shape)}{linear}; {layout}.")
            param.copy_(weights[name])


def names_told(want, have) -> str:
    """Two lists of parameter names, told by what differs: the missing and the unexpected ones."""
    missing, extra = [n for n in want if n not in set(have)], [n for n in have if n not in set(want)]
    parts = [f"missing {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}" if missing else "",
             f"not expected {', '.join(extra[:6])}{' ...' if len(extra) > 6 else ''}" if extra else ""]
    return "; ".join(p for p in parts if p)


def shared_modules(module) -> str:
    """Sub-modules registered under several names, in words: one object in two places (``[block] * n``,
    ``self.a = self.b = nn.Linear(...)``) is listed once by ``named_parameters``, and every place
    computes with the same weights."""
    places: dict[int, list[str]] = {}
    for name, sub in module.named_modules(remove_duplicate=False):
        if name:
            places.setdefault(id(sub), []).append(name)
    groups = [names for names in places.values() if len(names) > 1]
    groups = [g for g in groups if not any(other is not g and all(  # the outermost shared module only
        any(n.startswith(f"{o}.") for o in other) for n in g) for other in groups)]
    if not groups:
        return ""
    def joined(names: list[str]) -> str:
        return (", ".join(names[:-1]) + " and " + names[-1]) if len(names) <= 4 else f"{', '.join(names[:3])} ... {names[-1]}"

    told = "; and ".join(joined(g) for g in groups[:2])
    return (f" One and the same module object is registered under several names: {told} (a list made with [module] * n, "
            "or one module assigned to two attributes). PyTorch lists its parameters once, and every place computes with the "
            "same weights. Build a new module for each place (a list comprehension calls the constructor each time).")


def unregistered(module) -> str:
    """What the module keeps where PyTorch does not look, in words: sub-modules in a plain list,
    tuple or dict attribute, float tensors that are plain attributes instead of Parameters, and
    sub-modules registered under several names (:func:`shared_modules`)."""
    lists, tensors = [], []
    for prefix, owner in module.named_modules():
        for attr, value in vars(owner).items():
            if attr.startswith("_"):  # PyTorch's own bookkeeping (_modules, _parameters ...)
                continue
            name = (f"{prefix}." if prefix else "") + attr
            items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
            if any(isinstance(item, torch.nn.Module) for item in items):
                lists.append(f"{name} (a Python {type(value).__name__})")
            elif isinstance(value, torch.Tensor) and value.is_floating_point():
                tensors.append(f"{name} {tuple(value.shape)}")
    told = ""
    if lists:
        told += (f" {', '.join(lists[:3])} holds modules that PyTorch does not register: their parameters are not "
                 "the module's (nor moved by .to(), nor trained). Keep them in nn.ModuleList (or nn.ModuleDict).")
    if tensors:
        one = len(tensors) == 1
        told += (f" {', '.join(tensors[:3])} {'is a plain tensor, not a parameter' if one else 'are plain tensors, not parameters'}"
                 f": the optimizer never sees {'it' if one else 'them'}. Wrap {'it' if one else 'each'}: "
                 "nn.Parameter(torch.ones(C)).")
    return told + shared_modules(module)


def settled(out, expected: torch.Tensor, diagnosis: dict, dtype_too: bool = False) -> tuple[str, str]:
    """What must hold before any verdict on the values: the shape (and the dtype), determinism, the
    batch. Returns ``diagnose``'s ``(rule, message)`` when they hold; raises otherwise."""
    wrong_type = dtype_too and isinstance(out, torch.Tensor) and out.dtype != diagnosis["dtype"]
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape or wrong_type:
        raise CheckFailed(explain_mismatch(expected, out, **diagnosis))
    again, tol = diagnosis.get("again"), diagnosis["atol"]
    if isinstance(again, torch.Tensor) and again.shape == out.shape and not close(out, again, tol, tol):
        raise CheckFailed(explain_mismatch(expected, out, **diagnosis))  # not deterministic
    rule, message = diagnose(expected, out, **diagnosis)
    if rule == "rule_batch":
        raise CheckFailed(message)
    return rule, message


def first_leak(out: torch.Tensor, leaks, tol: float, what: str, noun: str = "the output",
               tail: str = ", an earlier one") -> str | None:
    """The first earlier output that changing a later token moves, in words, or None. ``leaks[j - 1]``
    is the output with only token ``j`` changed (along the second-to-last axis of ``out``); ``tail``
    may name the query ``{i}`` and the key ``{j}``."""
    for j, changed in enumerate(need(leaks, list, out.shape[-2] - 1), start=1):
        if not isinstance(changed, torch.Tensor) or changed.shape != out.shape:
            raise CheckFailed(f"{what}: changing token {j} made forward {outcome(changed)}, not a tensor of shape "
                              f"{tuple(out.shape)}.")
        moved = ~torch.isclose(changed[..., :j, :].double(), out[..., :j, :].double(), atol=tol, rtol=tol, equal_nan=True)
        if moved.any():
            where = moved.nonzero()[0]
            i = int(where[-2])
            row = f" (sequence {int(where[0])})" if out.dim() > 2 else ""
            return f"changing only token {j} changed {noun} at position {i}{row}" + tail.format(i=i, j=j)
    return None


def _single_steps(reference) -> dict:
    """The reference's sub-modules that map a value to one of the same kind (a norm, a block, an MLP),
    by name: those a departing value may have been sent through once too often, or once too few."""
    if not isinstance(reference, torch.nn.Module):
        return {}
    return {name: m for name, m in reference.named_modules()
            if name and not isinstance(m, (torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.Embedding))}


def inside(run: dict, expected, out, reference, inputs: tuple, tol: float, *, known=None, part: str = "sub-module",
           note: str = "") -> str:
    """Where inside the module the first value departs from ``reference``'s on ``inputs``; when
    none does, that the difference comes from forward's own arithmetic, and by how much."""
    ours = trace(reference, *inputs, with_inputs=True)
    found = first_divergence(run.get("steps"), ours, tol, tol, known=known, modules=_single_steps(reference))
    ignored = unused_told(run.get("ignored"), reference, inputs) if found is None else None
    if ignored:
        found = (f"every {part} received and returned exactly what the reference's did; the mistake is in how "
                 f"forward uses them: {ignored}.")
        note = f"{note} Evidence: {first_mismatch(expected, out, tol, tol)}.".strip()
    elif found is None:  # every sub-module saw and returned the reference's values
        extra = difference_from(out, expected, ours, tol, tol, known=known)
        exactly = f" The output is the reference's {'' if extra.startswith('minus') else 'plus '}{extra}." if extra else ""
        found = (f"every {part} received and returned exactly what the reference's did"
                 + (" on its first call." if "calls" in note  # a note on a sub-module called more than once
                    else f", so the difference comes from forward's own arithmetic after the last {part} call.")
                 + exactly)
        note = f"{note} Evidence: {first_mismatch(expected, out, tol, tol)}.".strip()
    return f"{found} {note}".strip()


def judge_output(run: dict, expected: torch.Tensor, diagnosis: dict, *, variants: Callable[[], dict] = dict,
                 reference=None, inputs: tuple = (), known=None, noun: str = "the model", part: str = "sub-module",
                 leak: Callable[[], str | None] = lambda: None, leak_means: str = "", note: Callable[[], str] = str,
                 dtype_too: bool = False, gradient_hint: str = "") -> None:
    """Judge side: fail with the message for a wrong output ``run["out"]``, or return when it is right.

    ``diagnosis``: ``diagnose``'s keyword arguments (``what``, ``atol``, ``again``, ``alone``...);
    ``variants()``: the catalogued mistakes; ``reference(*inputs)`` computed ``expected``, and its
    trace is compared with the student's (``known``: other values of its forward pass, by name);
    ``leak()``: ``first_leak``'s finding (asked once the shape is known to be right), and ``leak_means``
    what it says of the module; ``dtype_too``: the output must also keep the input's dtype;
    ``gradient_hint``: ``judge_gradients``' hint, once the output is right."""
    try:
        _judge_output(run, expected, diagnosis, variants=variants, reference=reference, inputs=inputs, known=known,
                      noun=noun, part=part, leak=leak, leak_means=leak_means, note=note, dtype_too=dtype_too,
                      gradient_hint=gradient_hint)
    except CheckFailed as failure:
        uncalled = run.get("uncalled")
        if uncalled and "never called" not in str(failure):
            raise CheckFailed(f"{failure} Forward never called {', '.join(uncalled)}, which the module holds: its "
                              "weights take no part in the output. Is a line that calls it missing or commented out?") from None
        raise


def _judge_output(run: dict, expected: torch.Tensor, diagnosis: dict, *, variants, reference, inputs, known, noun, part,
                  leak, leak_means, note, dtype_too, gradient_hint) -> None:
    what, tol, out = diagnosis["what"], diagnosis["atol"], run.get("out")
    outside = outside_told(run.get("outside"))  # new weights at every call: the cause of what follows
    if outside and isinstance(out, torch.Tensor) and not (out.shape == expected.shape and close(expected, out, tol, tol)):
        same = out.shape == expected.shape
        raise CheckFailed(f"{what}: {outside}" + (f" Evidence: {first_mismatch(expected, out, tol, tol)}." if same else ""))
    rule, message = settled(out, expected, diagnosis, dtype_too)
    leaked = leak()
    if close(expected, out, tol, tol) and leaked is None:
        if reference is not None and inputs and "grads" in run:
            judge_gradients(run["grads"], reference, inputs[0], what, diagnosis["dtype"], gradient_hint)
        if run.get("mode_changed"):
            raise CheckFailed(mode_told(what, run["mode_changed"], run.get("came_in_training", True)))
        return
    if rule == "rule_nonfinite":
        leaked = None  # inf - inf and 0 * inf move with any token: not evidence of a leak
    with torch.no_grad():
        label = identify(out, variants(), tol, tol)
    if label:
        seen = f" ({leaked})" if leaked else ""
        raise CheckFailed(f"{what}: {label}{seen}. Evidence: {first_mismatch(expected, out, tol, tol)}.")
    if leaked:
        raise CheckFailed(f"{what}: {leaked}{leak_means}")
    steps = run.get("steps")
    if rule not in WEAK or reference is None or not isinstance(steps, dict) or not steps:
        raise CheckFailed(message)
    lost = precision_lost(expected, out, what, diagnosis["dtype"], tol,
                          lambda: _in_float32(reference, inputs))
    if lost:
        raise CheckFailed(lost)
    found = inside(run, expected, out, reference, inputs, tol, known=known, part=part, note=note())
    lead = f"{what} is wrong" if rule == "generic" else message.partition(" Evidence: ")[0].rstrip(".")
    raise CheckFailed(f"{lead}. Inside {noun}, {found}")


def _in_float32(reference, inputs: tuple) -> torch.Tensor:
    """The reference's own output computed in float32: the noise a float64 answer may carry."""
    with torch.no_grad():
        return copy.deepcopy(reference).float()(*(x.float() if x.is_floating_point() else x for x in inputs))
