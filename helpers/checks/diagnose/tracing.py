"""The intermediate values of a module: every sub-module's output (``trace``), the sub-modules whose
output forward drops (``unused_outputs`` / ``unused_told``), the first value that departs from the
reference's (``first_divergence``) and a whole output off by one of them (``difference_from``)."""

from __future__ import annotations

import torch

from helpers.checks.diagnose.words import _num
from helpers.checks.evidence import first_mismatch


def trace(module: torch.nn.Module, *inputs, with_inputs: bool = False, **kwargs) -> dict[str, torch.Tensor]:
    """Probe side: run ``module(*inputs)`` under ``torch.no_grad`` and return the output of every
    named submodule that returned a tensor, detached, in the order the calls finished (the first
    call of each submodule only). ``with_inputs``: also each submodule's first tensor argument,
    as ``"<name> (input)"``, in the order the calls started."""
    seen: dict[str, torch.Tensor] = {}
    handles = []

    def before_for(name):
        def before(mod, args):
            key = f"{name} (input)"
            if key not in seen and args and isinstance(args[0], torch.Tensor):
                seen[key] = args[0].detach().clone()
        return before

    def after_for(name):
        def after(mod, args, output):
            if name not in seen and isinstance(output, torch.Tensor):
                seen[name] = output.detach().clone()
        return after

    try:
        for name, sub in module.named_modules():
            if name:
                if with_inputs:
                    handles.append(sub.register_forward_pre_hook(before_for(name)))
                handles.append(sub.register_forward_hook(after_for(name)))
        with torch.no_grad():
            module(*inputs, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def unused_outputs(module: torch.nn.Module, *inputs, limit: int = 48, depth: int = 8) -> list[str]:
    """Probe side: the named submodules (at most ``limit``, at most ``depth`` names deep) whose output
    ``module``'s forward does not use: the submodule is called and returns a tensor, but a fixed
    pseudo-random change to what it returns (in every call) leaves ``module(*inputs)`` exactly as
    it was. Only the outermost of nested names is listed."""
    with torch.no_grad():
        base = module(*inputs)
    if not isinstance(base, torch.Tensor):
        return []
    names = [n for n in trace(module, *inputs) if n.count(".") < depth][:limit]  # one forward pass each
    unused: list[str] = []
    for seed, name in enumerate(sorted(names, key=lambda n: n.count("."))):
        sub = module.get_submodule(name)
        if any(name.startswith(f"{outer}.") for outer in unused):
            continue
        called = []

        def bump(mod, args, output, seed=seed, called=called):
            if isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel():
                called.append(True)
                g = torch.Generator().manual_seed(1000 + seed)
                noise = torch.randn(output.shape, generator=g, dtype=torch.float64).to(output.dtype)
                return output + noise * (1 + output.detach().abs().mean())
            return None

        handle = sub.register_forward_hook(bump)
        try:
            with torch.no_grad():
                out = module(*inputs)
        except Exception:  # noqa: BLE001 - a forward that cannot take the change uses the output
            continue
        finally:
            handle.remove()
        if called and isinstance(out, torch.Tensor) and out.shape == base.shape and torch.equal(out, base):
            unused.append(name)
    return unused


def unused_told(ignored, reference: torch.nn.Module, inputs: tuple) -> str | None:
    """Judge side: the submodules whose output the student's forward ignores (``unused_outputs``'s
    list) while the reference's output depends on them, in words; None when there is none."""
    if not isinstance(ignored, list) or not ignored:
        return None
    theirs = set(unused_outputs(reference, *inputs))
    called = trace(reference, *inputs)
    names = [n for n in ignored if isinstance(n, str) and n in called and n not in theirs]
    if not names:
        return None
    labels = [f"{n} ({_gloss(n)})" if _gloss(n) else n for n in names[:3]]
    listed = " and ".join(labels) if len(labels) < 3 else ", ".join(labels[:-1]) + f" and {labels[-1]}"
    return (
        f"it calls {listed} but never uses what {'it returns' if len(names) == 1 else 'they return'}: "
        "changing that output leaves your module's output exactly as it was, while the reference's output "
        "depends on it. Another tensor stands where that output belongs (a variable used twice, or the "
        "wrong one of two similar names)"
    )


_GLOSS = {
    "attn": "the attention", "attention": "the attention", "self_attention": "the attention",
    "sa": "the attention", "mlp": "the MLP", "ffwd": "the MLP", "feed_forward": "the MLP",
    "query": "the query projection", "key": "the key projection", "value": "the value projection",
    "to_output": "the attention's output projection", "proj": "the output projection",
    "ln": "the LayerNorm", "ln1": "the first LayerNorm", "ln2": "the second LayerNorm",
    "ln_f": "the final LayerNorm", "norm_before_attn": "the norm before the attention",
    "norm_before_mlp": "the norm before the MLP", "lm_head": "the output layer (logits)",
    "token_embedding": "the token embedding", "tok_emb": "the token embedding",
    "position_embedding": "the position embedding", "pos_emb": "the position embedding",
    "heads": "the heads",
}
_CONTAINERS = {"blocks": "block", "layers": "layer", "heads": "head", "h": "block"}


def _gloss(name: str) -> str:
    parts = name.split(".")
    words = []
    i = 0
    head = None
    while i < len(parts):
        part = parts[i]
        if part in _CONTAINERS and i + 1 < len(parts) and parts[i + 1].isdigit():
            words.append(f"{_CONTAINERS[part]} {parts[i + 1]}")
            i += 2
            continue
        if i == len(parts) - 1:
            head = _GLOSS.get(part)
            if part.isdigit() and i > 0:
                head = None
        i += 1
    if head is None:
        return ""
    return head + "".join(f" of {w}" for w in reversed(words))


def _as_multiple(diff: torch.Tensor, candidates: dict[str, torch.Tensor], atol: float, rtol: float) -> str | None:
    """'1 × the output of attention' when ``diff`` is a constant multiple of one candidate."""
    d = diff.double()
    if not torch.isfinite(d).all():
        return None
    # the outermost name first: mlp's output before mlp.model.2's, which is the same tensor
    for name, cand in sorted(candidates.items(), key=lambda item: item[0].count(".")):
        if not isinstance(cand, torch.Tensor) or cand.shape != d.shape:
            continue
        t = cand.double()
        tt = float((t * t).sum())
        if tt == 0 or not torch.isfinite(t).all():
            continue
        k = float((t * d).sum()) / tt
        if abs(k) > 1e-6 and bool(torch.isclose(d, k * t, atol=atol, rtol=rtol).all()):
            size = "" if abs(abs(k) - 1) < 1e-9 else f"{_num(abs(k))} × "
            square = (1 + k) ** 2  # 1 + k = sqrt(n): a term scaled by a square root where it is added as it is
            root = (f" (1 + {_num(k)} = sqrt({round(square)}): {name} is scaled by a square root, e.g. sqrt(C), where "
                    "the reference adds it as it is)") if k > 0 and round(square) >= 2 and abs(square - round(square)) < 1e-3 * square \
                and abs((1 + k) - round(1 + k)) > 1e-3 else ""
            lost = (" (is that output missing from the sum: its residual added to a variable that is not passed "
                    "on, or not added at all?)"
                    if abs(k + 1) < 1e-9 and name.startswith("the output of ") else "")
            return f"{'minus ' if k < 0 else ''}{size}{name}{root}{lost}"
    return None


def _residual_around(extra: str | None, want: torch.Tensor, earlier: dict, atol: float, rtol: float) -> str:
    """When a sub-module's input is the reference's plus the input of the sub-module called just
    before, whose output the reference passes on: a residual connection added around that one."""
    if not extra or not extra.startswith("the input of "):
        return ""
    around = extra.removeprefix("the input of ")
    output = earlier.get(f"the output of {around}")
    if not isinstance(output, torch.Tensor) or output.shape != want.shape or not torch.isclose(
            output.double(), want.double(), atol=atol, rtol=rtol, equal_nan=True).all():
        return ""
    name = around.split(" (")[0]
    return (f" That is {name}'s output added to its own input, x + {name}(x): a residual connection around {name} "
            f"that the reference does not have (where the reference passes on {name}(x) alone, {name} adds its own "
            "residual inside).")


def _traced(key: str) -> tuple[bool, str, str, str]:
    """A trace key in words: whether it is an input, the submodule's name, its label (the name and
    what it is), and the value ('the output of layers.0 (block 0)')."""
    is_input, name = key.endswith(" (input)"), key.removesuffix(" (input)")
    gloss = _gloss(name)
    label = f"{name} ({gloss})" if gloss else name
    return is_input, name, label, f"the input of {label}" if is_input else f"the output of {label}"


def _applied(have: torch.Tensor, want: torch.Tensor, modules: dict, atol: float, rtol: float) -> str:
    """When the departing value is one of the reference's sub-modules applied to the reference's value
    (or the reference's value is one applied to the student's), that relation in words: verified by
    running the sub-module, never guessed."""
    def same(a, b) -> bool:
        return isinstance(a, torch.Tensor) and a.shape == b.shape and bool(
            torch.isclose(a.double(), b.double(), atol=atol, rtol=rtol).all())

    for name, module in (modules or {}).items():
        for given, result, words in (
            (want, have, f" It is exactly {name} applied to the reference's value (run here to check): {name} is "
                         "applied at this point, where the reference does not apply it. Was it moved here from its "
                         "place, or applied twice?"),
            (have, want, f" It is the reference's value before {name} (the reference's value is exactly {name} of "
                         f"yours, run here to check): {name} was not applied at this point. Was it moved, or left out?"),
        ):
            try:
                with torch.no_grad():
                    out = module(given.to(next(module.parameters(), given).dtype))
            except Exception:  # noqa: BLE001 - a sub-module that does not take this value
                continue
            if same(out, result):
                return words
    return ""


def first_divergence(
    student_trace: dict[str, torch.Tensor], reference_trace: dict[str, torch.Tensor], atol: float, rtol: float,
    known: dict[str, torch.Tensor] | None = None, modules: dict | None = None,
) -> str | None:
    """Judge side: the first value, in the reference's order, that departs from the reference's
    (a submodule's output, or its input when ``trace`` recorded inputs); ``None`` when every value
    the reference recorded matches. ``known``: other values of the reference's forward pass by
    name (its input, say): when the departure is exactly a multiple of one of them, or of a value
    recorded before it, the message says so. ``modules``: the reference's sub-modules by name: when the
    departure is one of them applied to the reference's value (or undone), the message says so."""
    if not isinstance(student_trace, dict) or not isinstance(reference_trace, dict):
        return None
    earlier = dict(known or {})
    for key, want in reference_trace.items():
        is_input, name, label, value = _traced(key)
        before = (
            "every submodule's output before it matches, so the wrong step is in the code between "
            "those calls" if is_input else "everything before it matches"
        )
        have = student_trace.get(key)
        if not isinstance(have, torch.Tensor):
            return (
                f"the reference calls {label}, but in your module {name} was never called with a tensor "
                f"(it has another name, or its weight is used directly, as in a fused product, so no value can be "
                f"compared from {name} on); everything before it matches."
            )
        if tuple(have.shape) != tuple(want.shape):
            return (
                f"the first value that departs from the reference is {value}: shape {tuple(have.shape)}, "
                f"expected {tuple(want.shape)}; {before}."
            )
        if not bool(torch.isclose(have.double(), want.double(), atol=atol, rtol=rtol, equal_nan=True).all()):
            extra = _as_multiple(have.double() - want.double(), earlier, atol, rtol)
            exactly = f" It is the reference's value {'' if extra.startswith('minus') else 'plus '}{extra}." if extra else ""
            exactly += _residual_around(extra, want, earlier, atol, rtol) if is_input else ""
            exactly = exactly or _applied(have, want, modules, atol, rtol)
            return (
                f"the first value that departs from the reference is {value}; {before}.{exactly} Evidence: "
                f"{first_mismatch(want, have, atol, rtol)}."
            )
        earlier.setdefault(value, want)
    return None


def difference_from(got: torch.Tensor, expected: torch.Tensor, reference_trace: dict[str, torch.Tensor],
                    atol: float, rtol: float, known: dict[str, torch.Tensor] | None = None) -> str | None:
    """When the whole output departs from the reference's by a multiple of one value the
    reference computed on the way ('plus minus 0.5 × the output of mlp'), that value; else None."""
    candidates = dict(known or {})
    for key, value in reference_trace.items():
        candidates.setdefault(_traced(key)[3], value)
    return _as_multiple(got.double() - expected.double(), candidates, atol, rtol)
