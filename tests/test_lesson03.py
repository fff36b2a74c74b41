"""Lesson 03: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks."""

import pytest
import torch
from harness import CatalogueTests, catalogue

from helpers.checks.attention import check_attention_head, course_mask_in, known_good_causal_mask

A = "03-self-attention"


def test_three_mask_mistakes_are_also_graded_with_a_head_that_calls_the_mask():
    """A mistake in the mask must cost the mask alone even where the head calls it."""
    leaning = [m for m in catalogue(A).mistakes.values() if m.exercise == "causal-mask" and "attention-head" in m.also]
    assert len(leaning) >= 3


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


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)
