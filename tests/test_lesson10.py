"""Lesson 10: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the GPT-2 options of lesson 06's Config
change nothing at their defaults."""

import pytest
import torch
from harness import CatalogueTests, catalogue

from helpers.reference.gpt2 import (
    GPT2_SMALL,
    GPT2_SPLIT,
    build_vocab,
    bytes_to_unicode,
    merge,
    train_bpe,
    train_bpe_pieces,
)
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


def test_merges_learnt_on_pieces_stay_inside_pieces_and_match_counting_every_piece():
    text = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
            "You are all resolved rather to die than to famish? It's 2024: 10 € each, naïve cafés 😀 ") * 3
    pieces = GPT2_SPLIT.findall(text)
    merges = train_bpe_pieces(pieces, 80)
    slow, piece_ids = {}, [list(piece.encode("utf-8")) for piece in pieces]  # every piece counted, one by one
    for rank in range(80):
        counts = {}
        for ids in piece_ids:
            for pair in zip(ids, ids[1:], strict=False):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        pair = max(counts, key=counts.get)
        slow[pair] = 256 + rank
        piece_ids = [merge(ids, pair, 256 + rank) for ids in piece_ids]
    assert list(merges.items()) == list(slow.items()) and len(merges) == 80
    vocab, inside = build_vocab(merges), {piece.encode("utf-8") for piece in pieces}
    assert all(any(vocab[i] in piece for piece in inside) for i in merges.values()), "a token spans two pieces"
    assert train_bpe_pieces(["abababcab"], 5) == train_bpe("abababcab", 5)  # one piece: train_bpe itself
    assert train_bpe_pieces([], 5) == {} == train_bpe_pieces(["a", "b", "a"], 5)


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)
