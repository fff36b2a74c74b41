"""Lesson 10: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the GPT-2 options of lesson 06's Config
change nothing at their defaults."""

import pytest
import torch
from harness import CatalogueTests, catalogue

from helpers.reference.gpt2 import GPT2_SMALL, GPT2_SPLIT, bytes_to_unicode
from helpers.reference.transformer_lm import Config, TransformerLM

A = "10-gpt2"


def test_gpt2_options_change_nothing_at_their_defaults():
    torch.manual_seed(0)
    plain = TransformerLM(Config(n_vocab=17, max_len=12, emb_dim=8, n_hidden=20, head_dim=4, n_heads=2, n_layers=2))
    torch.manual_seed(0)
    again = TransformerLM(Config(n_vocab=17, max_len=12, emb_dim=8, n_hidden=20, head_dim=4, n_heads=2, n_layers=2,
                                 attn_bias=False, activation="relu"))
    assert list(plain.state_dict()) == list(again.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), again.state_dict().values(), strict=True))
    assert isinstance(plain.layers[0].mlp.model[1], torch.nn.ReLU) and plain.layers[0].attention.query.bias is None
    with pytest.raises(ValueError, match="activation"):
        TransformerLM(Config(activation="swish"))


def test_gpt2_small_has_its_published_parameter_count():
    with torch.device("meta"):
        model = TransformerLM(GPT2_SMALL)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808
    assert isinstance(model.layers[0].mlp.model[1], torch.nn.GELU) and model.layers[0].attention.value.bias is not None


def test_byte_table_and_pre_split():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256 and table[32] == "Ġ" and table[10] == "Ċ" and table[33] == "!"
    assert GPT2_SPLIT.findall("I'm here  now\n\n 12a!") == ["I", "'m", " here", " ", " now", "\n\n", " 12", "a", "!"]


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)
