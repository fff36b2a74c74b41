"""Fast unit tests of the check kit's shared machinery: the error record (``helpers.checks.errors``)
and the verdict on a module's output (``helpers.checks.verdict``), on hand-made modules and data.

Nothing here runs a notebook; the whole file runs in about a second.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from torch import nn

from helpers.checks.causal import attend, fitted_scale
from helpers.checks.core import CheckFailed, decode, describe, encode, expect_default_dtype
from helpers.checks.errors import attempt, caught, outcome, raise_caught, same_behaviour
from helpers.checks.verdict import (
    first_leak,
    judge_output,
    load_weights,
    run_module,
    settled,
    shared_modules,
    tolerance,
)


def _broken(x):
    return x @ torch.ones(3, 2, dtype=x.dtype)  # x is (2, 5): the product cannot be formed


def test_an_error_becomes_a_record_with_its_explanation():
    record = attempt(_broken, torch.zeros(2, 5), sizes={"B": 2, "C": 5})
    assert set(record) == {"error", "kind", "message", "value_error", "explained", "established"}
    assert record["kind"] == "RuntimeError" and record["error"].startswith("RuntimeError: mat1 and mat2")
    assert record["established"] is False  # the message's meaning only: the check's hints may follow
    assert "_broken" in record["explained"] and "(The error itself" not in record["explained"]
    assert attempt(lambda x: x + 1, 1) == {"out": 2}


def test_an_unfinished_answer_and_a_verdict_are_not_data():
    with pytest.raises(NotImplementedError):
        caught(NotImplementedError())
    with pytest.raises(CheckFailed):
        caught(CheckFailed("already judged"))
    assert caught(ValueError("too long"))["value_error"] is True


def test_a_record_fails_with_the_error_first_then_its_hints():
    record = attempt(_broken, torch.zeros(2, 5))
    raise_caught("f(x)", {"out": 1})  # no error: nothing to say
    with pytest.raises(CheckFailed) as failed:
        raise_caught("f(x)", record, hints=[(("no match",), "never"), ("mat1", "the hint")], hint="what we know")
    lines = str(failed.value).splitlines()
    assert lines[0] == f"f(x) raised {record['error']}"
    assert lines[-2:] == ["what we know", "the hint"] and "never" not in str(failed.value)


def test_behaviour_compares_tensors_and_errors_word_for_word():
    record = attempt(_broken, torch.zeros(2, 5))
    assert same_behaviour(record, RuntimeError(record["message"]), 0)
    assert not same_behaviour(record, ValueError(record["message"]), 0)
    assert same_behaviour(torch.ones(2), torch.ones(2) + 1e-12, 1e-9)
    assert outcome(record).startswith("raised RuntimeError") and outcome(torch.ones(2)).startswith("returned a ")


class Tiny(nn.Module):
    """x (B, T, C) -> (B, T, C): a linear map, then a running sum over time (causal)."""

    def __init__(self, leak: bool = False, scale: float = 1.0, extra: bool = False):
        super().__init__()
        self.first = nn.Linear(3, 3, bias=False)
        self.leak, self.scale, self.extra = leak, scale, extra

    def forward(self, x):
        h = self.first(x) * self.scale
        out = h.flip(-2).cumsum(-2).flip(-2) if self.leak else h.cumsum(-2)
        return out + 0.1 * h.tanh() if self.extra else out


def _case(student: Tiny):
    torch.manual_seed(0)
    reference = Tiny().double()
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    load_weights(student.double(), {"first.weight": reference.first.weight.detach().clone()}, "Tiny()")
    with torch.no_grad():  # as the probe's data arrives at the judge: detached
        run = run_module(student, x, {"B": 2, "T": 4, "C": 3}, batched=True)
        run["leaks"] = []
        for j in range(1, 4):
            changed = x.clone()
            changed[:, j] = -x[:, j]
            run["leaks"].append(student(changed))
        expected = reference(x)
    diagnosis = {"what": "Tiny()", "atol": tolerance(torch.float64), "rtol": tolerance(torch.float64),
                 "axes": ("B", "T", "C"), "sizes": {"B": 2, "T": 4, "C": 3}, "again": run.get("again"),
                 "alone": run.get("alone"), "dtype": torch.float64}
    return run, expected, diagnosis, reference, x


def _judged(student: Tiny, **options) -> str:
    run, expected, diagnosis, reference, x = _case(student)
    try:
        judge_output(run, expected, diagnosis, reference=reference, inputs=(x,), **options)
    except CheckFailed as failed:
        return str(failed)
    return "right"


def test_a_right_output_passes_and_a_catalogued_mistake_is_named():
    assert _judged(Tiny()) == "right"
    message = _judged(Tiny(scale=2.0), variants=lambda: {"you doubled it": 2 * _case(Tiny())[1]})
    assert message.startswith("Tiny(): you doubled it. Evidence: ")


def test_a_leak_from_the_future_is_found_and_said_with_its_meaning():
    run, expected, diagnosis, reference, x = _case(Tiny(leak=True))
    leak = first_leak(run["out"], run["leaks"], 1e-9, "Tiny()")
    assert leak.startswith("changing only token 1 changed the output at position 0 (sequence 0)")
    with pytest.raises(CheckFailed, match="an earlier one: keep it causal"):
        judge_output(run, expected, diagnosis, leak=lambda: leak, leak_means=": keep it causal")


def test_what_no_mistake_explains_is_located_inside_the_module():
    message = _judged(Tiny(extra=True))
    assert "Inside the model, every sub-module received and returned exactly what the reference's did" in message
    assert "forward's own arithmetic after the last sub-module call" in message, message


def test_a_wrong_shape_is_settled_before_any_value():
    run, expected, diagnosis, *_ = _case(Tiny())
    with pytest.raises(CheckFailed, match=r"shape"):
        settled(run["out"][:, :2], expected, diagnosis)


def test_known_weights_need_the_interface_names_and_shapes():
    with pytest.raises(CheckFailed, match=r"not the expected ones: missing second.weight\. It should have exactly "
                                          r"first.weight, second.weight \(keep the constructor as given\); it has first.weight\."):
        load_weights(Tiny(), {"first.weight": torch.zeros(3, 3), "second.weight": torch.zeros(3, 3)}, "Tiny()")
    with pytest.raises(CheckFailed, match=r"stores a weight of shape \(out, in\)"):
        load_weights(Tiny(), {"first.weight": torch.zeros(3, 4)}, "Tiny()")


class Listed(nn.Module):
    """Its layers in a Python list: PyTorch registers none of them."""

    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(3, 3, bias=False) for _ in range(2)]


def test_modules_in_a_python_list_are_named_as_unregistered():
    with pytest.raises(CheckFailed) as failed:
        load_weights(Listed(), {"layers.0.weight": torch.zeros(3, 3), "layers.1.weight": torch.zeros(3, 3)}, "Listed()")
    assert "missing layers.0.weight, layers.1.weight. layers (a Python list) holds modules that PyTorch does not register" \
        in str(failed.value)
    assert "nn.ModuleList" in str(failed.value) and "_modules" not in str(failed.value)


class Repeated(nn.Module):
    """One layer object in a ModuleList twice, and one assigned to two attributes."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3, bias=False)] * 2)
        self.gate = self.up = nn.Linear(3, 3, bias=False)


class Tied(nn.Module):
    """Two modules that share one weight tensor (a tie), each its own module."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(3, 3)
        self.head = nn.Linear(3, 3, bias=False)
        self.head.weight = self.table.weight


def test_one_module_under_several_names_is_named_and_a_tied_weight_is_not():
    names = ["layers.0.weight", "layers.1.weight", "gate.weight", "up.weight"]
    with pytest.raises(CheckFailed) as failed:
        load_weights(Repeated(), {n: torch.zeros(3, 3) for n in names}, "Repeated()")
    assert "missing layers.1.weight, up.weight" in str(failed.value)
    assert "registered under several names: layers.0 and layers.1; and gate and up" in str(failed.value)
    assert shared_modules(Tied()) == ""


class PlainScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.ones(3)


def test_a_plain_tensor_attribute_is_named_as_not_a_parameter():
    with pytest.raises(CheckFailed, match=r"weight \(3,\) is a plain tensor, not a parameter: .* nn.Parameter"):
        load_weights(PlainScale(), {"weight": torch.ones(3)}, "PlainScale()")


class BuildsItsHead(nn.Module):
    """Builds its output layer inside forward: new random weights at every call."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 3)

    def forward(self, x):
        return nn.Linear(3, 2).to(x.dtype)(self.first(x))


def test_a_layer_built_inside_forward_is_named():
    run = attempt(BuildsItsHead(), torch.zeros(2, 3))
    assert run["outside"] == ["nn.Linear(in_features=3, out_features=2) (weight (2, 3))"]
    assert "outside" not in attempt(Tiny(), torch.zeros(2, 3))
    assert "outside" not in attempt(lambda m, x: nn.GELU()(m(x)), Tiny(), torch.zeros(2, 3))  # no weights: harmless
    failing = attempt(lambda m, x: nn.Linear(4, 2)(m(x)), Tiny(), torch.zeros(2, 3))
    assert "Forward called nn.Linear(in_features=4, out_features=2)" in failing["explained"]


class BuiltInFloat64(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 2).double()  # a NumPy habit: float64 everywhere


def test_a_module_built_in_another_dtype_is_named_before_the_check_converts_it():
    with pytest.raises(CheckFailed, match=r"layer.weight is created as torch.float64, not PyTorch's default"):
        expect_default_dtype(BuiltInFloat64(), "BuiltInFloat64()")
    expect_default_dtype(nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2)), "fine")  # returns quietly


def test_a_numpy_value_is_described_as_one():
    import numpy as np

    said = describe(decode(encode(np.int64(5))))
    assert said.startswith("a numpy.int64 (a NumPy value") and "int(...)" in said
    assert describe(decode(encode(object()))) == "a object"


def test_a_scale_of_the_scores_no_mistake_lists_is_found_and_named():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 3, generator=g, dtype=torch.float64) for _ in range(3))
    run = partial(attend, q, k, v)
    hs = 3
    found = fitted_scale(run, run(scale=1 / (2 * hs)), C=7, T=5, hs=hs)  # `/ hs ** 1/2`
    (label, output), = found.items()
    assert "divided by 6 = 2 × head_dim" in label and "binds tighter than /" in label
    assert torch.allclose(output, run(scale=1 / (2 * hs)), atol=1e-10)
    (odd,) = fitted_scale(run, run(scale=0.3), C=7, T=5, hs=hs)
    assert "multiplied by 0.3 " in odd and "binds" not in odd
    assert fitted_scale(run, run(scale=1 / math.sqrt(hs)), C=7, T=5, hs=hs) == {}  # the right scale
    assert fitted_scale(run, run(scale=0.3, mask="none"), C=7, T=5, hs=hs) == {}  # not a scale: no match


# --- the invariants every exercise of a kind gets (helpers.checks.invariants) ------------------


def _masked(scores):
    T = scores.shape[-1]
    return scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))


def test_a_gradient_must_reach_every_input_the_reference_sends_one_to():
    from helpers.checks.invariants import input_gradients, judge_input_gradients

    scores = torch.randn(4, 4, dtype=torch.float64)
    for right in (_masked, lambda s: torch.where(torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf"), s)):
        judge_input_gradients(input_gradients(right, scores), _masked, (scores,), ("scores",), "mask", torch.float64)
    cut = input_gradients(lambda s: _masked(s.detach()), scores)
    assert cut == {"grads": [None]}
    with pytest.raises(CheckFailed, match="the output is right, but no gradient reaches scores: part of the computation"):
        judge_input_gradients(cut, _masked, (scores,), ("scores",), "mask", torch.float64)
    halved = input_gradients(lambda s: _masked(s * 0.5) * 2 + (s - s.detach()) * 0, scores)  # values right, gradient too
    judge_input_gradients(halved, _masked, (scores,), ("scores",), "mask", torch.float64)
    wrong = input_gradients(lambda s: _masked(s.detach() + 0.5 * (s - s.detach())), scores)  # half the gradient
    with pytest.raises(CheckFailed, match="the gradient that reaches scores is wrong"):
        judge_input_gradients(wrong, _masked, (scores,), ("scores",), "mask", torch.float64)
    assert input_gradients(lambda s: 1 / 0, scores) == {}  # the call raises: the output's own checks explain it


def test_exact_zeros_are_put_in_at_drawn_places_and_are_plus_zero():
    from helpers.checks.invariants import with_zeros

    x = -torch.rand(40, 40, dtype=torch.float64) - 0.5  # negative: x * 0 would give -0.0
    zeroed = with_zeros(x, torch.Generator().manual_seed(0))
    zero = zeroed == 0
    assert 0.15 < zero.double().mean() < 0.35 and not torch.signbit(zeroed[zero]).any()
    assert torch.equal(zeroed[~zero], x[~zero])
    assert torch.equal(zeroed, with_zeros(x, torch.Generator().manual_seed(0)))


def test_the_global_generator_is_watched_and_a_reseed_is_told_with_its_seed():
    from helpers.checks.invariants import judge_rng, rng_watch

    with torch.random.fork_rng():
        with rng_watch() as quiet:
            torch.multinomial(torch.ones(5), 1, generator=torch.Generator().manual_seed(1))
        with rng_watch() as drew:
            torch.rand(2)
        with rng_watch() as seeded:
            torch.manual_seed(0)
    judge_rng(quiet, "f")
    assert quiet == {"moved": False, "seeded": None}
    with pytest.raises(CheckFailed, match=r"f drew random numbers from PyTorch's global generator"):
        judge_rng(drew, "f")
    with pytest.raises(CheckFailed, match=r"re-seeded PyTorch's global generator: after the call its seed is 0"):
        judge_rng(seeded, "f")


def test_what_a_first_call_leaves_in_a_global_is_named_when_the_same_code_without_it_is_right():
    from helpers.checks.invariants import kept_between_calls, kept_told

    scope = {"torch": torch}
    exec("MASK = None\n"
         "def masked(s):\n"
         "    global MASK\n"
         "    if MASK is None:\n"
         "        T = s.shape[-1]\n"
         "        MASK = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)\n"
         "    return s.masked_fill(MASK, float('-inf'))\n", scope)
    facts = kept_between_calls(scope["masked"])
    scope["masked"](torch.zeros(3, 3))
    later = torch.randn(5, 5, dtype=torch.float64)
    found = facts(later)
    assert found["rebound"] == ["MASK"] and torch.equal(found["fresh"], _masked(later))
    assert "set the global name MASK" in kept_told(found, _masked(later), 0)
    honest = kept_between_calls(_masked)
    _masked(torch.zeros(3, 3))
    assert kept_told(honest(later), _masked(later), 0) is None  # nothing rebound: nothing said
    assert kept_between_calls(len)() == {}  # not a Python function: no facts


def test_a_training_step_can_be_handed_stale_gradients():
    from helpers.checks.invariants import stale_gradients

    model = nn.Linear(3, 2).double()
    stale_gradients(model, torch.Generator().manual_seed(0))
    assert all(p.grad is not None and p.grad.dtype == p.dtype and p.grad.abs().sum() > 0 for p in model.parameters())


class PaddedLM(nn.Module):
    def __init__(self, padding_idx=None):
        super().__init__()
        self.word_to_embedding = nn.Embedding(5, 3, padding_idx=padding_idx)
        self.lm_head = nn.Linear(3, 5, bias=False)

    def forward(self, ids):
        return self.lm_head(self.word_to_embedding(ids))


def test_a_padding_idx_is_named_only_when_the_reference_built_with_it_gives_the_same_gradients():
    from helpers.checks.verdict import gradients, judge_gradients

    reference, ids = PaddedLM().double(), torch.tensor([[0, 3, 1, 0, 4]])
    student = PaddedLM(padding_idx=0).double()
    student.load_state_dict(reference.state_dict())
    with pytest.raises(CheckFailed, match=r"word_to_embedding was built with padding_idx=0, and the reference built "
                                          r"that way sends back exactly your gradients"):
        judge_gradients(gradients(student, ids), reference, ids, "LM", torch.float64)
    other = PaddedLM(padding_idx=2).double()  # a padding row the ids never use: the gradients are right
    other.load_state_dict(reference.state_dict())
    judge_gradients(gradients(other, ids), reference, ids, "LM", torch.float64)
    grads = gradients(student, ids)
    grads["word_to_embedding.weight"] = grads["word_to_embedding.weight"] * 2  # not what padding_idx gives
    with pytest.raises(CheckFailed, match="cut off from autograd") as failed:
        judge_gradients(grads, reference, ids, "LM", torch.float64)
    assert "padding_idx" not in str(failed.value)


def test_in_a_kernel_a_verdict_and_a_blank_exercise_take_one_line_each(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    from helpers.notebook import short_errors

    shell = InteractiveShell()
    shown = []
    shell._showtraceback = lambda etype, value, stb: shown.append((etype.__name__, stb))
    assert short_errors(shell)
    shell.run_cell("from helpers.checks.core import CheckFailed\n"
                   "def apply_mask(scores):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n")
    shell.run_cell("masked = apply_mask(1)\nrows = 3\n")
    shell.run_cell("print(masked)")
    shell.run_cell("raise CheckFailed('apply_mask is not written yet')")
    shell.run_cell("print(never_defined)")
    names = [name for name, _ in shown]
    assert names[:3] == ["NotImplementedError", "NameError", "CheckFailed"], shown
    for _, stb in shown[:3]:
        assert len(stb) == 1 and "\n" not in stb[0]
    assert "(apply_mask is an exercise not written yet: this cell will work once it is)" in shown[0][1][0]
    assert shown[1][1] == shown[0][1] and "CheckFailed\x1b[0m: apply_mask is not written yet" in shown[2][1][0]
    assert names[3] == "NameError" and len(shown[3][1]) > 1, "any other error keeps IPython's traceback"
    shell.run_cell("def apply_mask(scores):\n    return scores\n")  # written: what waited for it is told normally
    shell.run_cell("print(masked)")
    assert len(shown[-1][1]) > 1


def test_the_lesson_check_table_is_what_each_notebook_imports():
    import re
    from pathlib import Path

    from helpers.checks import LESSON_CHECKS

    root = Path(__file__).resolve().parents[1]
    imported = {}
    for notebook in sorted(root.glob("solutions/*/*.ipynb")):
        text = notebook.read_text(encoding="utf-8")
        imported[notebook.parent.name] = tuple(sorted(set(re.findall(r"from helpers\.checks\.([a-z0-9_]+) import", text))))
    assert imported == {k: tuple(sorted(v)) for k, v in LESSON_CHECKS.items()}


def test_a_judge_that_raises_is_the_checks_fault_never_the_students():
    """A fault in a check's own judge (here a division by zero) reads as the course's fault, in words,
    not as a bare traceback a student would take for an error of theirs."""
    from helpers.checks.core import Check

    check = Check("check_toy_judge_fault", lambda f: {"out": f(2)}, lambda data: 1 / 0)
    with pytest.raises(CheckFailed, match="could not judge your answer: its own code raised ZeroDivisionError") as told:
        check(lambda x: x)
    assert "not a verdict on your code" in str(told.value)


def test_in_the_notebook_a_failing_check_adds_what_the_code_shows_on_its_face():
    """The same notes the grader adds (``diagnose.code_notes``) close a failing check's message in the
    notebook: here a doubling whose result the line throws away."""
    import linecache

    from helpers.checks.core import Check, CheckFailed

    source = "def double(x):\n    x.mul(2)\n    return x\n"
    linecache.cache["<cell 99>"] = (len(source), None, source.splitlines(keepends=True), "<cell 99>")
    namespace: dict = {}
    exec(compile(source, "<cell 99>", "exec"), namespace)

    def judge(data):
        if not torch.equal(data["out"], torch.tensor([2.0, 4.0])):
            raise CheckFailed("double(x) should be 2 * x")
        return "fine"

    check = Check("check_toy_notes", lambda f: {"out": f(torch.tensor([1.0, 2.0]))}, judge)
    with pytest.raises(CheckFailed) as told:
        check(namespace["double"])
    assert str(told.value).startswith("double(x) should be 2 * x\nIn your code: line 2 of double, `x.mul(2)`")
