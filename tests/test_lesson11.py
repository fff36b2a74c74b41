"""Lesson 11: every catalogued mistake loses exactly its exercise's points and is named; correct
answers written differently get full marks; the modern options of lesson 06's Config change
nothing at their defaults; the checks' written-out parts (``llama_format``, used while the
lesson's reference is hidden) agree with the reference."""

import dataclasses

import pytest
import torch
from harness import CatalogueTests, catalogue

from helpers.checks.llama_format import (
    known_good_modern_lm,
    llama_config,
    llama_format_checkpoint,
    llama_sublayer_outputs,
)
from helpers.diagrams import block_parameters, draw_block_pair
from helpers.reference import modern_block as ref
from helpers.reference.transformer_lm import Config, TransformerLM

A = "11-modern-block"


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)


SMALL = dict(n_vocab=17, max_len=12, emb_dim=8, n_hidden=20, head_dim=4, n_heads=2, n_layers=2)


def test_modern_options_change_nothing_at_their_defaults():
    torch.manual_seed(0)
    plain = TransformerLM(Config(**SMALL))
    torch.manual_seed(0)
    same = ref.modern_lm(Config(**SMALL, norm="layer", mlp="mlp", positions="learned", n_kv_heads=0))
    assert list(plain.state_dict()) == list(same.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), same.state_dict().values(), strict=True))
    ids = torch.randint(17, (3, 12), generator=torch.Generator().manual_seed(1))
    assert torch.equal(plain(ids), same(ids))


@pytest.mark.parametrize("n_kv, tie", [(2, False), (1, True), (4, False)])
def test_known_good_model_is_the_reference(n_kv, tie):
    config = llama_config(V=19, C=16, L=2, nh=4, n_kv=n_kv, H=22, tie=tie, rope_base=200.0, norm_eps=0.01)
    checkpoint = llama_format_checkpoint(config, seed=3)
    theirs = ref.load_llama_state_dict(ref.modern_lm(config).double().eval(), checkpoint)
    ours = ref.load_llama_state_dict(known_good_modern_lm(config).double().eval(), checkpoint)
    assert [n for n, _ in theirs.named_parameters()] == [n for n, _ in ours.named_parameters()]
    ids = torch.randint(19, (2, 9), generator=torch.Generator().manual_seed(2))
    a, b = llama_sublayer_outputs(theirs, ids), llama_sublayer_outputs(ours, ids)
    assert list(a) == list(b) and all(torch.allclose(a[k], b[k], atol=1e-13, rtol=0) for k in a)
    assert (theirs.lm_head.weight is theirs.word_to_embedding.weight) == tie


def test_rope_model_has_no_position_table_and_runs_past_nothing():
    config = llama_config(V=19, C=16, L=1, nh=4, n_kv=2, H=22)
    model = ref.modern_lm(config)
    assert not any(n.startswith("pos_to_embedding") for n, _ in model.named_parameters())
    assert not any(n.endswith("bias") for n, _ in model.named_parameters())
    # a later token never moves an earlier logit
    ids = torch.randint(19, (1, 8), generator=torch.Generator().manual_seed(4))
    changed = ids.clone()
    changed[0, 5] = (ids[0, 5] + 1) % 19
    with torch.no_grad():
        assert torch.allclose(model(ids)[0, :5], model(changed)[0, :5])
        assert model(ids.to(torch.long)).dtype == torch.float32
        assert model.double()(ids).dtype == torch.float64


@pytest.mark.parametrize("config", [
    Config(**SMALL, attn_bias=True, activation="gelu_tanh"),
    Config(**{**SMALL, "tie_weights": False}, norm="rms", mlp="swiglu", positions="rope", n_kv_heads=1),
    Config(**SMALL, n_kv_heads=1),
])
def test_block_parameters_count_the_built_block(config):
    block = ref.modern_lm(config).layers[0]
    assert block_parameters(config)["block"] == sum(p.numel() for p in block.parameters())


def test_draw_block_pair_is_pure():
    import matplotlib.pyplot as plt

    gpt = Config(**SMALL, attn_bias=True, activation="gelu_tanh")
    llama = dataclasses.replace(gpt, norm="rms", mlp="swiglu", positions="rope", n_kv_heads=1, attn_bias=False)
    fig, ax = draw_block_pair(gpt, llama)
    texts = " ".join(t.get_text() for t in ax.texts)
    assert "RMSNorm" in texts and "SwiGLU" in texts and "LayerNorm" in texts and "1 key/value head" in texts
    plt.close(fig)
