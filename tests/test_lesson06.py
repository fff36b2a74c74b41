"""Lesson 06: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the reference reproduces the seed's model."""

import pytest
import torch
from harness import CatalogueTests, catalogue
from torch import nn

from helpers.params import num_parameters
from helpers.reference.transformer_lm import Config, TransformerLM, add_position_embeddings

A = "06-transformer-lm"


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
    catalogue = catalogue(A)
