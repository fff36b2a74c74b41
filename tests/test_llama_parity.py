"""Lesson 11 against an independent implementation: Hugging Face transformers' Llama.

No network: each test builds a small LlamaForCausalLM from a LlamaConfig (random weights, every
size different, several groupings of key/value heads), writes it with ``save_pretrained``
(config.json and model.safetensors, as Llama-architecture models are published), reads the folder
back as lesson 11 does (``config_from_llama_json``, lesson 10's ``read_safetensors``), loads it into
the course's ``modern_lm`` with ``load_llama_state_dict`` and compares the logits.

Hugging Face computes two things in float32 whatever the model's dtype: ``LlamaRMSNorm`` casts its
input to float32, and ``LlamaRotaryEmbedding`` computes its angles in float32. For the float64
comparison those two forwards are replaced, while it runs, by the same arithmetic without the
casts (``_float64_throughout``); every other part of the model (the attention and its repeat of
keys and values, ``rotate_half``, the MLP, the residual order, the names) is Hugging Face's own.
transformers is a test-only dependency (pip install -e '.[dev]'); without it these tests skip.
"""

import json
from contextlib import contextmanager, nullcontext

import pytest
import torch

from helpers.reference.gpt2 import read_safetensors
from helpers.reference.modern_block import config_from_llama_json, load_llama_state_dict, modern_lm

transformers = pytest.importorskip("transformers", reason="the parity tests need transformers: pip install -e '.[dev]'")
modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")

# (V, C, L, nh, n_kv, H, positions, tied): every size different; 2, 3 and 1 key/value heads and none shared
SHAPES = [(37, 24, 3, 4, 2, 40, 19, False), (41, 36, 2, 6, 3, 52, 17, False), (43, 36, 2, 6, 1, 50, 13, False),
          (29, 16, 2, 4, 4, 44, 11, True)]


def hf_llama(V, C, L, nh, n_kv, H, P, tied, seed=0):
    """A small LlamaForCausalLM with random weights far from its own init (norms away from ones)."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=C, intermediate_size=H, num_hidden_layers=L, num_attention_heads=nh,
        num_key_value_heads=n_kv, max_position_embeddings=P, rms_norm_eps=1e-5, rope_theta=500.0,
        tie_word_embeddings=tied, attention_bias=False, mlp_bias=False, attn_implementation="sdpa",
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.normal_(1, 0.3)
            else:
                p.normal_(0, p.shape[1] ** -0.5)
    return model


@contextmanager
def _float64_throughout():
    """LlamaRMSNorm and LlamaRotaryEmbedding without their float32 casts (see the module's docstring)."""
    norm, rotary = modeling_llama.LlamaRMSNorm, modeling_llama.LlamaRotaryEmbedding

    def norm_forward(self, hidden):
        return self.weight * (hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rotary_forward(self, x, position_ids):
        dim = self.inv_freq.shape[0] * 2
        base = self.config.rope_parameters["rope_theta"]
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        angles = position_ids[..., None].double() * inv_freq  # (B, T, hs/2)
        both = torch.cat((angles, angles), dim=-1)  # rotate_half's layout
        return both.cos().to(x.dtype), both.sin().to(x.dtype)

    saved = norm.forward, rotary.forward
    norm.forward, rotary.forward = norm_forward, rotary_forward
    try:
        yield
    finally:
        norm.forward, rotary.forward = saved


def ours_from_folder(folder, dtype):
    config = config_from_llama_json(json.loads((folder / "config.json").read_text()))
    state_dict = {name: t.to(dtype) for name, t in read_safetensors(folder / "model.safetensors").items()}
    return load_llama_state_dict(modern_lm(config).to(dtype).eval(), state_dict), config


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"V{s[0]}-C{s[1]}-L{s[2]}-nh{s[3]}-kv{s[4]}-H{s[5]}" + "-tied" * s[7])
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_logits_match_llamaforcausallm(tmp_path, shape, dtype, tolerance):
    V, C, L, nh, n_kv, H, P, tied = shape
    hf = hf_llama(*shape)
    hf.save_pretrained(tmp_path)
    hf = hf.to(dtype)
    ours, config = ours_from_folder(tmp_path, dtype)
    assert (config.n_kv_heads, config.n_hidden, config.max_len, config.tie_weights) == (n_kv, H, P, tied)
    ids = torch.randint(V, (3, P), generator=torch.Generator().manual_seed(1))  # (B, T = max_len)
    with torch.no_grad(), (_float64_throughout() if dtype == torch.float64 else nullcontext()):
        expected = hf(ids).logits
        got = ours(ids)
    difference = (expected - got).abs().max().item()
    print(f"{dtype}, {n_kv} of {nh} heads: largest logit difference from LlamaForCausalLM {difference:.2e} "
          f"(logits up to {expected.abs().max().item():.2f})")
    assert got.dtype == dtype and difference < tolerance
    assert (ours.lm_head.weight is ours.word_to_embedding.weight) == tied


def test_the_comparison_can_fail(tmp_path):
    """A loader that swaps the key and value maps of one layer is caught (n_kv = nh, so it loads)."""
    hf = hf_llama(*SHAPES[3]).double()
    hf.save_pretrained(tmp_path)
    ours, _ = ours_from_folder(tmp_path, torch.float64)
    with torch.no_grad():
        attention = ours.layers[1].attention
        key = attention.key.weight.clone()
        attention.key.weight.copy_(attention.value.weight)
        attention.value.weight.copy_(key)
    ids = torch.randint(SHAPES[3][0], (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), _float64_throughout():
        assert (hf(ids).logits - ours(ids)).abs().max() > 1e-3


def test_float32_casts_are_why_float64_needs_the_patch(tmp_path):
    """Without the patch, Hugging Face's float64 model still rounds its norms and angles to float32:
    its logits differ from the course's float64 ones by far more than 1e-10, and from its own
    patched run by the same."""
    hf = hf_llama(*SHAPES[0]).double()
    hf.save_pretrained(tmp_path)
    ours, _ = ours_from_folder(tmp_path, torch.float64)
    ids = torch.randint(SHAPES[0][0], (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        plain = hf(ids).logits
        with _float64_throughout():
            patched = hf(ids).logits
        got = ours(ids)
    assert (patched - got).abs().max() < 1e-10 < (plain - got).abs().max() < 1e-4
