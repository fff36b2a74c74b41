"""Lesson 04: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the reference agrees with PyTorch."""

import io
from contextlib import redirect_stdout

import pytest
import torch
import torch.nn.functional as F
from harness import Catalogue, HiddenOnlyTests
from torch import nn

from helpers.checks import multihead as checks
from helpers.checks.core import close
from helpers.params import num_parameters
from helpers.reference.multihead import CausalSelfAttention, MultiHeadAttention, fuse_heads

A = "04-attention-modules"
MHA, CSA = "multi-head-attention", "causal-self-attention"
SPLIT = ".view(B, T, nh, hs).transpose(1, 2)"
MERGE = "out.transpose(1, 2).reshape(B, T, nh * hs)"
MASKED = 'torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)'
CAT, PROJECT = "torch.cat(head_outputs, dim=-1)", "return self.to_output(concatenated)"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    "mha-reversed-order": (MHA, [("torch.cat(head_outputs, dim=-1)", "torch.cat(head_outputs[::-1], dim=-1)")], "reverse order"),
    "mha-two-heads-swapped": (
        MHA,
        [("torch.cat(head_outputs, dim=-1)", "torch.cat([head_outputs[1], head_outputs[0], *head_outputs[2:]], dim=-1)")],
        "in the order (1, 0, 2, 3)",
    ),
    "mha-no-projection": (MHA, [("return self.to_output(concatenated)", "return concatenated")], "forgot the output projection"),
    "mha-one-head-for-all": (MHA, [("[head(x) for head in self.heads]", "[self.heads[0](x) for head in self.heads]")], "share one set of weights"),
    "mha-shared-head-object": (
        MHA,
        [("nn.ModuleList([AttentionHead(emb_dim, head_dim) for _ in range(n_heads)])", "nn.ModuleList([AttentionHead(emb_dim, head_dim)] * n_heads)")],
        "share one set of weights",
    ),
    "mha-interleaved": (MHA, [("torch.cat(head_outputs, dim=-1)", "torch.stack(head_outputs, dim=-1).flatten(-2)")], "interleaved"),
    "mha-cat-wrong-dim": (MHA, [("torch.cat(head_outputs, dim=-1)", "torch.cat(head_outputs, dim=1)")], "along the last dimension"),
    "mha-stacked-in-front": (
        MHA,
        [("torch.cat(head_outputs, dim=-1)", "torch.stack(head_outputs).reshape(*x.shape[:-1], -1)")],
        "stacked in front",
    ),
    "csa-view-without-transpose": (CSA, [(SPLIT, ".view(B, nh, T, hs)")], "single .view(B, nh, T, hs)"),
    "csa-merge-without-transpose": (CSA, [(MERGE, "out.reshape(B, T, nh * hs)")], "without .transpose(1, 2) first"),
    "csa-no-transpose-at-all": (
        CSA,
        [(SPLIT, ".view(B, nh, T, hs)"), (MERGE, "out.reshape(B, T, nh * hs)")],
        "no transpose either way",
    ),
    "csa-view-after-transpose": (CSA, [(MERGE, "out.transpose(1, 2).view(B, T, nh * hs)")], ".contiguous()"),
    "csa-split-hs-nh": (CSA, [(SPLIT, ".view(B, T, hs, nh).permute(0, 3, 1, 2)")], "as (hs, nh) instead of (nh, hs)"),
    "csa-sqrt-nh-hs": (CSA, [("math.sqrt(hs)", "math.sqrt(nh * hs)")], "sqrt(n_heads * head_dim)"),
    "csa-sqrt-emb-dim": (CSA, [("math.sqrt(hs)", "math.sqrt(C)")], "sqrt(emb_dim)"),
    "csa-no-scaling": (CSA, [(" / math.sqrt(hs)", "")], "forgot to scale"),
    "csa-no-mask": (CSA, [('scores.masked_fill(future, float("-inf"))', "scores")], "forgot the causal mask"),
    "csa-mask-leaks-next-token": (CSA, [("diagonal=1)", "diagonal=2)")], "query 0 attends to key 1"),
    "csa-mask-after-softmax": (CSA, [(MASKED, "torch.softmax(scores, dim=-1).masked_fill(future, 0.0)")], "after the softmax"),
    "csa-softmax-dim": (CSA, [('float("-inf")), dim=-1)', 'float("-inf")), dim=-2)')], "dim=-2"),
    "csa-no-projection": (CSA, [("out = self.to_output(out)  # (B, T, C)", "")], "forgot the output projection"),
    "csa-batch-only": (CSA, [("unbatched = x.dim() == 2", "unbatched = False")], "single sequence (T, C)"),
    "csa-no-squeeze": (CSA, [("return out.squeeze(0) if unbatched else out", "return out")], "squeeze(0)"),
    "mha-averages-heads": (MHA, [(CAT, f"{CAT} / self.n_heads")], "1/nh"),
    "mha-adds-input": (MHA, [(PROJECT, "return x + self.to_output(concatenated)")], "plus the input x"),
    "mha-sums-heads": (MHA, [(CAT, "sum(head_outputs)")], "last dimension is 3, not nh*hs = 12"),
    "mha-cat-dim-2": (MHA, [(CAT, "torch.cat(head_outputs, dim=2)")], "raises on a single sequence (T, C)"),
    "mha-relu-after-projection": (MHA, [(PROJECT, "return F.relu(self.to_output(concatenated))")], "after the last sub-module call"),
    "csa-merge-hs-nh": (CSA, [(MERGE, "out.permute(0, 2, 3, 1).reshape(B, T, nh * hs)")], "merged the heads as (hs, nh)"),
    "csa-softmax-no-dim": (CSA, [(MASKED, 'F.softmax(scores.masked_fill(future, float("-inf")))')], "over axis 1, the heads"),
    "csa-unsqueeze-1": (
        CSA, [("x = x.unsqueeze(0)", "x = x.unsqueeze(1)"), ("out.squeeze(0) if", "out.squeeze(1) if")], "attends only to itself",
    ),
    "csa-divides-by-head-dim": (CSA, [("/ math.sqrt(hs)", "/ hs")], "not by its square root"),
    "csa-hides-diagonal": (CSA, [("diagonal=1)", "diagonal=0)")], "hides the diagonal"),
    "csa-merge-to-emb-dim": (CSA, [(MERGE, "out.transpose(1, 2).reshape(B, T, C)")], "do not multiply to its number of elements"),
    "csa-scales-output": (
        CSA, [(" / math.sqrt(hs)  # (B, nh, T, T)", "  # (B, nh, T, T)"), ("out = weights @ v  #", "out = weights @ v / math.sqrt(hs)  #")],
        "divided the output by sqrt(head_dim)",
    ),
}

# name -> (exercise, edits, words): mistakes that only the hidden tests (other shapes, dtypes) see
HIDDEN_ONLY = {
    "csa-squeezes-every-axis": (CSA, [("out.squeeze(0) if unbatched", "out.squeeze() if unbatched")], "axis 0 of size 1 is missing"),
}

# every "must" / "do not" of an exercise's task -> the catalogued mistakes that break it
REQUIREMENTS = {
    MHA: {"must work for a single sequence `(T, C)` and for a batch `(B, T, C)`": ["mha-cat-dim-2", "mha-cat-wrong-dim"]},
}

MHA_INIT = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, emb_dim, head_dim, n_heads):
        super().__init__()
        self.head_dim = head_dim
        self.n_heads = n_heads
        self.heads = nn.ModuleList([AttentionHead(emb_dim, head_dim) for _ in range(n_heads)])
        self.to_output = nn.Linear(n_heads * head_dim, emb_dim, bias=False)
'''
CSA_INIT = '''
class CausalSelfAttention(nn.Module):
    def __init__(self, emb_dim, head_dim, n_heads):
        super().__init__()
        self.head_dim = head_dim
        self.n_heads = n_heads
        self.query = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.key = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.value = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.to_output = nn.Linear(n_heads * head_dim, emb_dim, bias=False)
'''

ALTERNATIVES = {
    "mha-stack-then-flatten": {MHA: MHA_INIT + '''
    def forward(self, x):
        stacked = torch.stack([h(x) for h in self.heads], dim=-2)  # (..., T, nh, hs)
        return self.to_output(stacked.flatten(-2))  # (..., T, nh*hs) -> (..., T, C)
'''},
    "mha-einsum": {MHA: MHA_INIT + '''
    def forward(self, x):
        outs = torch.stack([h(x) for h in self.heads])  # (nh, ..., T, hs)
        w = self.to_output.weight.view(-1, self.n_heads, self.head_dim)  # (C, nh, hs)
        return torch.einsum("h...td,chd->...tc", outs, w)
'''},
    "mha-project-each-head-and-sum": {MHA: MHA_INIT + '''
    def forward(self, x):
        W, hs = self.to_output.weight, self.head_dim
        total = 0
        for h, head in enumerate(self.heads):
            total = total + F.linear(head(x), W[:, h * hs:(h + 1) * hs])  # head h's share of the projection
        return total
'''},
    "csa-einsum": {CSA: CSA_INIT + '''
    def forward(self, x):
        nh, hs, T = self.n_heads, self.head_dim, x.shape[-2]
        q = self.query(x).unflatten(-1, (nh, hs))  # (..., T, nh*hs) -> (..., T, nh, hs)
        k = self.key(x).unflatten(-1, (nh, hs))  # (..., T, nh*hs) -> (..., T, nh, hs)
        v = self.value(x).unflatten(-1, (nh, hs))  # (..., T, nh*hs) -> (..., T, nh, hs)
        scores = torch.einsum("...ihd,...jhd->...hij", q, k) * hs ** -0.5  # (..., nh, T, T)
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
        scores = torch.where(allowed, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
        out = torch.einsum("...hij,...jhd->...ihd", scores.softmax(dim=-1), v)  # (..., T, nh, hs)
        return self.to_output(out.flatten(-2))  # (..., T, nh, hs) -> (..., T, nh*hs) -> (..., T, C)
'''},
    "csa-fused-qkv": {CSA: CSA_INIT + '''
    def forward(self, x):
        single = x.ndim == 2
        if single:
            x = x[None]  # (T, C) -> (1, T, C)
        B, T, _ = x.shape
        nh, hs = self.n_heads, self.head_dim
        w_qkv = torch.cat([self.query.weight, self.key.weight, self.value.weight], dim=0)  # (3*nh*hs, C)
        qkv = (x @ w_qkv.T).reshape(B, T, 3, nh, hs).permute(2, 0, 3, 1, 4)  # (B, T, 3*nh*hs) -> (3, B, nh, T, hs)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q @ k.mT) / math.sqrt(hs)  # (B, nh, T, T)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        y = (att @ v).permute(0, 2, 1, 3).contiguous().view(B, T, nh * hs)  # (B, nh, T, hs) -> (B, T, nh*hs)
        y = self.to_output(y)
        return y[0] if single else y
'''},
    "csa-sdpa": {CSA: CSA_INIT + '''
    def forward(self, x):
        *batch, T, C = x.shape

        def split(t):  # (..., T, nh*hs) -> (..., T, nh, hs) -> (..., nh, T, hs)
            return t.view(*batch, T, self.n_heads, self.head_dim).transpose(-3, -2)

        y = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)), is_causal=True)
        y = y.transpose(-3, -2).reshape(*batch, T, self.n_heads * self.head_dim)  # (..., T, nh*hs)
        return self.to_output(y)
'''},
}


def test_catalogue_has_three_mistakes_per_exercise():
    for exercise in (MHA, CSA):
        assert sum(ex == exercise for ex, _, _ in MISTAKES.values()) >= 3
        assert sum(exercise in answers for answers in ALTERNATIVES.values()) >= 3


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
    cases, variants_of = (checks.MHA_CASES, checks.mha_variants) if kind == "mha" else (checks.CSA_CASES, checks.csa_variants)
    for seed, batch, T, C, hs, nh, dtype in cases:
        weights, x, _ = checks._inputs(seed, batch, T, C, hs, nh, dtype)
        heads = checks.head_outputs(weights, x)  # (..., nh, T, hs)
        correct = checks._merge(heads) @ weights["to_output"].T
        variants = list(variants_of(weights, x, nh, hs).items())
        for i, (label, out) in enumerate(variants):
            assert not close(correct, out, 1e-6, 1e-6), label
            for other, out2 in variants[i + 1:]:
                assert out.shape != out2.shape or not close(out, out2, 1e-6, 1e-6), (label, other)


class TestCatalogue(HiddenOnlyTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, hidden_only=HIDDEN_ONLY, requirements=REQUIREMENTS)
