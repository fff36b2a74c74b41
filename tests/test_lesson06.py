"""Lesson 06: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the reference reproduces the seed's model."""

import pytest
import torch
from harness import Catalogue, CatalogueTests
from torch import nn

from helpers.params import num_parameters
from helpers.reference.transformer_lm import Config, TransformerLM, add_position_embeddings

A = "06-transformer-lm"
POS, LM = "position-embeddings", "transformer-lm"
ARANGE = "torch.arange(T, device=x.device)"
LM_ARANGE = "torch.arange(T, device=input_ids.device)"
EMBED = "x = self.word_to_embedding(input_ids) + self.pos_to_embedding(positions)"
RETURN = "return self.lm_head(x)"
POS_RETURN = "return x + pos_to_embedding(positions)"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    "pos-off-by-one": (POS, [(ARANGE, "torch.arange(1, T + 1, device=x.device)")], "off by one"),
    "pos-batch-dim": (POS, [("T = x.shape[-2]", "T = x.shape[0]")], "x.shape[0]"),
    "pos-shape-1": (POS, [("T = x.shape[-2]", "T = x.shape[1]")], "x.shape[1]"),
    "pos-in-place": (POS, [("return x + pos_to_embedding(positions)", "x += pos_to_embedding(positions)\n    return x")], "in place"),
    "pos-across-batch": (
        POS,
        [(
            "return x + pos_to_embedding(positions)",
            "flat = x.reshape(-1, x.shape[-1])\n"
            "    return (flat + pos_to_embedding(torch.arange(flat.shape[0], device=x.device))).reshape(x.shape)",
        )],
        "do not restart for each sequence",
    ),
    "pos-multiplied": (POS, [("x + pos_to_embedding", "x * pos_to_embedding")], "multiplied"),
    "pos-float-positions": (POS, [(ARANGE, "torch.arange(T, device=x.device, dtype=x.dtype)")], "not integers"),
    "pos-last-rows": (POS, [(POS_RETURN, "return x + pos_to_embedding.weight[-T:]")], "but not rows 0 ... T-1"),
    "pos-row-T-everywhere": (POS, [(ARANGE, "torch.tensor(T, device=x.device)")], "rows [5, 5, 5, 5, 5]"),
    "pos-T-from-last-dim": (POS, [("T = x.shape[-2]", "T = x.shape[-1]")], "x.shape[-1], which is C"),
    "pos-arange-1-T": (POS, [(ARANGE, "torch.arange(1, T, device=x.device)")], "only T - 1 positions"),
    "pos-subtracted": (POS, [(POS_RETURN, "return x - pos_to_embedding(positions)")], "sign flipped"),
    "pos-extra-batch-axis": (POS, [(POS_RETURN, POS_RETURN + ".unsqueeze(0)")], "extra axis of size 1"),
    "lm-no-length-check": (LM, [("if T > self.config.max_len:", "if False:")], "check the length yourself"),
    "lm-length-check-off-by-one": (LM, [("if T > self.config.max_len:", "if T >= self.config.max_len:")], "not >="),
    "lm-vague-error": (
        LM,
        [('f"the input has {T} tokens, more than max_len = {self.config.max_len} positions"', '"sequence too long"')],
        "should name both lengths",
    ),
    "lm-no-positions": (LM, [(EMBED, "x = self.word_to_embedding(input_ids)")], "position embeddings are missing"),
    "lm-positions-from-batch-dim": (LM, [(LM_ARANGE, "torch.arange(input_ids.shape[0], device=input_ids.device)")], "batch dimension"),
    "lm-no-final-norm": (LM, [("x = self.final_norm(x)", "pass")], "final LayerNorm is missing"),
    "lm-layers-not-chained": (
        LM,
        [("x = layer(x)", "h = layer(x)"), ("x = self.final_norm(x)", "x = self.final_norm(h)")],
        "previous layer's output",
    ),
    "lm-softmax": (LM, [(RETURN, "return torch.softmax(self.lm_head(x), dim=-1)")], "returned probabilities"),
    "lm-embedding-as-head": (LM, [(RETURN, "return x @ self.word_to_embedding.weight.T")], "instead of calling lm_head"),
    "lm-assert-length": (LM, [("if T > self.config.max_len:", "assert T <= self.config.max_len\n        if False:")], "check the length yourself"),
    "lm-dropout": (LM, [(EMBED, EMBED + "\n        x = F.dropout(x, 0.1)")], "not deterministic"),
    "lm-first-layer-repeated": (
        LM, [("for layer in self.layers:", "for _ in self.layers:"), ("x = layer(x)", "x = self.layers[0](x)")],
        "layers.1 was never called",
    ),
    "lm-positions-from-token-table": (
        LM, [(EMBED, "x = self.word_to_embedding(input_ids) + self.word_to_embedding(positions)")],
        "pos_to_embedding was never called",
    ),
    "lm-scaled-token-embeddings": (
        LM, [("self.word_to_embedding(input_ids) +", "self.word_to_embedding(input_ids) * self.config.emb_dim ** 0.5 +")],
        "× the token embeddings",
    ),
    "lm-extra-residual": (LM, [("x = layer(x)", "x = x + layer(x)")], "plus the input of layers.0"),
    "lm-final-norm-every-layer": (LM, [("x = layer(x)", "x = self.final_norm(layer(x))"), ("x = self.final_norm(x)", "pass")], "input of layers.1"),
    "lm-flat-logits": (LM, [(RETURN, "return self.lm_head(x).view(B * T, -1)")], "only the final reshape/view is wrong"),
}

LM_INIT = '''
class TransformerLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        C = config.emb_dim
        self.word_to_embedding = nn.Embedding(config.n_vocab, C)
        self.pos_to_embedding = nn.Embedding(config.max_len, C)
        layer = BareBonesTransformerLayer if config.bare_bones else TransformerBlock
        self.layers = nn.ModuleList(
            [layer(C, config.head_dim, config.n_heads, config.n_hidden) for _ in range(config.n_layers)]
        )
        self.final_norm = LayerNorm(C) if config.final_norm else nn.Identity()
        self.lm_head = nn.Linear(C, config.n_vocab, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.word_to_embedding.weight
'''
ALTERNATIVES = {
    "pos-weight-slice": {POS: '''
def add_position_embeddings(x, pos_to_embedding):
    return x + pos_to_embedding.weight[: x.size(-2)]
'''},
    "pos-expand-over-batch": {POS: '''
def add_position_embeddings(x, pos_to_embedding):
    *batch, T, C = x.shape
    positions = torch.arange(T).to(x.device).expand(*batch, T)
    return torch.add(x, pos_to_embedding(positions))
'''},
    "lm-calls-exercise-1": {LM: LM_INIT + '''
    def forward(self, input_ids):
        if input_ids.dim() == 1:
            return self.forward(input_ids.unsqueeze(0)).squeeze(0)
        T = input_ids.size(-1)
        if T > self.config.max_len:
            raise ValueError(f"got {T} positions but max_len is {self.config.max_len}")
        x = add_position_embeddings(self.word_to_embedding(input_ids), self.pos_to_embedding)
        for block in self.layers:
            x = block(x)
        return self.lm_head(self.final_norm(x))
'''},
    "lm-sequential-and-slice": {LM: LM_INIT + '''
    def forward(self, input_ids):
        if input_ids.dim() == 1:
            return self.forward(input_ids.unsqueeze(0)).squeeze(0)
        B, T = input_ids.shape
        max_len = self.pos_to_embedding.num_embeddings
        if T > max_len:
            raise ValueError(f"max_len is {max_len}; this batch has sequences of {T} tokens")
        x = self.word_to_embedding(input_ids) + self.pos_to_embedding.weight[:T].unsqueeze(0)
        x = nn.Sequential(*self.layers, self.final_norm)(x)
        return x @ self.lm_head.weight.T
'''},
}


def test_the_seed_model_has_11971_parameters():
    model = TransformerLM(Config(bare_bones=True, final_norm=False))
    assert num_parameters(model) == 11971
    assert model.lm_head.weight is model.word_to_embedding.weight
    assert num_parameters(TransformerLM(Config(bare_bones=True, final_norm=False, tie_weights=False))) == 11971 + 1280
    assert num_parameters(TransformerLM(Config())) == 11971 + 10  # pre-LN block and a final norm


def test_state_dict_keys_are_the_interface():
    model = TransformerLM(Config(n_layers=2))
    keys = list(model.state_dict())
    assert keys[:2] == ["word_to_embedding.weight", "pos_to_embedding.weight"]
    assert keys[-3:] == ["final_norm.weight", "final_norm.bias", "lm_head.weight"]
    assert "layers.1.attention.query.weight" in keys and "layers.1.mlp.model.2.bias" in keys
    seed = TransformerLM(Config(bare_bones=True, final_norm=False))
    assert "layers.0.self_attention.heads.1.query.weight" in seed.state_dict()
    assert not any(k.startswith("final_norm") for k in seed.state_dict())


def test_forward_shapes_errors_and_causality():
    torch.manual_seed(0)
    config = Config(n_vocab=17, max_len=12, emb_dim=8, n_hidden=20, head_dim=4, n_heads=2, n_layers=3)
    model = TransformerLM(config).double()
    ids = torch.randint(17, (3, 10))
    logits = model(ids)
    assert logits.shape == (3, 10, 17)
    assert torch.allclose(model(ids[1]), logits[1], atol=1e-12)
    changed = ids.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 17
    assert torch.allclose(model(changed)[:, :6], logits[:, :6], atol=1e-12)
    assert model(torch.randint(17, (2, 12))).shape == (2, 12, 17)
    with pytest.raises(ValueError, match="13") as error:
        model(torch.zeros(2, 13, dtype=torch.long))
    assert "12" in str(error.value)


def test_position_embeddings_broadcast_over_the_batch():
    table = nn.Embedding(9, 4)
    x = torch.randn(3, 5, 4)
    out = add_position_embeddings(x, table)
    assert torch.equal(out, x + table.weight[:5])
    assert torch.equal(add_position_embeddings(x[0], table), out[0])


def test_untrained_loss_is_near_uniform():
    torch.manual_seed(0)
    config = Config(n_vocab=256, max_len=64, emb_dim=32, n_hidden=64, head_dim=8, n_heads=4, n_layers=2)
    ids = torch.randint(256, (4, 33))
    with torch.no_grad():
        logits = TransformerLM(config)(ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, 256), ids[:, 1:].reshape(-1))
    assert abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.05


class TestCatalogue(CatalogueTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, requirements={POS: {"do not modify `x`": ["pos-in-place"]}})
