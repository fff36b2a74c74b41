"""Lesson 05: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the reference agrees with PyTorch."""

import torch
from harness import Catalogue, CatalogueTests
from torch import nn

from helpers.params import num_parameters
from helpers.reference.transformer_layer import (
    BareBonesTransformerLayer,
    LayerNorm,
    TransformerBlock,
)

A = "05-transformer-layer"
LN, BLOCK = "layer-norm", "transformer-block"
SQRT = "torch.sqrt(var + self.eps)"
VAR = "((x - mean) ** 2).mean(dim=-1, keepdim=True)"
ATTN = "x = x + self.attention(self.norm_before_attn(x))"
MLP = "x = x + self.mlp(self.norm_before_mlp(x))"
MEAN = "mean = x.mean(dim=-1, keepdim=True)"
NORMALISED = "normalised = (x - mean) / torch.sqrt(var + self.eps)"
AFFINE = "return normalised * self.weight + self.bias"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    "ln-eps-outside-sqrt": (LN, [(SQRT, "(torch.sqrt(var) + self.eps)")], "outside the square root"),
    "ln-unbiased-torch-var": (LN, [(VAR, "torch.var(x, dim=-1, keepdim=True)")], "unbiased variance"),
    "ln-std-plus-eps": (LN, [(SQRT, "(x.std(dim=-1, keepdim=True) + self.eps)")], "x.std() + eps"),
    "ln-batch-dim": (LN, [("dim=-1", "dim=0")], "dim=0, across the batch"),
    "ln-time-dim": (LN, [("dim=-1", "dim=-2")], "dim=-2, across the positions"),
    "ln-no-weight-no-bias": (LN, [("return normalised * self.weight + self.bias", "return normalised")], "forgot weight and bias"),
    "ln-no-bias": (LN, [("normalised * self.weight + self.bias", "normalised * self.weight")], "forgot bias"),
    "ln-no-eps": (LN, [(SQRT, "torch.sqrt(var)")], "eps is missing"),
    "ln-rmsnorm": (LN, [("((x - mean) ** 2)", "(x ** 2)"), ("(x - mean) / torch", "x / torch")], "RMSNorm"),
    "ln-hard-coded-eps": (LN, [("var + self.eps", "var + 1e-5")], "ignored self.eps"),
    "ln-in-place": (LN, [("normalised = (x - mean) /", "normalised = x.sub_(mean) /")], "in place"),
    "ln-detached-mean": (
        LN,
        [("mean = x.mean(dim=-1, keepdim=True)", "mean = x.mean(dim=-1, keepdim=True).detach()")],
        "gradient with respect to x",
    ),
    "ln-fused-layer-norm": (
        LN, [(AFFINE, "return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)")],
        "Do not call nn.LayerNorm or F.layer_norm",
    ),
    "ln-nn-layernorm": (
        LN, [(AFFINE, "return nn.LayerNorm(x.shape[-1], eps=self.eps).to(x.dtype)(x) * self.weight + self.bias")],
        "your forward calls nn.LayerNorm",
    ),
    "ln-var-mean-swapped": (
        LN, [(MEAN, "mean, var = torch.var_mean(x, dim=-1, keepdim=True, correction=0)"), (VAR, "var")],
        "torch.var_mean returns (var, mean)",
    ),
    "ln-eps-after-division": (LN, [(NORMALISED, "normalised = (x - mean) / torch.sqrt(var) + self.eps")], "added after the division"),
    "ln-bias-before-scale": (LN, [(AFFINE, "return (normalised + self.bias) * self.weight")], "bias is added before the scale"),
    "ln-divided-by-norm": (
        LN, [(NORMALISED, "normalised = (x - mean) / ((x - mean).norm(dim=-1, keepdim=True) + self.eps)")], "norm of x - mean",
    ),
    "ln-variance-formula": (LN, [(VAR, "(x ** 2).mean(dim=-1, keepdim=True) - mean")], "divided by the wrong amount"),
    "ln-float32-inside": (LN, [(MEAN, "x = x.float()\n        " + MEAN)], "ran in float32"),
    "block-post-ln": (
        BLOCK,
        [(ATTN, "x = self.norm_before_attn(x + self.attention(x))"), (MLP, "x = self.norm_before_mlp(x + self.mlp(x))")],
        "post-LN",
    ),
    "block-residual-after-norm": (
        BLOCK,
        [
            (ATTN, "x = self.norm_before_attn(x)\n        x = x + self.attention(x)"),
            (MLP, "x = self.norm_before_mlp(x)\n        x = x + self.mlp(x)"),
        ],
        "residual is added after the norm",
    ),
    "block-no-residuals": (BLOCK, [("x = x + self.attention", "x = self.attention"), ("x = x + self.mlp", "x = self.mlp")], "both residual connections are missing"),
    "block-no-mlp-residual": (BLOCK, [("x = x + self.mlp", "x = self.mlp")], "around the MLP is missing"),
    "block-shared-norm": (BLOCK, [("self.mlp(self.norm_before_mlp(x))", "self.mlp(self.norm_before_attn(x))")], "shared by both sub-layers"),
    "block-mlp-unnormalised": (BLOCK, [("self.mlp(self.norm_before_mlp(x))", "self.mlp(x)")], "MLP is applied to the un-normalised input"),
    "block-parallel": (
        BLOCK,
        [(ATTN, "h = x + self.attention(self.norm_before_attn(x))"), (MLP, "x = h + self.mlp(self.norm_before_mlp(x))")],
        "in parallel",
    ),
    "block-in-place": (BLOCK, [("x = x + self.attention", "x += self.attention"), ("x = x + self.mlp", "x += self.mlp")], "in place"),
    "block-final-norm-inside": (BLOCK, [("return x", "return self.norm_before_mlp(x)")], "calls norm_before_mlp (the norm before the MLP) 2 times"),
    "block-returns-input": (
        BLOCK, [(ATTN, "h = x + self.attention(self.norm_before_attn(x))"), (MLP, "h = h + self.mlp(self.norm_before_mlp(h))")],
        "returns exactly its own input x",
    ),
    "block-dropout": (BLOCK, [(ATTN, "x = x + F.dropout(self.attention(self.norm_before_attn(x)), 0.1)")], "not deterministic"),
    "block-attention-over-the-batch": (
        BLOCK,
        [(ATTN, "x = x + self.attention(self.norm_before_attn(x).reshape(1, -1, x.shape[-1])).reshape(x.shape)")],
        "the batch elements are mixed",
    ),
    "block-mlp-subtracted": (BLOCK, [(MLP, "x = x - self.mlp(self.norm_before_mlp(x))")], "minus 2 × the output of mlp"),
    "block-normalised-outputs": (
        BLOCK,
        [
            ("self.attention(self.norm_before_attn(x))", "self.norm_before_attn(self.attention(x))"),
            ("self.mlp(self.norm_before_mlp(x))", "self.norm_before_mlp(self.mlp(x))"),
        ],
        "outputs",
    ),
}

LN_INIT = '''
class LayerNorm(nn.Module):
    def __init__(self, emb_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(emb_dim))
        self.bias = nn.Parameter(torch.zeros(emb_dim))
'''
BLOCK_INIT = '''
class TransformerBlock(nn.Module):
    def __init__(self, emb_dim, head_dim, n_heads, n_hidden):
        super().__init__()
        self.norm_before_attn = LayerNorm(emb_dim)
        self.attention = CausalSelfAttention(emb_dim, head_dim, n_heads)
        self.norm_before_mlp = LayerNorm(emb_dim)
        self.mlp = MLP(emb_dim, n_hidden)
'''
ALTERNATIVES = {
    "ln-var-correction-rsqrt": {LN: LN_INIT + '''
    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
'''},
    "ln-moments": {LN: LN_INIT + '''
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean
        return self.weight * (x - mean) / (var + self.eps) ** 0.5 + self.bias
'''},
    "block-named-steps": {BLOCK: BLOCK_INIT + '''
    def forward(self, x):
        attended = self.attention(self.norm_before_attn(x))
        stream = x + attended
        transformed = self.mlp(self.norm_before_mlp(stream))
        return stream + transformed
'''},
    "block-loop-over-sublayers": {BLOCK: BLOCK_INIT + '''
    def forward(self, x):
        for norm, sublayer in ((self.norm_before_attn, self.attention), (self.norm_before_mlp, self.mlp)):
            x = torch.add(x, sublayer(norm(x)))
        return x
'''},
}


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
    catalogue = Catalogue(
        A, MISTAKES, ALTERNATIVES,
        requirements={LN: {"Do not call `nn.LayerNorm` or `F.layer_norm`": ["ln-fused-layer-norm", "ln-nn-layernorm"]}},
    )
