"""Lesson 04: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the reference agrees with PyTorch."""

import io
from contextlib import redirect_stdout

import pytest
import torch
import torch.nn.functional as F
from harness import CatalogueTests, catalogue
from torch import nn

from helpers.checks import multihead as checks
from helpers.checks import multihead_mistakes as mistakes
from helpers.checks.core import close
from helpers.params import num_parameters
from helpers.reference.multihead import CausalSelfAttention, MultiHeadAttention, fuse_heads

A = "04-attention-modules"


def test_three_correct_alternatives_per_exercise():
    for exercise in catalogue(A).lesson.exercises:
        assert sum(exercise in answers for answers in catalogue(A).alternatives.values()) >= 3, exercise


# --------------------------------------------------------------------------------------------
# The reference that lessons 05-08 import


def _loaded_pair(C, hs, nh, seed=0):
    torch.manual_seed(seed)
    loop = MultiHeadAttention(C, hs, nh).double()
    return loop, fuse_heads(loop)


def test_seed_configuration_shape_and_parameter_count():
    layer = MultiHeadAttention(emb_dim=5, head_dim=256, n_heads=2)
    x = torch.randn(12, 5)
    assert layer(x).shape == (12, 5)
    assert num_parameters(layer) == 2 * 3 * 5 * 256 + 512 * 5 == 10240
    assert num_parameters(CausalSelfAttention(5, 256, 2)) == 10240


def test_interfaces_and_parameter_names():
    loop, fused = _loaded_pair(7, 3, 4)
    assert sorted(n for n, _ in fused.named_parameters()) == ["key.weight", "query.weight", "to_output.weight", "value.weight"]
    assert fused.query.weight.shape == (12, 7) and fused.to_output.weight.shape == (7, 12)
    assert len(loop.heads) == 4 and loop.to_output.weight.shape == (7, 12)
    assert torch.equal(fused.key.weight[6:9], loop.heads[2].key.weight)  # head h in rows h*hs:(h+1)*hs
    assert fused.query.weight.dtype == torch.float64


@pytest.mark.parametrize("shape", [(2, 6, 7), (6, 7)])
def test_fuse_heads_computes_the_same_function(shape):
    loop, fused = _loaded_pair(7, 3, 4)
    x = torch.randn(*shape, dtype=torch.float64)
    with torch.no_grad():
        assert close(loop(x), fused(x), 1e-12, 1e-12)
        assert fused(x).shape == shape


def test_reference_matches_torch_multihead_attention():
    _, ours = _loaded_pair(12, 4, 3)
    theirs = nn.MultiheadAttention(12, 3, bias=False, batch_first=True).double()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.query.weight, ours.key.weight, ours.value.weight]))
        theirs.out_proj.weight.copy_(ours.to_output.weight)
        x = torch.randn(2, 5, 12, dtype=torch.float64)
        mask = torch.ones(5, 5, dtype=torch.bool).triu(1)
        expected, _ = theirs(x, x, x, attn_mask=mask, need_weights=False)
        assert close(expected, ours(x), 1e-12, 1e-12)


def test_reference_matches_scaled_dot_product_attention():
    _, ours = _loaded_pair(7, 3, 4)
    x = torch.randn(2, 6, 7, dtype=torch.float64)  # (B, T, C)
    with torch.no_grad():
        q, k, v = (layer(x).view(2, 6, 4, 3).transpose(1, 2) for layer in (ours.query, ours.key, ours.value))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 6, 12)
        assert close(ours.to_output(y), ours(x), 1e-12, 1e-12)


def test_reference_is_causal():
    _, ours = _loaded_pair(7, 3, 4)
    x = torch.randn(2, 6, 7, dtype=torch.float64)
    changed = x.clone()
    changed[:, 4] = torch.randn(2, 7, dtype=torch.float64)
    with torch.no_grad():
        assert close(ours(x)[:, :4], ours(changed)[:, :4], 0, 0)
        assert not close(ours(x)[:, 4:], ours(changed)[:, 4:], 1e-6, 1e-6)


def test_checks_pass_on_the_reference():
    for check, cls in [
        (checks.check_multi_head_attention, MultiHeadAttention),
        (checks.check_multi_head_attention_hidden, MultiHeadAttention),
        (checks.check_causal_self_attention, CausalSelfAttention),
        (checks.check_causal_self_attention_hidden, CausalSelfAttention),
    ]:
        with redirect_stdout(io.StringIO()):
            check(cls)  # raises CheckFailed on any disagreement


@pytest.mark.parametrize("kind", ["mha", "csa"])
def test_mistakes_the_checks_name_are_distinguishable(kind):
    """On the visible cases, no named mistake computes the right answer or another mistake's."""
    cases, variants_of = (checks.MHA_CASES, mistakes.mha_variants) if kind == "mha" else (checks.CSA_CASES, mistakes.csa_variants)
    for seed, batch, T, C, hs, nh, dtype in cases:
        weights, x, _ = mistakes.case_inputs(seed, batch, T, C, hs, nh, dtype)
        heads = mistakes.head_outputs(weights, x)  # (..., nh, T, hs)
        correct = mistakes.merge_heads(heads) @ weights["to_output"].T
        variants = list(variants_of(weights, x, nh, hs).items())
        for i, (label, out) in enumerate(variants):
            assert not close(correct, out, 1e-6, 1e-6), label
            for other, out2 in variants[i + 1:]:
                assert out.shape != out2.shape or not close(out, out2, 1e-6, 1e-6), (label, other)


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)
