"""Fast unit tests of the diagnosis layer (helpers.checks.diagnose): each rule establishes its
cause on a hand-made tensor, stays silent on a correct output, and no cause is stated when
nothing was established. Errors are raised by small functions compiled under a notebook cell's
filename, as Jupyter names them. Runs in a few seconds; nothing here starts a process."""

from __future__ import annotations

import linecache
import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers.checks import diagnose as dg
from helpers.checks.core import Check, CheckFailed
from helpers.checks.diagnose import (
    case_sizes,
    difference_from,
    explain_exception,
    explain_mismatch,
    first_divergence,
    legend_shape,
    trace,
)

SIZES = {"B": 2, "T": 6, "C": 7, "hs": 3}
AXES = ("B", "T", "hs")
TOL = 1e-9
GENERIC = "differs from the reference"


def expected(seed: int = 0) -> torch.Tensor:
    return torch.randn(2, 6, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def explain(got, exp=None, axes=AXES, **kwargs) -> str:
    exp = expected() if exp is None else exp
    return explain_mismatch(exp, got, what="f(x)", atol=TOL, rtol=TOL, axes=axes, sizes=SIZES, **kwargs)


def case(got, exp=None, axes=AXES, **kwargs) -> dg._Case:
    exp = expected() if exp is None else exp
    return dg._Case(exp, got, TOL, TOL, axes, SIZES, kwargs.get("again"), kwargs.get("alone"), kwargs.get("dtype"))


def rule_on_correct_output_is_silent(rule, exp=None, axes=AXES, **kwargs):
    exp = expected() if exp is None else exp
    assert not rule(case(exp.clone(), exp, axes, **kwargs)), rule.__name__


# --- every message: starts with what, no cause without a probe -------------------------------


def test_messages_start_with_what_and_carry_evidence():
    e = expected()
    for got in (e * 2, e.transpose(1, 2), e.float(), e + 1):
        message = explain(got)
        assert message.startswith("f(x)") and "Evidence:" in message, message


def test_nothing_established_gives_the_generic_form_and_no_cause():
    e = expected()
    noise = torch.randn(e.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    got = e.clone()
    got[0, 1, 0] += noise[0, 1, 0]
    got[1, 3, 2] += noise[1, 3, 2]
    got[0, 4, 1] += noise[0, 4, 1]
    got[1, 0, 0] += 1
    got[0, 5, 2] += 1
    got[1, 2, 1] += 1  # wrong entries on every index of every axis, scattered: no structure
    rule, message = dg.diagnose(e, got, what="f(x)", atol=TOL, rtol=TOL, axes=AXES, sizes=SIZES)
    assert rule == "generic", message
    assert GENERIC in message and "entries differ; first at index" in message
    for cause in ("factor", "shifted", "transpose", "batch", "deterministic", "normalis", "NaN"):
        assert cause not in message


def test_a_correct_output_is_not_diagnosed():
    e = expected()
    message = explain(e.clone(), again=e.clone(), alone=[e[:1], e[1:]])
    assert "matches the reference" in message and GENERIC not in message
    for rule in dg.RULES:
        if rule is not dg._correct:
            rule_on_correct_output_is_silent(rule, again=e.clone(), alone=[e[:1].clone(), e[1:].clone()])


def test_explain_mismatch_never_raises():
    assert explain([1, 2]).startswith("f(x) should return a tensor of shape (2, 6, 3)")
    assert "a object" in explain_mismatch(torch.zeros(2), object(), what="g", atol=0, rtol=0)
    assert explain_mismatch(object(), torch.zeros(2), what="g", atol=0, rtol=0) == "g differs from the reference."
    message = explain_mismatch(expected(), expected(), what="h", atol=TOL, rtol=TOL, axes=("B",), sizes="junk")
    assert message.startswith("h")


# --- 1. shape ---------------------------------------------------------------------------------


def test_shape_names_the_wrong_axis_by_its_legend_letter():
    got = torch.zeros(2, 7, 3, dtype=torch.float64)
    message = explain(got)
    assert "axis 1 has size 7, which is C (emb_dim); T = 6 was expected there" in message
    assert "(2, 7, 3) = (B, C, hs)" in message


def test_shape_permuted_axes_is_a_transpose_not_a_data_problem():
    message = explain(expected().transpose(1, 2))
    assert "axes permuted to (B, hs, T)" in message and "transpose/permute" in message


def test_shape_reshape_where_a_transpose_was_needed():
    message = explain(expected().reshape(2, 3, 6))
    assert "view/reshape was used where a transpose" in message


def test_shape_missing_and_extra_axes():
    e = expected()
    assert "keepdim=True left out" in explain(e[:, :, 0], e[:, :, :1])
    assert "extra axis of size 1 at position 2" in explain(e.unsqueeze(2))
    message = explain(e.sum(dim=1))
    assert "axis 1 (T (time), size 6) is missing" in message


def test_shape_rule_is_silent_on_a_correct_output():
    rule_on_correct_output_is_silent(dg.rule_shape)


def test_legend_shape():
    assert legend_shape((2, 6, 3), SIZES) == "(2, 6, 3) = (B, T, hs)"
    assert legend_shape((2, 5), SIZES) == "(2, 5) = (B, 5)"
    assert legend_shape((5,), None) == "(5,)"
    assert legend_shape((12,), {"nh": 4, "hs": 3}) == "(12,) = (nh·hs,)"


def test_a_letter_twice_is_kept_only_where_it_tells_something():
    """A size equal to a letter already used further on is shown as its number, except a square matrix's
    two axes and a second B, nh or n_kv, which exceptions._axis_too_many reads as an axis too many."""
    gqa = {"B": 3, "nh": 6, "T_new": 5, "hs": 4}
    assert legend_shape((3, 4, 5, 4), gqa) == "(3, 4, 5, 4) = (B, 4, T_new, hs)"  # 4 = n_kv × n_kv here, not hs
    assert legend_shape((3, 6, 5, 5), {**gqa, "T": 5, "T_new": 1}) == "(3, 6, 5, 5) = (B, nh, T, T)"
    batched_twice = legend_shape((2, 2, 3, 5, 5), {"B": 2, "nh": 3, "T": 5})
    assert batched_twice == "(2, 2, 3, 5, 5) = (B, B, nh, T, T)"
    (note,) = dg.exceptions._axis_too_many([f"scores: float32 (2, 2, 3, 5, 5) = {batched_twice.split(' = ')[1]}",
                                            "q: float32 (2, 3, 5, 4) = (B, nh, T, hs)"])
    assert "B twice: one axis more than it should have" in note


# --- 2. dtype ---------------------------------------------------------------------------------


def test_dtype_float32_for_a_float64_input():
    message = explain(expected().float())
    assert "float32 for a float64 input" in message and "dtype=" in message
    assert "agree to float32 precision" in message


def test_dtype_integer_and_bool_outputs():
    assert "integer tensor (int64)" in explain(expected().long())
    assert "bool tensor" in explain(expected() > 0)


def test_dtype_given_by_the_case_not_by_the_reference():
    # the judges compute the reference in float64 for float32 cases too
    e = expected()
    message = explain_mismatch(e, e.float(), what="f(x)", atol=1e-6, rtol=1e-6, sizes=SIZES, dtype=torch.float32)
    assert "matches the reference" in message
    assert "float64 for a float32 input" in explain_mismatch(
        e, e * 2, what="f(x)", atol=1e-6, rtol=1e-6, sizes=SIZES, dtype=torch.float32
    )
    rule_on_correct_output_is_silent(dg.rule_dtype)


# --- 3. NaN and inf ---------------------------------------------------------------------------


def test_nan_where_the_reference_is_finite_says_where():
    got = expected().clone()
    got[1, 2:, :] = float("nan")
    message = explain(got)
    assert "NaN values where the reference is finite" in message
    assert "along axis 0 (B) only B = 1 (the last)" in message and "along axis 1 (T) only T ≥ 2" in message
    assert "first at index (1, 2, 0)" in message


def test_finite_where_the_reference_is_infinite():
    e = expected().clone()
    e[:, 0, 1] = float("-inf")
    message = explain(expected(), e)
    assert "finite where the reference is -inf" in message
    rule_on_correct_output_is_silent(dg.rule_nonfinite, e)


# --- 4. determinism ---------------------------------------------------------------------------


def test_two_different_outputs_for_the_same_input():
    e = expected()
    message = explain(e * 2, again=e * 3)
    assert "not deterministic" in message and "dropout" in message
    assert "factor" not in message  # no verdict about the values
    rule_on_correct_output_is_silent(dg.rule_determinism, again=e.clone())


# --- 5. batch ---------------------------------------------------------------------------------


def test_right_alone_wrong_together_is_a_batching_problem():
    e = expected()
    mixed = e - e.mean(dim=0, keepdim=True) + e[0]
    message = explain(mixed, alone=[e[:1], e[1:2]])
    assert "each batch element run alone gives the right output" in message
    assert "mixed" in message


def test_alone_accepts_unbatched_outputs_too():
    e = expected()
    assert "run alone gives the right output" in explain(e.flip(0), alone=[e[0], e[1]])


def test_wrong_alone_is_not_a_batching_problem():
    e = expected()
    noisy = e + torch.randn(e.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    message = explain(noisy, alone=[noisy[:1], noisy[1:]])
    assert "not a batching problem" in message and "batch element 0 run alone" in message
    assert "run alone gives the right output" not in message
    rule_on_correct_output_is_silent(dg.rule_batch, alone=[e[:1].clone(), e[1:].clone()])


# --- 6. constant factor, offset, sign ---------------------------------------------------------


@pytest.mark.parametrize(
    ("factor", "words"),
    [
        (1 / math.sqrt(3), "constant factor 1/sqrt(hs) = 0.5774"),
        (math.sqrt(3), "constant factor sqrt(hs) = 1.732"),
        (1 / 7, "constant factor 1/C = 0.1429"),
        (6.0, "constant factor T = 6"),
        (0.5, "constant factor 1/2"),
    ],
)
def test_constant_factor_named_by_a_size(factor, words):
    message = explain(expected() * factor)
    assert words in message, message


def test_factor_reason_follows_from_the_factor():
    assert "missing a division by sqrt(hs)" in explain(expected() * math.sqrt(3))
    assert "divided by sqrt(hs) once too often" in explain(expected() / math.sqrt(3))


def test_unnamed_factor_offset_and_sign():
    e = expected()
    assert "matches none of the case's sizes" in explain(e * 2.37)
    assert "shifted by a constant 0.25" in explain(e + 0.25)
    assert "sign flipped" in explain(-e)
    rule_on_correct_output_is_silent(dg.rule_factor)



def test_whole_numbers_rounded_from_the_reference_name_an_integer_division():
    e = 3 * expected()
    assert "rounded down to whole numbers: an integer division (//)" in explain(e.floor(), e)
    assert "rounded toward 0" in explain(e.trunc(), e)
    zeros = explain(torch.zeros_like(e), e * 0.1)  # all zeros says nothing about rounding
    assert "rounded" not in zeros, zeros
    rule_on_correct_output_is_silent(dg.rule_rounded)

# --- 7. per-slice factors and normalisation axis ----------------------------------------------


def test_per_slice_factors():
    e = expected()
    scale = torch.arange(1, 7, dtype=torch.float64)[None, :, None]
    message = explain(e * scale)
    assert "each slice along axis 1 (T) is the reference times its own factor (1, 2, 3" in message
    rule_on_correct_output_is_silent(dg.rule_slice_factors)


def test_per_vector_factors():
    e = expected()
    scale = torch.tensor([[1.0, 2, 3, 4, 5, 6], [0.5, 0.25, 2, 3, 9, 1]], dtype=torch.float64)[..., None]
    message = explain(e * scale)
    assert "each vector along axis 2 (hs) (one per (B, T) index)" in message
    rule_on_correct_output_is_silent(dg.rule_fibre_factors)


def test_per_slice_offsets():
    e = expected()
    message = explain(e + torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    assert "each slice along axis 2 (hs) is the reference plus its own constant (0.5, -1, 2" in message
    rule_on_correct_output_is_silent(dg.rule_slice_offsets)


def test_normalised_along_the_wrong_axis():
    scores = torch.randn(2, 6, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want = torch.softmax(scores, dim=-1)
    message = explain(torch.softmax(scores, dim=-2), want, axes=("B", "T", "T"))
    assert "normalised along axis 1 (T) instead of axis 2 (T)" in message
    rule_on_correct_output_is_silent(dg.rule_normalised_axis, want, axes=("B", "T", "T"))


# --- 8. transposes and permutations -----------------------------------------------------------


def test_transposed_last_two_axes():
    scores = torch.randn(2, 6, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    message = explain(scores.transpose(-1, -2), scores, axes=("B", "T", "T"))
    assert "last two axes (T, T) transposed" in message
    rule_on_correct_output_is_silent(dg.rule_transposed, scores, axes=("B", "T", "T"))


def test_reordered_and_reversed_slices():
    e = expected()
    assert "right but reversed" in explain(e.flip(1)) and "perm = [5, 4, 3, 2, 1, 0]" in explain(e.flip(1))
    message = explain(e[:, [1, 0, 2, 3, 5, 4]])
    assert "right but reordered" in message and "perm = [1, 0, 2, 3, 5, 4]" in message
    rule_on_correct_output_is_silent(dg.rule_permuted)


def test_transpose_and_reshape_mixed_up_on_the_same_shape():
    e = expected()
    assert "a transpose where a view/reshape alone was needed" in explain(e.transpose(1, 2).reshape(2, 6, 3))
    assert "a view/reshape where a transpose was needed" in explain(e.reshape(2, 3, 6).transpose(1, 2))
    rule_on_correct_output_is_silent(dg.rule_scrambled)


# --- 9. shifts --------------------------------------------------------------------------------


def test_shifted_by_one_position():
    e = expected()
    later = e.clone()
    later[:, :-1] = e[:, 1:]
    assert "shifted by +1 along axis 1 (T)" in explain(later)
    earlier = e.clone()
    earlier[:, 1:] = e[:, :-1]
    assert "shifted by -1 along axis 1 (T)" in explain(earlier) and "off-by-1" in explain(earlier)
    rule_on_correct_output_is_silent(dg.rule_shifted)


# --- 10. localisation -------------------------------------------------------------------------


def test_localised_rows_batch_elements_and_every_entry():
    e = expected()
    noise = torch.randn(e.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    rows = e.clone()
    rows[:, 1:] += noise[:, 1:]
    message = explain(rows)
    assert "along axis 1 (T) only T ≥ 1 (T = 0 is right)" in message and GENERIC not in message
    batch = e.clone()
    batch[1] += noise[1]
    assert "along axis 0 (B) only B = 1 (the last) (B = 0 is right)" in explain(batch)
    everything = explain(e + noise)
    assert "every entry of the output is wrong" in everything and GENERIC not in everything
    rule_on_correct_output_is_silent(dg.rule_localised)


# --- explain_exception ------------------------------------------------------------------------

CELL = '''
class Head(nn.Module):
    def __init__(self, emb_dim, head_dim):
        super().__init__()
        self.query = nn.Linear(emb_dim, head_dim, bias=False)

    def forward(self, x):
        q = self.query(x)
        scores = q @ q
        return scores

def unpack(x):
    B, T, C = x.shape
    return x

def broadcast(x):
    return x + torch.ones(3, 4, dtype=x.dtype)

def dtypes(x):
    return x @ torch.ones(7, 3)

def view_after_transpose(x):
    return x.transpose(1, 2).view(-1)

def bad_view(x):
    return x.view(5, -1)

def bad_dim(x):
    return x.sum(dim=3)

def lookup(ids):
    table = nn.Embedding(10, 4)
    return table(ids)

def plain(x):
    raise ValueError("my code is broken")

def centred(x):
    mean = x.mean(dim=-1)
    return x - mean

def normalised(x):
    mean, var = x.mean(dim=-1), x.var(dim=-1)
    return (x - mean.unsqueeze(-1)) / var

def offset(x):
    bias = torch.zeros(5, dtype=x.dtype)
    return x + bias

def all_axes_swapped(q, k):
    return q @ k.T

def second_linear(x):
    model = nn.Sequential(nn.Linear(7, 4), nn.GELU(), nn.Linear(4, 7))
    return model[1].weight

def nothing(x):
    result = None
    return result.shape

def past_the_end(ids):
    last = len(ids)
    return ids[last]

def pairs(ids):
    return [(ids[i], ids[i + 1]) for i in range(len(ids))]

def starts_plus_offsets(starts, T):
    return starts + torch.arange(T)

def load(linear, weight):
    linear.weight.copy_(weight)

def first_merge(pairs, merges):
    return min(pairs, key=merges.get)

def loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.view(-1), targets.view(-1))

def shift(ids):
    return ids[:, :-1]

def positions_added(x, table):
    return x + table.unsqueeze(1)

def row_max(rows):
    import numpy as np
    return np.max(rows, axis=-1, keepdims=True)

class NoSuper(nn.Module):
    def __init__(self):
        self.layer = nn.Linear(2, 2)

def append_ids(ids, next_ids):
    return torch.cat([ids, next_ids.unsqueeze(0)], dim=1)

def append_row(ids, next_ids):
    return torch.cat([ids, next_ids.reshape(1, -1)], dim=1)

def byte_tensor(data):
    return torch.tensor(list(data), dtype=torch.int8)

def logits(x, table):
    return x @ table

def mask_from_front(scores):
    T = scores.shape[0]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return scores.masked_fill(future, float("-inf"))

def head_on_ids(input_ids, lm_head):
    return lm_head(input_ids)
'''


@pytest.fixture(scope="module")
def cell():
    name = "/tmp/ipykernel_4242/1234.py"  # how Jupyter names a cell's code
    linecache.cache[name] = (len(CELL), None, CELL.splitlines(True), name)
    scope = {"torch": torch, "nn": nn, "scores": torch.zeros(11, 11)}  # a global named like a local
    exec(compile(CELL, name, "exec"), scope)  # noqa: S102 - the test's own code
    yield scope
    linecache.cache.pop(name, None)


def raised(function, *args, sizes=SIZES) -> BaseException:
    try:
        with case_sizes(sizes):
            function(*args)
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("no exception")


X = torch.randn(2, 6, 7, dtype=torch.float64)


def test_exception_shows_the_students_line_and_the_tensors_on_it(cell):
    exc = raised(lambda x: cell["Head"](5, 3).double()(x), X)
    text = explain_exception(exc)
    assert "RuntimeError in forward, line 8" in text and "`q = self.query(x)`" in text
    assert "self.query: nn.Linear(in_features=5, out_features=3)" in text
    assert "x: float64 (2, 6, 7) = (B, T, C)" in text
    assert "expects inputs whose last axis has size 5, and got 7 (C)" in text
    assert text.splitlines()[-1] == "(The error itself: RuntimeError: mat1 and mat2 shapes cannot be multiplied (12x7 and 5x3))"


def test_a_reduction_that_dropped_its_axis_is_suggested_with_keepdim(cell):
    text = explain_exception(raised(cell["centred"], X))
    assert "x: float64 (2, 6, 7) = (B, T, C)" in text and "the other 6 (T)" in text
    assert "mean (2, 6) has the shape of x (2, 6, 7) without its last axis" in text
    assert "keepdim=True" in text
    both = explain_exception(raised(cell["normalised"], X))  # mean is given its axis back, var is not
    assert "var (2, 6) has the shape of x (2, 6, 7) without its last axis" in both and "mean (2, 6) has" not in both
    other = explain_exception(raised(cell["offset"], X))  # 7 against 5: no reduction of x explains it
    assert "the other 5" in other and "keepdim" not in other


def test_a_matmul_or_copy_clash_is_not_called_elementwise_and_T_on_3d_is_named(cell):
    q = torch.randn(2, 6, 3, dtype=torch.float64)
    text = explain_exception(raised(cell["all_axes_swapped"], q, q))
    assert "A matrix product (@)" in text and "elementwise operation (+" not in text
    assert "k.T reverses all 3 axes of k (shape (3, 6, 2)); to swap the last two only, use .transpose(-2, -1)" in text


def test_clashes_that_name_their_likely_cause(cell):
    outer = explain_exception(raised(cell["starts_plus_offsets"], torch.arange(2), 6))
    assert "Both sides are 1-D (starts (2,) and one of length 6)" in outer and "a[:, None] + b" in outer
    transposed = explain_exception(raised(cell["load"], nn.Linear(7, 3).requires_grad_(False), torch.randn(7, 3)))
    assert "linear.weight (3, 7) is the shape of weight (7, 3) transposed: one of them needs .T" in transposed
    assert "without its last axis" not in transposed and "reduced over its last axis" not in transposed  # the transpose explains it; no keepdim guess
    unsqueezed = explain_exception(raised(cell["positions_added"], X, torch.randn(6, 7, dtype=torch.float64)))
    assert ".unsqueeze(1) inserts a size-1 axis at position 1" in unsqueezed and "Both sides are 1-D" not in unsqueezed
    untransposed = explain_exception(raised(cell["logits"], X, torch.randn(11, 7, dtype=torch.float64)))
    assert "table (11, 7) would fit transposed: table.T is (7, 11)" in untransposed
    front = explain_exception(raised(cell["mask_from_front"], torch.randn(2, 6, 6)))
    assert "future (2, 2) has the batch size B on every axis" in front and "x.shape[-1]" in front
    heads = explain_exception(raised(cell["mask_from_front"], torch.randn(2, 6, 6), sizes={"nh": 2, "T": 6}))  # nh in front
    assert "future (2, 2) has size 2 on every axis, the size of axis 0 of scores (2, 6, 6)" in heads


def test_an_error_whose_explanation_names_a_cause_says_which_and_a_plain_one_names_none(cell):
    named = dg.explain_error(raised(cell["starts_plus_offsets"], torch.arange(2), 6))
    assert named.cause == "an outer combination meant" and any("Both sides are 1-D" in line for line in named.lines)
    front = dg.explain_error(raised(cell["mask_from_front"], torch.randn(2, 6, 6)))
    assert front.cause == "a size read from the front"
    plain = dg.explain_error(raised(cell["shift"], torch.arange(6)))
    assert plain.cause is None and plain.lines == dg.explain_parts(raised(cell["shift"], torch.arange(6)))


def test_python_and_loss_errors_that_name_their_likely_cause(cell):
    none = explain_exception(raised(cell["first_merge"], [(1, 2), (3, 4)], {}))
    assert "dict.get returns None for a key that is not in the dict" in none and "math.inf" in none
    flat = explain_exception(raised(cell["loss"], torch.randn(2, 6, 5), torch.zeros(2, 6, dtype=torch.long)))
    assert "F.cross_entropy takes logits of shape (N, V)" in flat and "logits.reshape(-1, V)" in flat
    cat = explain_exception(raised(cell["append_ids"], torch.zeros(2, 6), torch.zeros(2)))
    assert "torch.cat joins tensors along dim 1" in cat and "make it (B, 1) with unsqueeze(1)" in cat
    row = explain_exception(raised(cell["append_row"], torch.zeros(2, 6), torch.zeros(2)))
    assert ".reshape(1, -1) makes a row, (1, N)" in row and "reshape(-1, 1) or unsqueeze(1)" in row
    byte = explain_exception(raised(cell["byte_tensor"], "é".encode()))
    assert "int8 holds the integers -128 ... 127 only" in byte and "torch.uint8 holds it" in byte
    numpy = explain_exception(raised(cell["row_max"], X))
    assert "numpy's keyword names (axis=, keepdims=)" in numpy and "x.max(dim=-1, keepdim=True).values" in numpy
    no_super = explain_exception(raised(cell["NoSuper"]))
    assert "call super().__init__() as the first line of __init__" in no_super
    indices = explain_exception(raised(cell["shift"], torch.arange(6)))
    assert "The subscript reads more axes than the tensor has (1)" in indices and "x[..., a:b]" in indices


def test_a_module_without_the_attribute_says_which_part_was_reached(cell):
    text = explain_exception(raised(cell["second_linear"], X))
    assert "The object reached here is a GELU, which has no weight" in text and "print(model)" in text
    assert "The object reached" not in explain_exception(raised(cell["nothing"], X))  # None is not a layer


def test_plain_python_values_on_the_line_and_an_index_past_the_end(cell):
    text = explain_exception(raised(cell["past_the_end"], [4, 5, 6]))
    assert "On that line: ids: a list of length 3 ([4, 5, 6]); last = 3." in text, text
    assert "ids[last] reads index 3 of ids, which has 3 items (valid indices 0 … 2)." in text, text


def test_an_error_inside_a_comprehension_names_the_function_around_it(cell):
    text = explain_exception(raised(cell["pairs"], [4, 5, 6]))
    assert "IndexError in a list comprehension in pairs, line " in text, text
    assert "ids[i + 1] reads index 3 of ids" in text, text


def test_exception_batched_matmul(cell):
    text = explain_exception(raised(lambda x: cell["Head"](7, 3).double()(x), X))
    assert "`scores = q @ q`" in text and "q: float64 (2, 6, 3) = (B, T, hs)" in text
    assert "scores:" not in text  # the line's target has no value yet: a global of that name is not it
    assert "a ends in 3 (hs), b's second-to-last axis has 6 (T)" in text


@pytest.mark.parametrize(
    ("name", "arg", "words"),
    [
        ("unpack", X[0], "x: float64 (6, 7) = (T, C)"),
        ("unpack", X[0], "unbatched input (T, C) has 2"),
        ("broadcast", X, "one has size 7 (C), the other 4"),
        ("dtypes", X, "different dtypes (double and float)"),
        ("view_after_transpose", X, ".contiguous() before .view"),
        ("bad_view", X, "cannot hold the 84 entries"),
        ("bad_dim", X, "dim=3 does not exist: the tensor has only 3 axes"),
        ("lookup", torch.tensor([3, 12]), "the largest index in ids is 12"),
    ],
)
def test_exception_messages_in_the_courses_words(cell, name, arg, words):
    text = explain_exception(raised(cell[name], arg))
    assert words in text, text
    assert text.splitlines()[-1].startswith("(The error itself: ")


def test_exception_sizes_from_the_argument_when_no_case_says():
    try:
        torch.ones(2, 6) + torch.ones(2, 7)
    except RuntimeError as exc:
        text = explain_exception(exc, sizes={"T": 6, "C": 7})
    assert "6 (T), the other 7 (C)" in text


def test_exception_without_anything_to_add_is_plain(cell):
    assert explain_exception(KeyError("k")) == "KeyError: 'k'"
    text = explain_exception(raised(cell["plain"], X))
    assert "ValueError in plain, line 36" in text and "my code is broken" in text


def test_exception_never_raises():
    class Nasty(Exception):
        def __str__(self):
            raise RuntimeError("no words")

        @property
        def __traceback__(self):
            raise RuntimeError("no traceback")

    assert explain_exception(Nasty()) == "Nasty"


def test_library_frames_are_not_the_students():
    assert dg._is_student("/tmp/ipykernel_123/456.py") and dg._is_student("<cell>")
    assert dg._is_student("<ipython-input-3-abc>")
    assert not dg._is_student(torch.__file__) and not dg._is_student(dg.__file__)
    assert not dg._is_student(math.__spec__.origin or "<frozen math>") and not dg._is_student("<frozen os>")


# --- Check: the error path --------------------------------------------------------------------


def _probe_head(cls) -> dict:
    with dg.case_sizes(SIZES):  # the probe names its case's sizes, as the lessons' probes do
        return {"out": cls(5, 3).double()(X)}


def test_check_in_a_notebook_turns_an_error_into_its_explanation(cell):
    check = Check("check_toy_diagnose_head", _probe_head, lambda d: "ok")
    with pytest.raises(CheckFailed) as failed:
        check(cell["Head"])
    assert "`q = self.query(x)`" in str(failed.value) and "(B, T, C)" in str(failed.value)
    assert isinstance(failed.value.__cause__, RuntimeError)


def test_check_record_keeps_the_first_line_and_adds_the_explanation(cell):
    check = Check("check_toy_diagnose_record", _probe_head, lambda d: "ok")
    record = check.record(cell["Head"])
    first, *rest = record.error.splitlines()
    assert first == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (12x7 and 5x3)"
    assert rest and "`q = self.query(x)`" in record.error and len(record.error) <= 2000
    assert record.not_implemented is False and not record.has_data
    blank = Check("check_toy_diagnose_blank", lambda f: f(), lambda d: "ok").record(lambda: (_ for _ in ()).throw(NotImplementedError()))
    assert blank.error == "NotImplementedError: " and blank.not_implemented is True


# --- trace and first_divergence ---------------------------------------------------------------


class Tiny(nn.Module):
    def __init__(self, twice: bool = False):
        super().__init__()
        self.twice = twice
        self.norm = nn.LayerNorm(4)
        self.mlp = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 4))

    def forward(self, x):
        x = x + self.norm(x) + (self.norm(x) if self.twice else 0)
        return x + self.mlp(x)


def tiny_pair():
    torch.manual_seed(0)
    good = Tiny().double()
    bad = Tiny(twice=True).double()
    bad.load_state_dict(good.state_dict())
    return good, bad


def test_trace_records_outputs_in_call_order_first_call_only():
    good, _ = tiny_pair()
    x = torch.randn(3, 4, dtype=torch.float64)
    steps = trace(good, x)
    assert list(steps) == ["norm", "mlp.0", "mlp.1", "mlp.2", "mlp"]
    assert list(trace(good, x, with_inputs=True))[:3] == ["norm (input)", "norm", "mlp (input)"]
    assert not good._forward_hooks and not good.mlp._forward_hooks  # hooks removed


def test_first_divergence_names_the_first_value_that_departs():
    good, bad = tiny_pair()
    x = torch.randn(3, 4, dtype=torch.float64)
    ours, theirs = trace(good, x, with_inputs=True), trace(bad, x, with_inputs=True)
    assert first_divergence(ours, ours, 1e-9, 1e-9) is None
    message = first_divergence(theirs, ours, 1e-9, 1e-9, known={"the input x": x})
    assert message.startswith("the first value that departs from the reference is the input of mlp (the MLP)")
    assert "plus the output of norm" in message
    missing = first_divergence({"norm": ours["norm"]}, trace(good, x), 1e-9, 1e-9)
    assert "mlp.0 was never called" in missing


def test_a_departing_value_that_is_a_sub_module_applied_or_undone_is_told_only_when_it_runs_so():
    norm = nn.LayerNorm(4, dtype=torch.float64)
    x = torch.randn(3, 4, dtype=torch.float64) * 3 + 1
    applied = first_divergence({"mlp (input)": norm(x)}, {"mlp (input)": x}, 1e-9, 1e-9, modules={"norm": norm})
    assert "It is exactly norm applied to the reference's value" in applied
    undone = first_divergence({"mlp (input)": x}, {"mlp (input)": norm(x)}, 1e-9, 1e-9, modules={"norm": norm})
    assert "It is the reference's value before norm" in undone
    other = first_divergence({"mlp (input)": x + 1}, {"mlp (input)": x}, 1e-9, 1e-9, modules={"norm": norm})
    assert "norm" not in other.split(";")[-1]  # no relation holds: none is told


class Ignores(Tiny):
    """Calls the MLP but returns the normalised stream: the MLP's output is computed and dropped."""

    def forward(self, x):
        x = x + self.norm(x)
        self.mlp(x)
        return x


def test_unused_outputs_finds_a_submodule_whose_output_forward_drops():
    good, _ = tiny_pair()
    ignores = Ignores().double()
    ignores.load_state_dict(good.state_dict())
    x = torch.randn(3, 4, dtype=torch.float64)
    assert dg.unused_outputs(good, x) == []
    assert dg.unused_outputs(ignores, x) == ["mlp"]  # the outermost name only, not mlp.0 ... mlp.2
    assert not ignores.mlp._forward_hooks  # hooks removed
    told = dg.unused_told(["mlp"], good, (x,))
    assert told.startswith("it calls mlp (the MLP) but never uses what it returns")
    assert dg.unused_told(["mlp"], ignores, (x,)) is None  # the reference ignores it too: nothing to tell
    assert dg.unused_told([], good, (x,)) is None


class Chain(nn.Module):
    """Two layers in a row; ``around`` adds a residual connection around each."""

    def __init__(self, around=False):
        super().__init__()
        self.around = around
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x) if self.around else layer(x)
        return x


def test_first_divergence_names_a_residual_added_around_a_layer():
    torch.manual_seed(0)
    good, around = Chain().double(), Chain(around=True).double()
    around.load_state_dict(good.state_dict())
    x = torch.randn(3, 4, dtype=torch.float64)
    message = first_divergence(trace(around, x, with_inputs=True), trace(good, x, with_inputs=True), 1e-9, 1e-9)
    assert "the input of layers.1" in message and "plus the input of layers.0" in message
    assert "a residual connection around layers.0" in message


def test_difference_from_a_value_of_the_forward_pass():
    good, _ = tiny_pair()
    x = torch.randn(3, 4, dtype=torch.float64)
    steps = trace(good, x)
    out = good(x).detach()
    assert difference_from(out - 0.5 * steps["mlp"], out, steps, 1e-9, 1e-9) == "minus 0.5 × the output of mlp (the MLP)"
    assert difference_from(out + 0.1, out, steps, 1e-9, 1e-9) is None


def test_token_ids_fed_to_a_linear_layer_are_named(cell):
    for linear in (nn.Linear(7, 11), nn.Linear(6, 11)):  # the shapes clash, or only the dtypes
        text = explain_exception(raised(cell["head_on_ids"], torch.zeros(2, 6, dtype=torch.long), linear))
        assert "input_ids holds integers (token ids), not vectors" in text and "embedding lookup" in text


def test_a_slice_along_the_wrong_axis_is_read_from_the_shapes():
    ids = torch.arange(21.0).reshape(3, 7)
    text = explain_mismatch(ids[..., 1:], ids[1:], what="shift", atol=TOL, rtol=TOL, axes=("B", "T"), sizes={"B": 3, "T": 6})
    assert "Axis 1 (T) kept 1 more and axis 0 (B) 1 fewer than expected: the slice was made along the wrong axis" in text
    # one axis too short is not a slice on the wrong axis
    assert "wrong axis" not in explain_mismatch(ids[..., 1:], ids[:, 2:], what="shift", atol=TOL, rtol=TOL)


def test_an_output_cut_short_is_told_only_when_it_is_the_references_start():
    ids = torch.arange(21.0).reshape(3, 7)
    text = explain_mismatch(ids, ids[:, :2], what="f", atol=TOL, rtol=TOL)
    assert "are the reference's first 2, and the other 5 are missing: the work stopped early" in text
    for other in (ids[:, 1:3], ids[:, :2] + 1, ids[:2, :2]):  # another part, other values, two axes short
        assert "stopped early" not in explain_mismatch(ids, other, what="f", atol=TOL, rtol=TOL)


def test_a_term_scaled_by_a_square_root_is_read_from_the_difference():
    good, _ = tiny_pair()
    x = torch.randn(3, 4, dtype=torch.float64)
    steps = trace(good, x)
    out = good(x).detach()
    said = difference_from(out + (math.sqrt(6) - 1) * steps["mlp"], out, steps, 1e-9, 1e-9)
    assert said.startswith("1.449 × the output of mlp") and "= sqrt(6)" in said
    assert "sqrt" not in difference_from(out + 2 * steps["mlp"], out, steps, 1e-9, 1e-9)  # 3 is a whole number


def test_nan_and_inf_name_where_they_come_from():
    e = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64)
    nan = explain_mismatch(e, e.masked_fill(torch.eye(2, dtype=torch.bool), float("nan")), what="w", atol=1e-9, rtol=1e-9)
    assert "a 0/1 mask multiplied by -inf gives NaN" in nan and "overflow" not in nan
    inf = explain_mismatch(e, e.masked_fill(torch.eye(2, dtype=torch.bool), float("inf")), what="w", atol=1e-9, rtol=1e-9)
    assert "overflow" in inf and "NaN comes from" not in inf


def _from_the_front(k):
    return k.transpose(1, 2)


def _past_the_front(k):
    return k.transpose(-3, -1)


def test_a_positive_dim_past_the_last_axis_is_told_to_count_from_the_end():
    text = explain_exception(raised(_from_the_front, torch.zeros(4, 3)))
    assert "dim=2 does not exist" in text and "Count the axes from the end" in text
    assert "Count the axes" not in explain_exception(raised(_past_the_front, torch.zeros(4, 3)))


def _mask_from_position_one(x):
    T = x.shape[1]
    scores = x @ x.transpose(-2, -1)  # (..., T, T)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return scores.masked_fill(future, float("-inf"))


def test_a_square_built_from_another_size_than_its_neighbour_is_named():
    text = explain_exception(raised(_mask_from_position_one, torch.zeros(8, 5), sizes={"T": 8, "C": 5}))
    assert "future (5, 5) has the size C where scores (8, 8) has T: it was built from C where T was meant" in text


def _batched_mask_from_the_last_axis(x):
    T = x.shape[-1]  # C: the size of the features, not of the sequence
    scores = x @ x.transpose(-2, -1)  # (B, T, T)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return scores.masked_fill(future, float("-inf"))


def test_the_square_beside_batched_scores_is_named_too():
    text = explain_exception(raised(_batched_mask_from_the_last_axis, torch.zeros(2, 8, 5), sizes={"B": 2, "T": 8, "C": 5}))
    assert "future (5, 5) has the size C where scores (2, 8, 8) has T" in text


def test_the_package_has_short_modules_without_cycles_and_never_imports_core():
    """Each module of helpers/checks/diagnose/ is at most 350 lines and imports only modules of the
    package below it (no cycle), and none imports helpers.checks.core (core imports the package)."""
    folder = Path(dg.__file__).parent
    imports = {}
    for path in sorted(folder.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 350, path.name
        assert not re.search(r"^\s*(from|import) helpers\.checks(\.core\b| import .*\bcore\b)", text, re.M), path.name
        imports[path.stem] = set(re.findall(r"^from helpers\.checks\.diagnose\.(\w+) import", text, re.M))
    done: set[str] = set()
    while len(done) < len(imports):  # peel off the modules whose imports are all peeled off already
        ready = {name for name, needs in imports.items() if name not in done and needs <= done}
        assert ready, f"an import cycle among {sorted(set(imports) - done)}"
        done |= ready
