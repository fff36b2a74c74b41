"""Every rule of the diagnosis layer names no cause where its cause is absent, and names it where
it is present.

The rules come from the package itself (``RULES``, the mismatch rules; ``BROADCAST_HINTS``, the
hints of a broadcasting clash), so a new rule is run here without being listed: it must stay
silent on a correct output, on the reference plus independent noise, and on outputs off by
patterns that are not its cause; and it needs an example of its own cause below (the test that
every rule has one fails until it is added).
"""

from __future__ import annotations

import pytest
import torch

from helpers.checks import diagnose as dg
from helpers.checks.diagnose import Clash, Finding

TOL = 1e-9
SIZES = {"B": 2, "T": 6, "C": 7, "hs": 3}


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


E = randn(2, 6, 3)  # (B, T, hs)
SQUARE = randn(2, 5, 5, seed=1)  # (B, T, T): a transpose of the last two axes keeps the shape
PROBS = torch.softmax(randn(2, 5, 5, seed=2), dim=-1)  # sums to 1 along the last axis
AXES = {(2, 6, 3): ("B", "T", "hs"), (2, 5, 5): ("B", "T", "T")}


def case(got, exp, again=None, alone=None, dtype=None) -> dg._Case:
    sizes = SIZES if exp.shape == E.shape else {"B": 2, "T": 5}
    return dg._Case(exp, got, TOL, TOL, AXES[tuple(exp.shape)], sizes, again, alone, dtype)


def consistent(got, exp) -> dg._Case:
    """A case whose output is ``got`` on every call and for every batch element alone: no
    determinism or batch problem to find."""
    return case(got, exp, again=got.clone(), alone=[got[b : b + 1].clone() for b in range(got.shape[0])])


def noise_like(t: torch.Tensor, seed: int) -> torch.Tensor:
    return 0.5 * torch.randn(t.shape, generator=torch.Generator().manual_seed(seed), dtype=t.dtype)


def absent(exp: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    """Outputs that no mismatch rule's cause explains: the reference itself, plus noise
    everywhere, its square, its tanh, noise on part of the positions, one entry off."""
    part = exp.clone()
    part[:, 3:] += noise_like(exp[:, 3:], seed + 1)
    one = exp.clone()
    one[1, 2, 1] += 0.75
    return {"correct": exp.clone(), "noise": exp + noise_like(exp, seed), "square": exp**2,
            "tanh": torch.tanh(exp), "noise on T ≥ 3": part, "one entry": one}


REFERENCES = {"(B, T, hs)": E, "(B, T, T)": SQUARE, "softmax rows": PROBS}
ABSENT = [(ref, kind, got) for ref, exp in REFERENCES.items()
          for kind, got in absent(exp, 10 * len(ref)).items()]


def rule_name(rule) -> str:
    return rule.__name__


@pytest.mark.parametrize("rule", dg.RULES, ids=rule_name)
@pytest.mark.parametrize(("reference", "kind", "got"), ABSENT, ids=[f"{r}-{k}" for r, k, _ in ABSENT])
def test_no_mismatch_rule_names_a_cause_that_is_absent(rule, reference, kind, got):
    found = rule(consistent(got, REFERENCES[reference]))
    assert isinstance(found, Finding), rule.__name__
    assert found.cause is None, f"{rule.__name__} on {reference}, {kind}: {found}"


def _rows_mixed():
    return case(E.flip(0), E, alone=[E[:1].clone(), E[1:].clone()])


def _shifted():
    got = E.clone()
    got[:, 1:] = E[:, :-1]
    return consistent(got, E)


def _part_wrong():
    got = E.clone()
    got[:, 4:] += 1
    return consistent(got, E)


#: for each mismatch rule, a case of its own cause (a rule that only says where: the case it describes)
OWN_CAUSE = {
    "rule_shape": lambda: consistent(E.transpose(1, 2), E),
    "rule_dtype": lambda: consistent(E.float(), E),
    "rule_nonfinite": lambda: consistent(torch.where(E > 1, torch.nan, E), E),
    "rule_determinism": lambda: case(E * 2, E, again=E * 3),
    "_correct": lambda: consistent(E.clone(), E),
    "rule_batch": _rows_mixed,
    "rule_rounded": lambda: consistent((3 * E).floor(), 3 * E),
    "rule_float32_precision": lambda: consistent(E.float().double(), E),  # the reference rounded to float32
    "rule_factor": lambda: consistent(-E, E),
    "rule_transposed": lambda: consistent(SQUARE.transpose(-1, -2), SQUARE),
    "rule_normalised_axis": lambda: consistent(torch.softmax(randn(2, 5, 5, seed=2), dim=-2), PROBS),
    "rule_slice_factors": lambda: consistent(E * torch.arange(1.0, 7.0, dtype=torch.float64).view(1, 6, 1), E),
    "rule_fibre_factors": lambda: consistent(E * (1 + randn(2, 6, 1, seed=5).abs()), E),
    "rule_slice_offsets": lambda: consistent(E + torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64), E),
    "rule_permuted": lambda: consistent(E.flip(1), E),
    "rule_scrambled": lambda: consistent(E.transpose(1, 2).reshape(2, 6, 3), E),
    "rule_shifted": _shifted,
    "rule_localised": _part_wrong,
}


def test_every_mismatch_rule_has_an_example_of_its_cause():
    assert sorted(OWN_CAUSE) == sorted(rule.__name__ for rule in dg.RULES)


@pytest.mark.parametrize("rule", dg.RULES, ids=rule_name)
def test_each_mismatch_rule_names_its_own_cause(rule):
    found = rule(OWN_CAUSE[rule.__name__]())
    assert found.established, rule.__name__
    if rule in dg.DESCRIBE_ONLY:
        assert found.cause is None, found  # says where (or that it is right), never why
    else:
        assert found.cause, found


def test_the_rule_that_names_the_cause_is_the_one_diagnose_reports():
    for name in ("rule_shape", "rule_dtype", "rule_nonfinite", "rule_factor", "rule_permuted", "rule_scrambled"):
        c = OWN_CAUSE[name]()
        rule, message = dg.diagnose(c.expected, c.got, what="f(x)", atol=TOL, rtol=TOL, axes=c.axes, sizes=c.sizes,
                                    again=c.again, alone=c.alone)
        assert rule == name, (name, message)


# --- the hints of a broadcasting clash ------------------------------------------------------


#: clashes none of whose hints applies: sizes that simply differ, on a line without .T, unsqueeze,
#: a reduction, a square built from the batch size, or two 1-D operands
UNRELATED_CLASHES = {
    "bias of the wrong size": Clash([("x", randn(2, 6, 4)), ("bias", randn(5))], "y = x + bias",
                                    {"B": 2, "T": 6, "C": 4}, 4, 5, 2),
    "two lengths": Clash([("q", randn(2, 6, 3)), ("k", randn(2, 5, 3))], "s = q * k", {"B": 2, "T": 6}, 6, 5, 1),
    "two squares": Clash([("a", randn(4, 4)), ("b", randn(3, 3))], "c = a + b", {"C": 4}, 4, 3, 1),
}

#: for each hint, a clash of its own cause
HINT_CAUSE = {
    "_reversed_axes": Clash([("q", randn(2, 6, 3)), ("k.T", randn(3, 6, 2))], "return q @ k.T", None, 3, 6, 1),
    "_transposed_pair": Clash([("linear.weight", randn(3, 7)), ("weight", randn(7, 3))],
                              "linear.weight.copy_(weight)", None, 3, 7, 1),
    "_outer_pair": Clash([("starts", torch.arange(2)), ("offsets", torch.arange(6))], "starts + offsets", None, 2, 6, 0),
    "_built_from_batch": Clash([("scores", randn(2, 6, 6)), ("future", torch.ones(2, 2))],
                               "scores.masked_fill(future, 0)", {"B": 2, "T": 6}, 6, 2, 2),
    "_kept_no_axis": Clash([("x", randn(2, 6, 7)), ("mean", randn(2, 6))], "x - mean", SIZES, 7, 6, 2),
    "_unsqueezed": Clash([("x", randn(2, 6, 7)), ("pos", randn(6, 7))], "x + pos.unsqueeze(1)", SIZES, 2, 6, 0),
    "_dropped_axis": Clash([("x", randn(2, 6, 7))], "x / x.sum(dim=-1)", SIZES, 6, 7, 2),
    "_copied_into_other_sizes": Clash([("merged", torch.nn.Linear(12, 12)), ("base", torch.nn.Linear(12, 8))],
                                      "merged.weight.copy_(base.weight + delta)", None, 12, 8, 0),
    "_star_for_matmul": Clash([("B", randn(8, 3)), ("A", randn(3, 12))], "W += scale * (B * A)", None, 3, 12, 1),
    "_reduced_here": Clash([("exp", randn(2, 6, 6))], "weights = exp / exp.sum(dim=-1)", {"B": 2, "T": 6}, 6, 2, 1),
    "_one_axis_misplaced": Clash([("x", randn(3, 5, 4)), ("pos", randn(5, 1, 4))], "return x + pos",
                                 {"B": 3, "T": 5, "C": 4}, 3, 5, 0),
    "_merged_axes": Clash([("ids", torch.zeros(3, 7, dtype=torch.long)), ("positions", torch.arange(21))],
                          "x = emb(ids) + pos(positions)", {"B": 3, "T": 7}, 7, 21, 1),
    "_per_row_vector": Clash([("hidden", randn(4, 6, 12)), ("lengths", torch.ones(4))],
                             "mean = hidden.sum(dim=1) / lengths", {"B": 4, "T": 6, "C": 12}, 12, 4, 1),
}


def test_a_dropped_axis_is_guessed_only_on_a_line_that_reduces_without_keepdim():
    """The same shapes on a line with no reduction (or one that keeps its axis): no guess."""
    for source in ("x / total", "x / x.sum(dim=-1, keepdim=True)"):
        assert not dg.broadcast_hints(Clash([("x", randn(2, 6, 7))], source, SIZES, 6, 7, 2)), source


# --- a size written into the failing line ----------------------------------------------------

SHAPE_ERROR = RuntimeError("shape '[-1, 65]' is invalid for input of size 105")


@pytest.mark.parametrize(("exc", "source", "values"), [
    (SHAPE_ERROR, "logits.view(-1, V)", [("V", 7)]),  # the size variable holds this case's size
    (SHAPE_ERROR, "logits.view(-1, 7)", []),  # a number that is one of this case's sizes
    (SHAPE_ERROR, "x = torch.randn(3, generator=g) * 10", []),  # one digit, and a number outside a size call
    (SHAPE_ERROR, "y = x.view(B, T, C)  # (B, T, 65)", [("B", 3), ("T", 5)]),  # a number in a comment
    (ValueError("too many values to unpack (expected 3)"), "a, b, c = x.view(-1, 65)", []),  # not a shape error
], ids=["variable", "a size of the case", "no size call", "comment", "other error"])
def test_no_size_written_in_where_the_line_has_none(exc, source, values):
    assert dg._sizes_written_in(exc, source, values, {"B": 3, "T": 5, "V": 7}) == []


@pytest.mark.parametrize(("source", "values", "words"), [
    ("logits.view(-1, 65)", [], "65 is written into that line"),
    ("w.copy_(qkv[k * C : (k + 1) * C])", [("C", 768), ("k", 0)], "C = 768 on that line, but this case's C is 12"),
], ids=["number", "variable"])
def test_a_size_written_in_is_told(source, values, words):
    told = dg._sizes_written_in(SHAPE_ERROR, source, values, {"B": 3, "T": 5, "V": 7, "C": 12})
    assert len(told) == 1 and words in told[0] and dg.SIZE_WRITTEN_IN in told[0], told


@pytest.mark.parametrize("hint", dg.BROADCAST_HINTS, ids=rule_name)
@pytest.mark.parametrize("clash", list(UNRELATED_CLASHES), ids=str)
def test_no_broadcast_hint_names_a_cause_that_is_absent(hint, clash):
    found = hint(UNRELATED_CLASHES[clash])
    assert isinstance(found, Finding) and found.cause is None and not found, (hint.__name__, found)
    assert dg.broadcast_hints(UNRELATED_CLASHES[clash]).cause is None


def test_every_broadcast_hint_has_an_example_of_its_cause():
    assert sorted(HINT_CAUSE) == sorted(hint.__name__ for hint in dg.BROADCAST_HINTS)


@pytest.mark.parametrize("hint", dg.BROADCAST_HINTS, ids=rule_name)
def test_each_broadcast_hint_names_its_own_cause(hint):
    found = hint(HINT_CAUSE[hint.__name__])
    assert found.cause and found.established, (hint.__name__, found)
    assert dg.broadcast_hints(HINT_CAUSE[hint.__name__]).cause, hint.__name__


# --- the meanings of PyTorch's messages -----------------------------------------------------


CLASH = "The size of tensor a (4) must match the size of tensor b (5) at non-singleton dimension 2"

#: messages whose meaning names no cause (it says what the message means, not why it happened)
PLAIN_ERRORS = [
    RuntimeError("shape '[2, 3]' is invalid for input of size 7"),
    IndexError("index 9 is out of bounds for dimension 0 with size 6"),
    ValueError("too many values to unpack (expected 3)"),
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (12x7 and 3x5)"),
    IndexError("Dimension out of range (expected to be in range of [-2, 1], but got -3)"),
    RuntimeError(CLASH),
]


@pytest.mark.parametrize("exc", PLAIN_ERRORS, ids=str)
def test_a_meaning_names_no_cause_that_is_absent(exc):
    values = list(UNRELATED_CLASHES["bias of the wrong size"].values)
    found = dg._meaning(exc, SIZES, values, "y = x + bias")
    assert found and found.cause is None, found


def test_a_meaning_names_its_cause_where_the_line_shows_it():
    fits = dg._meaning(RuntimeError("mat1 and mat2 shapes cannot be multiplied (12x7 and 3x7)"), SIZES,
                       [("w", randn(3, 7))], "x @ w")
    assert fits.cause == "a matrix that needs .T" and "would fit transposed" in fits.established
    front = dg._meaning(IndexError("Dimension out of range (expected to be in range of [-2, 1], but got 2)"), SIZES)
    assert front.cause == "an axis counted from the front" and "Count the axes from the end" in front.established
    clash = dg._meaning(RuntimeError("The size of tensor a (7) must match the size of tensor b (6) at non-singleton "
                                     "dimension 2"), SIZES, list(HINT_CAUSE["_kept_no_axis"].values), "x - mean")
    assert clash.cause == "a reduction without keepdim"


def test_keepdim_is_named_only_for_the_two_tensors_that_clash():
    """A (N,) tensor that is (N, V) without its last axis, on a line whose clash (V against 5) is between
    other tensors (one_hot(wanted) is (N, 5)): the reduction is not what raised."""
    values = [("log_probs", randn(6, 7)), ("wanted", torch.arange(6))]
    clash = dg._meaning(RuntimeError("The size of tensor a (7) must match the size of tensor b (5) at non-singleton "
                                     "dimension 1"), SIZES, values, "picked = (log_probs * F.one_hot(wanted)).sum(dim=-1)")
    assert clash.cause is None and "keepdim" not in clash.established


def test_none_in_arithmetic_is_named_only_from_an_attribute_the_line_shows_as_none():
    error = TypeError("unsupported operand type(s) for +: 'Tensor' and 'NoneType'")
    line = "out = x @ self.base.weight.T + self.base.bias"
    named = dg._meaning(error, SIZES, [("x", randn(5, 7)), ("self.base.bias", None)], line)
    assert named.cause == "a layer without a bias" and "bias=False" in named.established
    other = dg._meaning(error, SIZES, [("x", randn(5, 7)), ("self.offset", None)], "out = x + self.offset")
    assert other.cause == "an attribute that is None"
    plain = dg._meaning(error, SIZES, [("x", randn(5, 7)), ("offset", None)], "out = x + offset")
    assert plain.cause is None  # a plain name: nothing on the line says what it was meant to hold


def test_a_tensor_looked_up_in_a_list_is_told_only_when_the_line_does_it():
    p, group = torch.ones(3), [torch.ones(3), torch.zeros(2)]
    told = dg._tensor_in_list("others = [p for p in params if p not in decayed]", [("p", p), ("decayed", group)])
    assert len(told) == 1 and "compares the tensor p with each tensor of decayed by ==" in told[0]
    for source, values in (("x = p + q", [("p", p), ("q", p)]),  # no `in`
                           ("ok = name in names", [("name", "a"), ("names", ["a"])]),  # strings, not tensors
                           ("ok = p in ids", [("p", p), ("ids", [1, 2])]),  # a list without tensors
                           ("total = sum(q.sum() for q in group)", [("q", p), ("group", group)])):  # a loop's in
        assert dg._tensor_in_list(source, values) == [], source


def test_a_tensors_truth_value_is_told_only_for_the_error_it_raises_and_a_name_the_line_tests():
    mask, ambiguous = torch.ones(2, 3, dtype=torch.bool), RuntimeError(
        "Boolean value of Tensor with more than one value is ambiguous")
    for line in ("if not mask:", "keep = mask or default", "while mask:"):
        (told,) = dg.exceptions._truth_of_a_tensor(ambiguous, line, [("mask", mask)])
        assert "truth value of mask, a tensor of 6 values" in told and "`mask is None`" in told, line
    for exc, line, values in ((ambiguous, "if mask is None:", [("mask", mask)]),  # compared with None: not the cause
                              (ambiguous, "if not mask.any():", [("mask", mask)]),
                              (ambiguous, "if not flag:", [("flag", torch.ones(1, dtype=torch.bool))]),  # one value
                              (RuntimeError("shape mismatch"), "if not mask:", [("mask", mask)])):  # another error
        assert dg.exceptions._truth_of_a_tensor(exc, line, values) == [], line


def test_float32_precision_is_not_said_of_a_near_factor_per_row():
    """Another eps in a norm scales each row by a factor a hair from 1: systematic, not rounding."""
    rows = 1 + 1e-7 * torch.arange(1.0, 13.0, dtype=torch.float64).view(2, 6, 1)
    assert dg.rule_float32_precision(consistent(E * rows, E)).cause is None
    assert dg.rule_float32_precision(consistent(E + 1e-7, E)).cause is None


def test_a_transposed_mask_against_batched_scores_and_a_1d_arange_beside_a_bystander_are_named():
    mask = dg.broadcast_hints(Clash([("scores", randn(2, 3, 3, 7)), ("mask", torch.ones(7, 3, dtype=torch.bool))],
                                    "w = scores.masked_fill(~mask, -1e9)", None, 3, 7, 3))
    assert "the last two axes of scores (2, 3, 3, 7) the other way round" in mask.established and mask.cause
    outer = dg.broadcast_hints(Clash([("keys", torch.arange(7)), ("x", randn(3, 2, 13))],
                                     "mask = keys <= torch.arange(T_new, device=x.device) + 5", None, 7, 2, 0))
    assert "Both sides are 1-D" in outer.established and outer.cause
    # the same sizes on a line that makes no 1-D tensor: x may be what clashed, so nothing is said
    assert not dg.broadcast_hints(Clash([("keys", torch.arange(7)), ("x", randn(3, 2, 13))], "y = x + keys", None, 7, 2, 0)).cause
