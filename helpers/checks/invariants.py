"""The invariants every exercise of a kind gets, declared once here for the whole course.

A correct answer does more than return the right numbers on friendly inputs. What each kind of
exercise must also hold, and where it is checked:

* **a function of tensors** (``apply_causal_mask``, the sampling filters, ``cross_entropy``, ``gelu``,
  ``apply_rope``):
  - the caller's inputs untouched: every probe keeps a copy of what it passed and its judge
    compares (the "in place" messages of each check);
  - a gradient reaches every float input that gets one in the reference (a result cut from the
    graph trains nothing): :func:`input_gradients` on the probe's side, :func:`judge_input_gradients`
    on the judge's;
  - inputs with exact zeros, which a mask or a filter read from the values instead of the
    positions confuses with its own zeros: :func:`with_zeros`;
  - extreme magnitudes (:data:`FAR`) stay finite and accurate: a softmax without the maximum
    subtracted overflows, a variance taken as E[x²] − E[x]² cancels (the cases of top-p, LayerNorm,
    cross-entropy);
  - a second call with other sizes: the visible check calls the function on at least two shapes,
    and :func:`kept_between_calls` says what a later call finds that the first one left behind.
* **a module**: the same, through ``verdict`` (``gradients`` / ``judge_gradients``, the input kept,
  ``causal``'s second call on one token more); an attention module (lessons 03, 04, 09) gets one
  hidden case whose input has a position of exact zeros: :func:`with_zero_position`; a call leaves
  every sub-module's mode (training or evaluation) as the caller set it (``verdict.mode_changed``,
  which the speaker classifier's check uses too).
* **a function that changes a module in place** (a loader, ``modern_options``): the caller's model keeps
  its dtype (GPT-2's loader is handed a float32 checkpoint for a float64 model), and the parts it is
  not asked to change keep their weights (``modern_options``' check gives the block weights of its own
  first).
* **a function handed a generator** (``sample_next``; ``get_batch``'s check compares the states
  itself): the generator is its only randomness, so PyTorch's global generator is where it was
  after the call: :func:`rng_watch` on the probe's side, :func:`judge_rng` on the judge's; and
  handed none, it draws from the global generator as the caller seeded it: :func:`unseeded_calls`,
  :func:`judge_unseeded`. A generator is drawn from in the state it is in: ``get_batch`` gives
  other batches on later calls with one generator, ``generate_cached`` is handed one that has
  already given numbers, and greedy ``sample_next`` draws nothing from it.
* **a function that must not draw at all** (``estimate_loss``, a training step on a model without
  dropout): PyTorch's global generator is untouched (:func:`rng_watch` again); one that moves it is told
  whether it reseeds it (and the seed it set) or draws from it.
* **a training step**: it may be handed a model whose parameters already hold gradients (a
  backward() of the caller's, an accumulation): :func:`stale_gradients`; and a model in evaluation
  mode, which it must put in training mode, every layer of it (``training_replay.TinyLM`` records
  whether the flag was set on the model alone).
* **a model's randomness in training mode** (``TransformerLM``): dropout acts inside the blocks
  only, so the model with no layers gives the same logits in both modes.
* **names and kinds**: a layer of a subclass of nn.Linear is an nn.Linear (``param_groups``); a
  target names a layer's whole last name, not its end (``add_lora``); a model's layers are
  searched through the whole tree (both); a config's option read at run time is an equal string,
  not the same object (``modern_options``); a table is the same tensor, not equal values (``param_groups``
  gets an untied head that starts as a copy of the table); greedy ``sample_next`` is the argmax, the
  first of tied largest logits (a hidden row has a tie at the top).
* **what a function hands back and what it was handed** (lists and dicts, not only tensors):
  ``estimate_loss`` leaves the caller's splits dict as it was (no loss written into it); ``decode``
  leaves the caller's list of ids as it was (no pop); ``encode`` returns a new list at every call (a
  memo that hands out its own list is seen when the caller appends to what it got and encodes the
  same text again); GPT-2's and Llama's loaders leave the caller's checkpoint as they found it (no entry
  popped, replaced or transposed in place); the three use :func:`dict_changed`.
* **work done, step by step** (``generate_cached``): the positions each call to forward_cached
  computes are compared with the lesson's rule step by step, so the steps that ran more than the
  newest token are named with the text's length then, not "every step".
* **a call that raises after earlier calls ran** (cached attention): the earlier calls' outputs are
  compared first; when one of them was already wrong, the message says so instead of placing the
  error in the code that uses the cache.
* **axes regrouped in memory order** (a reshape or view where an axis was to move): a loss whose rows
  were regrouped (reshape(V, -1).T, reshape(B, V, T), a flatten after a permute: ``cross_entropy`` and
  the training step), heads split with one view (cached attention), RoPE's turned halves interleaved
  on the way back: each a variant that must reproduce the student's values before it is named.
* **sizes past the lesson's own**: a sequence longer than a table built for the lesson's sizes (the
  position embeddings), a list as long as a text (``count_pairs``): a value kept from trying the
  function out (a global, a slice) fails there, and ``code_notes_names`` says which name it read.
"""

from __future__ import annotations

import types
from contextlib import contextmanager

import torch

from helpers.checks.core import CheckFailed, close, first_mismatch

#: the size of "extreme" inputs: exp overflows far below it in float32 (88.7) and float64 (709.8),
#: and a float64 square of it, 1e8, keeps only about 1e-8 of absolute precision
FAR = 1e4

#: the seed PyTorch's global generator is set to while a call is watched (no course code uses it)
_WATCH_SEED = 20_240_917


# ---------------------------------------------------------------------------------------------
# Inputs


def with_zeros(x: torch.Tensor, generator: torch.Generator, share: float = 0.25) -> torch.Tensor:
    """``x`` with exact zeros (+0.0) at about ``share`` of its entries, the places drawn by ``generator``."""
    zero = torch.rand(x.shape, generator=generator) < share
    return x.masked_fill(zero, 0.0)


def with_zero_position(x: torch.Tensor, position: int = 1, last_sequence_only: bool = False) -> torch.Tensor:
    """``x`` (..., T, C) with every entry of one position exact zeros (in every sequence, or in the last
    one only). Through projections without biases that position's query and key are 0, so its
    scores are exactly 0: real scores, which a mask read from the scores' values (``scores == 0``)
    instead of the positions hides."""
    x = x.clone()
    if last_sequence_only:
        x[-1, position] = 0.0
    else:
        x[..., position, :] = 0.0
    return x


# ---------------------------------------------------------------------------------------------
# Gradients to a function's inputs


def _weighting(out: torch.Tensor) -> torch.Tensor:
    """A fixed random weighting of an output: the gradient of ``(out * w).sum()`` tests every entry."""
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    return w.to(out.dtype)


def tensors_kept(mapping: dict) -> dict:
    """Probe side, before a call: each tensor entry of the caller's dict (a checkpoint, the splits)
    and a copy of its values, for :func:`dict_changed`."""
    return {k: (v, v.detach().clone()) for k, v in mapping.items() if isinstance(v, torch.Tensor)}


def dict_changed(mapping: dict, before: dict) -> str:
    """Probe side, after the call: how it changed the caller's dict, in words ("" when it left it as
    it was): entries removed, replaced by another value, or changed in place, with the first key."""
    gone = [k for k in before if k not in mapping]
    replaced = [k for k in before if k in mapping and mapping[k] is not before[k][0]]
    written = [k for k in before if k in mapping and mapping[k] is before[k][0]
               and (before[k][0].shape != before[k][1].shape or not torch.equal(before[k][0], before[k][1]))]
    for keys, how in ((gone, "removed from it"), (replaced, "replaced by another value"), (written, "changed in place")):
        if keys:
            return f"{len(keys)} of its entries {how} ({keys[0]!r} first)"
    return ""


def input_gradients(fn, *args) -> dict:
    """Probe side: call ``fn`` on copies of ``args`` whose float tensors require a gradient, and
    return ``{"grads": [the gradient of a fixed weighting of the finite outputs with respect to
    each float tensor argument, or None where none arrives]}``; ``{"error": text}`` when the
    backward pass raises; ``{}`` when the call raises or returns no float tensor (the output's own
    checks say what is wrong then)."""
    leaves = [a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
              for a in args]
    wanted = [a for a in leaves if isinstance(a, torch.Tensor) and a.requires_grad]
    try:
        with torch.enable_grad():
            out = fn(*leaves)
            if not isinstance(out, torch.Tensor) or not out.is_floating_point():
                return {}
            if not out.requires_grad:
                return {"grads": [None] * len(wanted)}
            finite = torch.isfinite(out.detach())
            total = (torch.where(finite, out, torch.zeros((), dtype=out.dtype)) * _weighting(out)).sum()
    except Exception:  # noqa: BLE001 - the output's own checks explain an error
        return {}
    try:
        found = torch.autograd.grad(total, wanted, allow_unused=True)
    except Exception as exc:  # noqa: BLE001 - an in-place change of what autograd saved, say
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"grads": [None if g is None else g.detach() for g in found]}


def gradient_cut(what: str, problem: str, hint: str = "") -> str:
    """The message for a right output whose gradient does not arrive (modules and functions alike)."""
    return (f"{what}: the output is right, but {problem}: part of the computation is cut off from autograd "
            "(a torch.no_grad() block, .detach(), .data, .item(), or a round trip through numpy or a Python "
            f"number), so training would not change what it should.{hint}")


def judge_input_gradients(found, reference, args: tuple, names: tuple[str, ...], what: str, dtype: torch.dtype,
                          hint: str = "") -> None:
    """Judge side, once the output is right: every float input that gets a gradient through the
    reference (on the same ``args``, in float64) must get the same one through the student's
    function (``found``: :func:`input_gradients`' record); fail naming the first that does not."""
    if not isinstance(found, dict) or not found:
        return
    if "error" in found:
        raise CheckFailed(f"{what}: the output is right, but backpropagating through it raised {found['error']}. "
                          "The result must be differentiable: torch operations on tensors (no .item(), no numpy, "
                          f"no in-place change of a tensor autograd saved).{hint}")
    ours = input_gradients(reference, *(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                                        for a in args)).get("grads") or []
    grads = found.get("grads") if isinstance(found.get("grads"), list) else []
    tol = {torch.float64: 1e-7, torch.bfloat16: 2e-2, torch.float16: 4e-3}.get(dtype, 1e-3)  # about 5 units of the last place
    for name, want, have in zip(names, ours, grads + [None] * (len(ours) - len(grads)), strict=False):
        if want is None or not bool(want.abs().gt(0).any()):
            continue
        if not isinstance(have, torch.Tensor) or have.shape != want.shape:
            raise CheckFailed(gradient_cut(what, f"no gradient reaches {name}", hint))
        if not close(want, have, tol, tol):
            raise CheckFailed(gradient_cut(
                what, f"the gradient that reaches {name} is wrong ({first_mismatch(want, have, tol, tol)})", hint))


# ---------------------------------------------------------------------------------------------
# A second call with other sizes


def kept_between_calls(fn):
    """Probe side, before the first call of ``fn``: a function ``facts(*args)`` to call after a later
    call: ``{"rebound": the global names of fn's module that the calls bound or rebound,
    "fresh": what a copy of fn, with those globals as they were before the first call, returns on
    args (or its error)}``. ``{}`` for what is not a plain Python function."""
    if not isinstance(fn, types.FunctionType):
        return lambda *args: {}
    before = dict(fn.__globals__)

    def facts(*args) -> dict:
        now = fn.__globals__
        rebound = sorted(k for k in now if k not in before or now[k] is not before[k])[:5]
        fresh = types.FunctionType(fn.__code__, dict(before), fn.__name__, fn.__defaults__, fn.__closure__)
        fresh.__kwdefaults__ = fn.__kwdefaults__
        try:
            return {"rebound": rebound, "fresh": fresh(*args)}
        except Exception as exc:  # noqa: BLE001 - evidence like any other
            return {"rebound": rebound, "fresh": {"error": f"{type(exc).__name__}: {exc}"[:300]}}

    return facts


def kept_told(facts, expected: torch.Tensor, tol: float) -> str | None:
    """Judge side: when a call went wrong, what :func:`kept_between_calls` established: the globals
    an earlier call rebound, without which the same code gets this call right; None otherwise."""
    fresh = facts.get("fresh") if isinstance(facts, dict) else None
    rebound = [str(n) for n in facts.get("rebound") or []] if isinstance(facts, dict) else []
    if not rebound or not isinstance(fresh, torch.Tensor) or fresh.shape != expected.shape or not close(
            expected, fresh, tol, tol):
        return None
    return (f"an earlier call with other sizes set the global name{'s' if len(rebound) > 1 else ''} "
            f"{', '.join(rebound)}, and this call reuses {'them' if len(rebound) > 1 else 'it'}: the same code, with "
            "the globals as they were before the first call, gets this input right. Compute what the function "
            "needs from each call's own input (a table kept between calls must fit every size).")


# ---------------------------------------------------------------------------------------------
# The global random numbers


@contextmanager
def rng_watch():
    """Probe side: while active, PyTorch's global generator starts from a state of its own (one no
    ``torch.manual_seed`` call leaves); the dict yielded holds afterwards whether the call moved it
    (``moved``) and, when the call re-seeded it, the seed it set (``seeded``)."""
    torch.manual_seed(_WATCH_SEED)
    torch.rand(1)  # one draw on: re-seeding with any seed, this one included, shows
    before = torch.get_rng_state()
    found: dict = {}
    try:
        yield found
    finally:
        found["moved"] = not torch.equal(before, torch.get_rng_state())
        seed = torch.initial_seed()
        found["seeded"] = seed if seed != _WATCH_SEED else None


def judge_rng(found, what: str) -> None:
    """Judge side: fail when the watched call (:func:`rng_watch`) moved PyTorch's global generator,
    saying whether it re-seeded it (the seed it set) or drew from it."""
    if not isinstance(found, dict) or found.get("moved") is not True:
        return
    seeded = found.get("seeded")
    if isinstance(seeded, int) and not isinstance(seeded, bool):
        raise CheckFailed(
            f"{what} re-seeded PyTorch's global generator: after the call its seed is {seeded}, as a "
            f"torch.manual_seed({seeded}) inside the function leaves it. The generator passed in must be the only "
            "randomness it uses, and the "
            "caller's random numbers must be left alone: re-seeding them makes every later random number of the "
            "program (a model's initialisation, the batches, dropout) restart from that seed. Draw with "
            "generator=generator and leave the seeding to the caller.")
    raise CheckFailed(
        f"{what} drew random numbers from PyTorch's global generator (its state moved during the call, with a "
        "generator passed in): the generator passed in must be the only randomness it uses. Pass "
        "generator=generator to every draw (torch.multinomial, torch.rand, torch.randint, ...).")


def unseeded_calls(call, fn) -> dict:
    """Probe side, for a function whose generator is optional: ``call()`` (the function with none)
    twice, each time after ``torch.manual_seed(11)``: what each gave, whether each moved PyTorch's
    global generator, and whether one of ``fn``'s default arguments is a generator."""
    found: dict = {}
    for key in ("first", "second"):
        torch.manual_seed(11)
        start = torch.get_rng_state()
        found[key] = call()
        found[f"{key}_moved"] = not torch.equal(start, torch.get_rng_state())
    defaults = (*(getattr(fn, "__defaults__", None) or ()), *(getattr(fn, "__kwdefaults__", None) or {}).values())
    found["default_generator"] = any(isinstance(value, torch.Generator) for value in defaults)
    return found


def judge_unseeded(found, what: str) -> None:
    """Judge side: with no generator, the draws come from PyTorch's global generator, so a caller's
    ``torch.manual_seed`` makes them repeat (:func:`unseeded_calls`' two calls drew the same)."""
    first, second = ((found.get(k) or {}).get("out") for k in ("first", "second"))
    if not isinstance(first, torch.Tensor) or not isinstance(second, torch.Tensor) or first.shape != second.shape:
        return  # the outputs themselves are judged with a generator
    differ = "" if torch.equal(first, second) else f" (the two calls differ in {int((first != second).sum())} of {first.numel()} entries)"
    if found.get("first_moved") is False:
        cause = (" Its default value for generator is a torch.Generator, made once, when the def line ran (a default "
                 "argument is evaluated once, not at each call): every call without a generator draws from that one "
                 "object, whatever the caller seeded. Default to None: with generator=None, PyTorch's draws use the "
                 "global generator." if found.get("default_generator") else " Without a generator, draw with "
                 "generator=None: PyTorch then uses its global generator, the one torch.manual_seed seeds.")
        raise CheckFailed(f"{what}: the draws did not come from PyTorch's global generator (its state did not move "
                          f"during the call), so a caller's torch.manual_seed cannot make them repeat{differ}.{cause}")
    if differ:
        raise CheckFailed(f"{what}: the two calls gave different results{differ}, though the global generator was seeded "
                          "the same way before each: with no generator, the draws must come from the global generator "
                          "alone, as it was seeded (is it re-seeded, or is other randomness used, inside the function?).")


# ---------------------------------------------------------------------------------------------
# A training step


def stale_gradients(module: torch.nn.Module, generator: torch.Generator) -> None:
    """Give every parameter of ``module`` a gradient already (random values drawn by ``generator``),
    as a caller's earlier ``backward()`` leaves them: a step must clear them before its own."""
    for param in module.parameters():
        param.grad = torch.randn(param.shape, generator=generator, dtype=torch.float64).to(param.dtype)
