"""Lesson 09: every catalogued mistake of fast generation loses exactly its exercise's points and
is named; correct answers written differently get full marks; the checks' own arithmetic (written
out because the lesson's reference is hidden while it is graded) agrees with the reference."""

import pytest
import torch
from harness import CatalogueTests, catalogue

from helpers.checks.batch_mask import expected_mask_and_positions, generate_batch_with
from helpers.checks.kv_cache_known import KnownGoodCachedAttention, chained, small_model
from helpers.checks.rope_known import known_good_rope, rotary_chained
from helpers.reference import fast_generation as ref
from helpers.reference.multihead import CausalSelfAttention
from helpers.reference.sampling import generate

A = "09-fast-generation"


class TestLesson09(CatalogueTests):
    catalogue = catalogue(A)


# ---------------------------------------------------------------------------------------------
# The checks' own arithmetic against the reference (probes may not import the lesson's reference)


def _weights(C, hs, nh, n_kv, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"query.weight": torch.randn(nh * hs, C, generator=g, dtype=torch.float64),
            "key.weight": torch.randn(n_kv * hs, C, generator=g, dtype=torch.float64),
            "value.weight": torch.randn(n_kv * hs, C, generator=g, dtype=torch.float64),
            "to_output.weight": torch.randn(C, nh * hs, generator=g, dtype=torch.float64)}


@pytest.mark.parametrize("chunks", [[7], [3, 1, 1, 2], [1, 6]])
def test_chained_attention_is_lesson_04s_and_the_references(chunks):
    w = _weights(11, 4, 3, 3)
    x = torch.randn(2, sum(chunks), 11, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    full = CausalSelfAttention(11, 4, 3).double()
    full.load_state_dict(w)
    out, caches = chained(w, x, chunks, 3)
    torch.testing.assert_close(out, full(x))
    for cls in (ref.CachedSelfAttention, KnownGoodCachedAttention):
        module = cls(11, 4, 3).double()
        module.load_state_dict(w)
        outs, cache, start = [], None, 0
        for T_new in chunks:
            o, cache = module(x[:, start : start + T_new], cache)
            outs.append(o)
            start += T_new
        torch.testing.assert_close(torch.cat(outs, 1), out)
        torch.testing.assert_close(cache[0], caches[-1][0])


def test_chained_grouped_query_is_the_references():
    w = _weights(13, 4, 6, 2)
    x = torch.randn(3, 8, 13, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    module = ref.GroupedQueryAttention(13, 4, 6, 2).double()
    module.load_state_dict(w)
    o1, cache = module(x[:, :5])
    o2, cache = module(x[:, 5:], cache)
    torch.testing.assert_close(torch.cat([o1, o2], 1), chained(w, x, [5, 3], 6, 2)[0])
    assert cache[0].shape == (3, 2, 8, 4)


def test_known_good_rope_and_rotary_chain_are_the_references():
    x = torch.randn(2, 3, 7, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    positions = torch.arange(5, 12)
    torch.testing.assert_close(known_good_rope(x, positions), ref.apply_rope(x, positions))
    w = {k: v for k, v in _weights(10, 6, 2, 2).items()}
    module = ref.RotarySelfAttention(10, 6, 2).double()
    module.load_state_dict(w)
    y = torch.randn(1, 9, 10, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    o1, cache = module(y[:, :4])
    o2, cache = module(y[:, 4:], cache)
    torch.testing.assert_close(torch.cat([o1, o2], 1), rotary_chained(w, y, [4, 5], 2)[0])


def test_rope_scores_depend_only_on_distance():
    q = torch.randn(5, 8, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    positions = torch.arange(5)
    a = ref.apply_rope(q, positions) @ ref.apply_rope(q, positions).T
    b = ref.apply_rope(q, positions + 37) @ ref.apply_rope(q, positions + 37).T
    torch.testing.assert_close(a, b)


def test_the_checks_batch_tools_are_the_references():
    real = torch.tensor([[False, False, True, True, True], [True, True, True, True, True], [False, True, True, True, True]])
    for T_new in (5, 2, 1):
        mask, pos = ref.batch_mask_and_positions(real, T_new)
        want_mask, want_pos = expected_mask_and_positions(real, T_new)
        assert torch.equal(mask, want_mask) and torch.equal(pos, want_pos)
    model = small_model(max_len=13)
    prompts = [torch.tensor([3, 7, 1, 12]), torch.tensor([4]), torch.tensor([8, 2])]
    ours = generate_batch_with(ref.batch_mask_and_positions, model, prompts, 4)
    theirs = ref.generate_batch(model, prompts, 4, temperature=0.0)
    for row, prompt in zip(theirs, prompts, strict=True):
        assert torch.equal(row, generate(model, prompt, 4, temperature=0))
    assert torch.equal(ours, torch.stack([t[-4:] for t in theirs]))


def test_generate_cached_is_generate_past_max_len_and_with_sampling():
    model = small_model()
    for shape, options in (((5,), {"temperature": 1.0}), ((2, 12), {"temperature": 0.7, "top_k": 4})):
        prompt = torch.randint(0, 13, shape, generator=torch.Generator().manual_seed(6))
        a = generate(model, prompt, 15, **options, generator=torch.Generator().manual_seed(7))
        b = ref.generate_cached(model, prompt, 15, **options, generator=torch.Generator().manual_seed(7))
        assert torch.equal(a, b)


def test_rotary_lm_runs_past_max_len_and_has_no_position_table():
    from helpers.reference.transformer_lm import Config

    lm = ref.RotaryTransformerLM(Config(n_vocab=11, max_len=6, emb_dim=12, n_hidden=14, head_dim=4, n_heads=3, n_layers=2))
    assert not hasattr(lm, "pos_to_embedding")
    assert lm(torch.randint(0, 11, (2, 15))).shape == (2, 15, 11)
    assert lm.lm_head.weight is lm.word_to_embedding.weight
