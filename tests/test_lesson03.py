"""Lesson 03: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks."""

import pytest
import torch
from harness import Catalogue, HiddenOnlyTests

from helpers.checks.attention import check_attention_head, course_mask_in, known_good_causal_mask

A = "03-self-attention"

# a correct head that calls the notebook's apply_causal_mask instead of masking by itself, as many
# students write it: a mistake in the mask must still cost only the causal-mask exercise
HEAD_USES_MASK = {"attention-head": [('scores.masked_fill(future, float("-inf"))', "apply_causal_mask(scores)")]}
FILL = 'return scores.masked_fill(future, float("-inf"))'
MASK_BLANK = [("    T = scores.shape[-1]\n", "    raise NotImplementedError()  # not written yet\n")]

# name -> (exercise, edits of the solution, words the feedback must contain[, edits of other
# exercises that keep them correct but make them use this one])
MISTAKES = {
    "mask-inverted": ("causal-mask", [("diagonal=1)", "diagonal=0)"), ("masked_fill(future,", "masked_fill(~future,")], "inverted"),
    "mask-hides-diagonal": ("causal-mask", [("diagonal=1)", "diagonal=0)")], "itself"),
    "mask-finite": ("causal-mask", [('float("-inf")', "-1e9")], "finite"),
    "mask-in-place": ("causal-mask", [("scores.masked_fill(future,", "scores.masked_fill_(future,")], "in place"),
    "mask-lower-triangle-kept-future": ("causal-mask", [("diagonal=1)", "diagonal=2)")], "query 0 attends to key 1"),
    "head-sqrt-emb-dim": ("attention-head", [("math.sqrt(self.head_dim)", "math.sqrt(x.shape[-1])")], "sqrt(emb_dim)"),
    "head-no-scaling": ("attention-head", [(" / math.sqrt(self.head_dim)", "")], "forgot to scale"),
    "head-mask-after-softmax": (
        "attention-head",
        [('torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)', "torch.softmax(scores, dim=-1).masked_fill(future, 0.0)")],
        "after the softmax",
    ),
    "head-softmax-dim": ("attention-head", [('float("-inf")), dim=-1)', 'float("-inf")), dim=-2)')], "dim=-2"),
    "head-no-mask": ("attention-head", [('scores.masked_fill(future, float("-inf"))', "scores")], "forgot the causal mask"),
    "head-k-at-q": ("attention-head", [("q @ k.transpose(-2, -1)", "k @ q.transpose(-2, -1)")], "k @ q.T"),
    "head-weights-times-x": ("attention-head", [("return weights @ v", "return weights @ x")], "instead of by the values"),
    # the head calls apply_causal_mask: the mask's mistake must not cost the head's points too
    "mask-inverted-head-uses-it": (
        "causal-mask", [("diagonal=1)", "diagonal=0)"), ("masked_fill(future,", "masked_fill(~future,")], "inverted",
        HEAD_USES_MASK,
    ),
    "mask-hides-diagonal-head-uses-it": ("causal-mask", [("diagonal=1)", "diagonal=0)")], "itself", HEAD_USES_MASK),
    "mask-keeps-future-head-uses-it": (
        "causal-mask", [("diagonal=1)", "diagonal=2)")], "query 0 attends to key 1", HEAD_USES_MASK,
    ),
    "mask-in-place-head-uses-it": (
        "causal-mask", [("scores.masked_fill(future,", "scores.masked_fill_(future,")], "in place", HEAD_USES_MASK,
    ),
    "mask-blank-head-uses-it": ("causal-mask", MASK_BLANK, "NotImplementedError", HEAD_USES_MASK),
    "mask-fills-zero": ("causal-mask", [('float("-inf"))  # (..., T, T)', "0.0)  # (..., T, T)")], "should be -inf, got 0"),
    "mask-times-minus-inf": ("causal-mask", [(FILL, 'return scores + future * float("-inf")')], "NaN values where the reference is finite"),
    "mask-float-matrix": ("causal-mask", [("torch.ones(T, T, dtype=torch.bool, device=scores.device)", "torch.ones(T, T)")], "dtype=torch.bool"),
    "head-values-from-key": ("attention-head", [("v = self.value(x)", "v = self.key(x)")], "value was never called"),
    "head-scales-output": (
        "attention-head",
        [("/ math.sqrt(self.head_dim)  # (B, T, T)", "  # (B, T, T)"), ("return weights @ v", "return weights @ v / math.sqrt(self.head_dim)")],
        "divided the output by sqrt(head_dim)",
    ),
    "head-softmax-no-dim": ("attention-head", [('float("-inf")), dim=-1)', 'float("-inf")))'), ("torch.softmax(", "F.softmax(")], "over axis 0, the batch"),
    "head-sqrt-T": ("attention-head", [("math.sqrt(self.head_dim)", "math.sqrt(T)")], "sqrt(T) = sqrt(6)"),
    "head-divides-by-head-dim": ("attention-head", [("/ math.sqrt(self.head_dim)", "/ self.head_dim")], "not by its square root"),
    "head-hides-diagonal": ("attention-head", [("diagonal=1)", "diagonal=0)")], "hides the diagonal"),
}

# name -> (exercise, edits, words): mistakes that only the hidden tests (other shapes, dtypes) see
HIDDEN_ONLY = {
    "mask-float32-copy": (
        "causal-mask",
        [(FILL, 'out = torch.zeros(scores.shape)\n    out[:] = scores\n    out[..., future] = float("-inf")\n    return out')],
        "precision was lost",
    ),
    "mask-indexes-from-the-front": (
        "causal-mask",
        [(FILL, 'out = scores.clone()\n    for i in range(T):\n        out[i, i + 1:] = float("-inf")\n    return out')],
        "index from the end",
    ),
    "head-unbatched-keeps-batch-axis": (
        "attention-head", [("T = x.shape[-2]", "x = x.unsqueeze(0) if x.dim() == 2 else x\n        T = x.shape[-2]")],
        "extra axis of size 1",
    ),
}

# every "must" / "do not" of an exercise's task -> the catalogued mistakes that break it
REQUIREMENTS = {
    "causal-mask": {"Do not modify `scores` in place": ["mask-in-place"]},
    "attention-head": {
        "must work on a single sequence `(T, C)` and on a batch `(B, T, C)`": [
            "head-softmax-no-dim", "head-unbatched-keeps-batch-axis",
        ],
    },
}

ALTERNATIVES = {
    "mask-where": {"causal-mask": '''
def apply_causal_mask(scores):
    T = scores.shape[-1]
    allowed = torch.tril(torch.ones(T, T)).bool()
    return torch.where(allowed, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
'''},
    "mask-clone-and-index": {"causal-mask": '''
def apply_causal_mask(scores):
    out = scores.clone()
    rows, cols = torch.triu_indices(scores.shape[-2], scores.shape[-1], offset=1)
    out[..., rows, cols] = float("-inf")
    return out
'''},
    "head-einsum": {"attention-head": '''
class AttentionHead(nn.Module):
    def __init__(self, emb_dim, head_dim):
        super().__init__()
        self.head_dim = head_dim
        self.query = nn.Linear(emb_dim, head_dim, bias=False)
        self.key = nn.Linear(emb_dim, head_dim, bias=False)
        self.value = nn.Linear(emb_dim, head_dim, bias=False)

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = torch.einsum("...id,...jd->...ij", q, k) * self.head_dim ** -0.5
        weights = apply_causal_mask(scores).softmax(dim=-1)
        return torch.einsum("...ij,...jd->...id", weights, v)
'''},
    "head-fused-sdpa": {"attention-head": '''
class AttentionHead(nn.Module):
    def __init__(self, emb_dim, head_dim):
        super().__init__()
        self.head_dim = head_dim
        self.query = nn.Linear(emb_dim, head_dim, bias=False)
        self.key = nn.Linear(emb_dim, head_dim, bias=False)
        self.value = nn.Linear(emb_dim, head_dim, bias=False)

    def forward(self, x):
        return F.scaled_dot_product_attention(self.query(x), self.key(x), self.value(x), is_causal=True)
'''},
}


def test_catalogue_covers_every_exercise_and_a_head_that_uses_the_mask():
    for exercise in ("causal-mask", "attention-head"):
        assert sum(entry[0] == exercise for entry in MISTAKES.values()) >= 3, exercise
    assert sum(len(entry) > 3 for entry in MISTAKES.values()) >= 3


@pytest.mark.parametrize("shape", [(6, 6), (2, 5, 5), (3, 2, 9, 9), (1, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_checks_mask_is_the_references(shape, dtype):
    from helpers.reference.attention import apply_causal_mask

    scores = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert torch.equal(known_good_causal_mask(scores), apply_causal_mask(scores))


def _head_calling(mask_name: str):
    """A correct head, defined in a namespace of its own, that calls ``mask_name`` by name."""
    scope = {}
    exec(
        "import math, torch\n"
        "from torch import nn\n"
        "class AttentionHead(nn.Module):\n"
        "    def __init__(self, emb_dim, head_dim):\n"
        "        super().__init__()\n"
        "        self.head_dim = head_dim\n"
        "        self.query = nn.Linear(emb_dim, head_dim, bias=False)\n"
        "        self.key = nn.Linear(emb_dim, head_dim, bias=False)\n"
        "        self.value = nn.Linear(emb_dim, head_dim, bias=False)\n"
        "    def forward(self, x):\n"
        "        q, k, v = self.query(x), self.key(x), self.value(x)\n"
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)\n"
        f"        return torch.softmax({mask_name}(scores), dim=-1) @ v\n",
        scope,
    )
    return scope


def test_the_head_check_lends_the_head_a_correct_mask_and_gives_the_students_back():
    def inverted(scores):
        T = scores.shape[-1]
        return scores.masked_fill(torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))

    scope = _head_calling("apply_causal_mask")
    scope["apply_causal_mask"] = inverted
    check_attention_head(scope["AttentionHead"])  # passes: the mask's mistake is not the head's
    assert scope["apply_causal_mask"] is inverted, "the notebook's own function is put back"
    with course_mask_in(scope["AttentionHead"]):
        assert scope["apply_causal_mask"] is not inverted
    assert scope["apply_causal_mask"] is inverted
    scope["apply_causal_mask"] = lambda scores, T: inverted(scores)  # another signature: left alone
    with course_mask_in(scope["AttentionHead"]):
        assert torch.isneginf(scope["apply_causal_mask"](torch.zeros(3, 3), 3)).sum() == 6


class TestCatalogue(HiddenOnlyTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, hidden_only=HIDDEN_ONLY, requirements=REQUIREMENTS)
