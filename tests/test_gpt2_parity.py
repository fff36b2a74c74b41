"""Lesson 10 against an independent implementation: Hugging Face transformers' GPT-2.

No network: the tests build a small GPT-2 (GPT2Config with every size different) and small
vocab.json / merges.txt files themselves, then compare the course's TransformerLM (loaded with
lesson 10's load_gpt2_state_dict) and its BPE tokenizer with GPT2LMHeadModel and GPT2Tokenizer.
transformers is a test-only dependency (pip install -e '.[dev]'); without it these tests skip.
"""

import json
import os
from pathlib import Path

import pytest
import torch

from helpers.checks.gpt2 import gpt2_shaped_config
from helpers.data import GPT2_ENV_VAR, DataUnavailableError, gpt2_files
from helpers.reference.gpt2 import (
    BPETokenizer,
    build_vocab,
    decode,
    encode,
    load_gpt2_state_dict,
    read_gpt2_checkpoint,
    read_safetensors,
    train_bpe,
    write_gpt2_files,
)
from helpers.reference.transformer_lm import Config, TransformerLM

transformers = pytest.importorskip("transformers", reason="the parity tests need transformers: pip install -e '.[dev]'")

SIZES = dict(V=37, P=19, C=24, L=3, nh=4)  # hs = 6, n_inner = 96
HARD_TEXTS = [
    "Hello world! It's a test: don't we'll they've I'm you'd.",
    "naïve café, 10 € each 😀😀 and e\u0301 (combining), 日本語のテキスト, Ελληνικά",
    "   leading spaces\n\n\ttabs\r\nand  double  spaces   ",
    "numbers 12345 and 3.14159, ½ ² Ⅻ, symbols #$%^&*()[]{}<>",
    "",
    " ",
    "ROMEO: But, soft! what light through yonder window breaks?",
]


def hf_gpt2(seed: int = 0):
    """A small GPT2LMHeadModel with non-trivial biases and norms (its own init leaves them at 0 and 1)."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=SIZES["V"], n_positions=SIZES["P"], n_embd=SIZES["C"], n_layer=SIZES["L"], n_head=SIZES["nh"],
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
            elif ".ln_" in name:
                p.normal_(1, 0.2)
    return model


def ours_from(state_dict, dtype=torch.float32):
    config = Config(**gpt2_shaped_config(SIZES["V"], SIZES["P"], SIZES["C"], SIZES["L"], SIZES["nh"]))
    model = TransformerLM(config).to(dtype).eval()
    checkpoint = {k.removeprefix("transformer."): v for k, v in state_dict.items() if k != "lm_head.weight"}
    return load_gpt2_state_dict(model, checkpoint)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
def test_logits_match_gpt2lmheadmodel(dtype, tolerance):
    hf = hf_gpt2().to(dtype)
    ours = ours_from(hf.state_dict(), dtype)
    ids = torch.randint(SIZES["V"], (3, SIZES["P"]), generator=torch.Generator().manual_seed(1))  # (B, T = max_len)
    with torch.no_grad():
        expected = hf(ids).logits
        got = ours(ids)
    difference = (expected - got).abs().max().item()
    print(f"{dtype}: largest logit difference from GPT2LMHeadModel {difference:.2e}")
    assert difference < tolerance
    assert ours.lm_head.weight is ours.word_to_embedding.weight


def test_safetensors_and_bin_files_read_the_same_tensors(tmp_path):
    hf = hf_gpt2(seed=2)
    hf.save_pretrained(tmp_path / "st")  # model.safetensors, as published
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    from safetensors.torch import load_file

    reference = load_file(tmp_path / "st" / "model.safetensors")
    ours = read_safetensors(tmp_path / "st" / "model.safetensors")
    assert set(ours) == set(reference)
    assert all(torch.equal(ours[k], reference[k]) and ours[k].dtype == reference[k].dtype for k in reference)
    from_st = read_gpt2_checkpoint(tmp_path / "st" / "model.safetensors")
    from_bin = read_gpt2_checkpoint(tmp_path / "pytorch_model.bin")
    assert set(from_st) == set(from_bin) and "wte.weight" in from_st and "lm_head.weight" not in from_st
    ids = torch.randint(SIZES["V"], (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(ours_from(from_st)(ids), hf(ids).logits, atol=2e-5)


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    """vocab.json and merges.txt of merges learnt from a mixed text with GPT-2's pre-split."""
    text = " ".join(HARD_TEXTS) * 3 + " the then them there they theatre 1234 1234 €€€ 😀😀😀"
    merges = train_bpe(text, 120)
    folder = tmp_path_factory.mktemp("bpe")
    write_gpt2_files(merges, folder)
    return folder, merges


@pytest.mark.parametrize("text", HARD_TEXTS)
def test_tokenizer_ids_match_gpt2tokenizer(small_files, text):
    folder, merges = small_files
    ours = BPETokenizer.from_files(folder / "vocab.json", folder / "merges.txt")
    theirs = transformers.GPT2Tokenizer.from_pretrained(folder)
    ids = ours.encode(text)
    assert ids == theirs.encode(text)
    assert ours.decode(ids) == text == theirs.decode(ids)


def test_round_trip_and_partial_characters(small_files):
    _, merges = small_files
    vocab = build_vocab(merges)
    for text in HARD_TEXTS:
        assert decode(encode(text, merges), vocab) == text
    assert decode([0xE2, 0x82], vocab) == "\ufffd"  # a character cut off: one replacement character


def test_file_ids_are_gpt2s_own_not_byte_values(tmp_path):
    """GPT-2 numbers single bytes in bytes_to_unicode's order: '!' is 0 and a space (Ġ) is 220."""
    folder, _ = tmp_path, write_gpt2_files({}, tmp_path)
    table = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    shuffled = {text: i for i, text in enumerate(sorted(table, key=lambda t: (len(t), t)))}  # another numbering
    (folder / "vocab.json").write_text(json.dumps(shuffled, ensure_ascii=False), encoding="utf-8")
    ours = BPETokenizer.from_files(folder / "vocab.json", folder / "merges.txt")
    theirs = transformers.GPT2Tokenizer.from_pretrained(folder)
    assert ours.encode(HARD_TEXTS[1]) == theirs.encode(HARD_TEXTS[1])


def test_gpt2_files_offline_gives_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(GPT2_ENV_VAR, raising=False)
    with pytest.raises(DataUnavailableError, match=GPT2_ENV_VAR):
        gpt2_files(cache_dir=tmp_path, download=False)
    with pytest.raises(DataUnavailableError, match="vocab.json"):
        gpt2_files(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    (tmp_path / "vocab.json").write_text("{}")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(DataUnavailableError, match="checksum"):
        gpt2_files(tmp_path)
    files = gpt2_files(tmp_path, sha256=False)
    assert files.weights.name == "pytorch_model.bin"


@pytest.mark.skipif(not os.environ.get(GPT2_ENV_VAR), reason=f"set {GPT2_ENV_VAR} to a copy of GPT-2 small's files")
def test_real_gpt2_small_matches_transformers():
    files = gpt2_files()
    ours = BPETokenizer.from_files(files.vocab, files.merges)
    theirs = transformers.GPT2Tokenizer.from_pretrained(Path(files.vocab).parent)
    for text in HARD_TEXTS:
        assert ours.encode(text) == theirs.encode(text)
    from helpers.reference.gpt2 import GPT2_SMALL

    model = load_gpt2_state_dict(TransformerLM(GPT2_SMALL).eval(), read_gpt2_checkpoint(files.weights))
    hf = transformers.GPT2LMHeadModel.from_pretrained(Path(files.weights).parent).eval()
    ids = torch.tensor([ours.encode(HARD_TEXTS[6])])
    with torch.no_grad():
        assert (model(ids) - hf(ids).logits).abs().max() < 1e-3


def test_dropout_by_configuration_acts_in_training_only_and_keeps_the_keys():
    sizes = dict(n_vocab=11, max_len=8, emb_dim=12, n_hidden=20, head_dim=3, n_heads=4, n_layers=2)
    torch.manual_seed(0)
    plain = TransformerLM(Config(**sizes))
    torch.manual_seed(0)
    dropping = TransformerLM(Config(**sizes, dropout=0.3))
    assert plain.state_dict().keys() == dropping.state_dict().keys()
    ids = torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(1))
    dropping.train()
    assert not torch.allclose(dropping(ids), dropping(ids)), "training mode drops at random"
    plain.eval(), dropping.eval()
    torch.testing.assert_close(dropping(ids), plain(ids))  # evaluation mode: exactly the plain model
