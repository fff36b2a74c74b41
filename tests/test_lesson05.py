"""Lesson 05: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the reference agrees with PyTorch."""

import torch
from harness import CatalogueTests, catalogue
from torch import nn

from helpers.params import num_parameters
from helpers.reference.transformer_layer import (
    BareBonesTransformerLayer,
    LayerNorm,
    TransformerBlock,
)

A = "05-transformer-layer"


def test_layer_norm_matches_pytorch():
    torch.manual_seed(0)
    x = 3 * torch.randn(2, 7, 5, dtype=torch.float64) + 1
    ours, theirs = LayerNorm(5).double(), nn.LayerNorm(5).double()
    with torch.no_grad():
        ours.weight.copy_(torch.randn(5))
        ours.bias.copy_(torch.randn(5))
    theirs.load_state_dict(ours.state_dict())
    assert torch.allclose(ours(x), theirs(x), atol=1e-12)
    tiny = 1e-3 * torch.randn(4, 5, dtype=torch.float64)  # variance near eps: its place matters
    assert torch.allclose(ours(tiny), theirs(tiny), atol=1e-12)


def test_interfaces_and_parameter_counts():
    # the seed's sizes: C = 5, two heads of 256, an MLP of 16
    bare, block = BareBonesTransformerLayer(5, 256, 2, 16), TransformerBlock(5, 256, 2, 16)
    assert num_parameters(bare) == num_parameters(block) == 10240 + 181 + 20
    assert [k for k in bare.state_dict() if "norm" in k] == [
        "norm_after_attn.weight", "norm_after_attn.bias", "norm_after_mlp.weight", "norm_after_mlp.bias"
    ]
    assert list(block.state_dict()) == [
        "norm_before_attn.weight", "norm_before_attn.bias",
        "attention.query.weight", "attention.key.weight", "attention.value.weight", "attention.to_output.weight",
        "norm_before_mlp.weight", "norm_before_mlp.bias",
        "mlp.model.0.weight", "mlp.model.0.bias", "mlp.model.2.weight", "mlp.model.2.bias",
    ]
    x = torch.randn(3, 4, 5)
    assert bare(x).shape == block(x).shape == x.shape
    assert block(x[0]).shape == (4, 5)


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)
