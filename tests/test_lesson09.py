"""Lesson 09: every catalogued mistake of fast generation loses exactly its exercise's points and
is named; correct answers written differently get full marks; the checks' own arithmetic (written
out because the lesson's reference is hidden while it is graded) agrees with the reference."""

import pytest
import torch
from harness import Catalogue, CatalogueTests

from helpers.checks.batch_mask import expected_mask_and_positions, generate_batch_with
from helpers.checks.kv_cache import KnownGoodCachedAttention, chained, small_model
from helpers.checks.rope import known_good_rope, rotary_chained
from helpers.reference import fast_generation as ref
from helpers.reference.multihead import CausalSelfAttention
from helpers.reference.sampling import generate

A = "09-fast-generation"
CACHE, GEN, BATCH, GQA, ROPE = "cached-attention", "generate-cached", "batch-mask", "grouped-query", "rotary"

CAT_K = "k = torch.cat([cache[0], k], dim=2)  # (B, nh, T_past + T_new, hs): the past first"
CAT_V = "v = torch.cat([cache[1], v], dim=2)  # (B, nh, T_past + T_new, hs)"
EXPLICIT = '''scores = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T_new, T_total)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (B, nh, T_new, T_total)
        out = (weights @ v).transpose(1, 2)'''
STEP = "positions = torch.arange(T_past, T_past + 1, device=ids.device)  # (1,)"
ONE_TOKEN = "if caches is not None and T_past < max_len:  # one new token, at the next position"
MASK = "mask = causal & (real.unsqueeze(1) | itself)"
POSITIONS = "positions = (real.long().cumsum(dim=1) - 1).clamp(min=0)"
GQA_RETURN = "return self.to_output(out), (k, v)"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    "cache-mask-not-offset": (CACHE, [("dtype=torch.bool, device=x.device).tril(diagonal=T_past)",
                                       "dtype=torch.bool, device=x.device).tril()")], "not offset by T_past"),
    "cache-sdpa-is-causal": (CACHE, [(EXPLICIT, "out = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)")],
                             "is_causal=True"),
    "cache-cat-on-heads": (CACHE, [(CAT_K, "k = torch.cat([cache[0], k], dim=1)"), (CAT_V, "v = torch.cat([cache[1], v], dim=1)")],
                           "dim=2"),
    "cache-returns-new-only": (CACHE, [("return self.to_output(out), (k, v)",
                                        "return self.to_output(out), (k[:, :, -T_new:], v[:, :, -T_new:])")],
                               "return the grown cache"),
    "cache-new-before-past": (CACHE, [(CAT_K, "k = torch.cat([k, cache[0]], dim=2)"), (CAT_V, "v = torch.cat([v, cache[1]], dim=2)")],
                              "past first"),
    "cache-ignores-mask": (CACHE, [("if mask is None:", "if True:")], "ignored the mask"),
    "gen-positions-from-zero": (GEN, [(STEP, "positions = torch.arange(1, device=ids.device)")], "continue from the cache"),
    "gen-cache-under-autograd": (GEN, [("@torch.no_grad()\ndef generate_cached", "def generate_cached")], "autograd"),
    "gen-no-cache-used": (GEN, [(ONE_TOKEN, "if False:")], "re-ran the whole window"),
    "gen-slides-the-cache": (GEN, [(ONE_TOKEN, "if caches is not None:\n            if T_past >= max_len:\n"
                                    "                caches = [(k[:, :, 1:], v[:, :, 1:]) for k, v in caches]\n"
                                    "                T_past = max_len - 1\n"
                                    "                positions = torch.arange(T_past, T_past + 1)")], "slid"),
    "gen-prompt-not-cropped": (GEN, [("context = ids[:, -max_len:]", "context = ids")], "Crop the prompt"),
    "batch-padding-attended": (BATCH, [(MASK, "mask = causal.expand(B, T_new, T_total)")], "padding is attended"),
    "batch-empty-padding-rows": (BATCH, [(MASK, "mask = causal & real.unsqueeze(1)")], "NaN"),
    "batch-mask-not-offset": (BATCH, [(".tril(diagonal=T_past)  # (T_new, T_total)", ".tril()  # (T_new, T_total)")],
                              "not offset by T_past"),
    "batch-positions-not-per-row": (BATCH, [(POSITIONS, "positions = torch.arange(T_total).expand(B, T_total)")], "per row"),
    "batch-positions-from-one": (BATCH, [(POSITIONS, "positions = real.long().cumsum(dim=1)")], "start at 1"),
    "gqa-repeat-not-interleave": (GQA, [("k_all = k.repeat_interleave(group, dim=1)", "k_all = k.repeat(1, group, 1, 1)"),
                                        ("v_all = v.repeat_interleave(group, dim=1)", "v_all = v.repeat(1, group, 1, 1)")],
                                  "repeat_interleave"),
    "gqa-caches-repeated-heads": (GQA, [(GQA_RETURN, "return self.to_output(out), (k_all, v_all)")], "repeated heads"),
    "gqa-mask-not-offset": (GQA, [(".tril(diagonal=T_total - T_new)", ".tril()")], "not offset by T_past"),
    "rope-rotates-values": (ROPE, [("q, k = apply_rope(q, positions), apply_rope(k, positions)",
                                    "q, k, v = apply_rope(q, positions), apply_rope(k, positions), apply_rope(v, positions)")],
                            "values were rotated"),
    "rope-interleaved-pairs": (ROPE, [("x1, x2 = x[..., :half], x[..., half:]", "x1, x2 = x[..., 0::2], x[..., 1::2]"),
                                      ("return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)",
                                       "return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)")],
                               "interleaved"),
    "rope-positions-restart": (ROPE, [("positions = torch.arange(T_past, T_past + T_new, device=x.device)",
                                       "positions = torch.arange(T_new, device=x.device)")], "restart at 0"),
    "rope-frequency-without-two": (ROPE, [("base ** (-2 * torch.arange", "base ** (-1 * torch.arange")], "frequency of pair i"),
    "rope-rotation-not-a-rotation": (ROPE, [("x1 * sin + x2 * cos", "x1 * sin - x2 * cos")], "moves by"),

    # found by trying fresh mistakes on the diagnosis layer: cached attention
    "cache-masked-fill-not-inverted": (CACHE, [("scores.masked_fill(~mask, float(\"-inf\")), dim=-1)  # (B, nh, T_new, T_total)",
                                                "scores.masked_fill(mask, float(\"-inf\")), dim=-1)  # (B, nh, T_new, T_total)")], "NaN"),
    "cache-softmax-then-mask": (CACHE, [("weights = torch.softmax(scores.masked_fill(~mask, float(\"-inf\")), dim=-1)  # (B, nh, T_new, T_total)",
                                         "weights = torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)")], "output"),
    "cache-heads-not-transposed-back": (CACHE, [("out = (weights @ v).transpose(1, 2).reshape(B, T_new, nh * hs)  # (B, nh, T_new, hs) -> (B, T_new, nh*hs)",
                                                 "out = (weights @ v).reshape(B, T_new, nh * hs)")], "output"),
    "cache-mask-misses-itself": (CACHE, [("dtype=torch.bool, device=x.device).tril(diagonal=T_past)",
                                          "dtype=torch.bool, device=x.device).tril(diagonal=T_past - 1)")], "NaN"),
    "cache-mask-one-future": (CACHE, [("dtype=torch.bool, device=x.device).tril(diagonal=T_past)",
                                       "dtype=torch.bool, device=x.device).tril(diagonal=T_past + 1)")], "output"),
    "cache-scale-by-C": (CACHE, [("scores = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T_new, T_total)",
                                  "scores = q @ k.transpose(-2, -1) / math.sqrt(C)")], "sqrt(C)"),
    "cache-no-output-projection": (CACHE, [("return self.to_output(out), (k, v)\n", "return out, (k, v)\n")], "to_output"),
    "cache-v-not-grown": (CACHE, [(CAT_V, "pass")], "raised"),
    # generation
    "gen-positions-off-by-one": (GEN, [(STEP, "positions = torch.arange(T_past + 1, T_past + 2, device=ids.device)")], "at position T_past"),
    "gen-window-overflows": (GEN, [(ONE_TOKEN, "if caches is not None and T_past <= max_len:")], "position table"),
    "gen-no-generator": (GEN, [("next_ids = sample_next(logits[:, -1, :], temperature, top_k, top_p, generator)",
                                "next_ids = sample_next(logits[:, -1, :], temperature, top_k, top_p)")], "generator"),
    "gen-train-mode-after": (GEN, [("model.train(was_training)", "model.train()")], "training"),
    "gen-no-eval": (GEN, [("    model.eval()\n    unbatched", "    unbatched")], "training mode"),
    "gen-no-squeeze": (GEN, [("return ids.squeeze(0) if unbatched else ids", "return ids")], "shape"),
    "gen-no-unsqueeze": (GEN, [("ids = ids.unsqueeze(0)  # (T0,) -> (1, T0)", "pass")], "batch of one"),
    "gen-temperature-dropped": (GEN, [("next_ids = sample_next(logits[:, -1, :], temperature, top_k, top_p, generator)",
                                       "next_ids = sample_next(logits[:, -1, :], 1.0, top_k, top_p, generator)")], "ids differ"),
    # batch mask
    "batch-query-real-not-key": (BATCH, [(MASK, "mask = causal & (real[:, T_past:].unsqueeze(2) | itself)")], "padding is attended"),
    "batch-positions-all-columns": (BATCH, [("return mask.unsqueeze(1), positions[:, T_past:]", "return mask.unsqueeze(1), positions")], "positions"),
    "batch-mask-not-unsqueezed": (BATCH, [("return mask.unsqueeze(1), positions[:, T_past:]", "return mask, positions[:, T_past:]")], "shape"),
    "batch-positions-negative": (BATCH, [(POSITIONS, "positions = real.long().cumsum(dim=1) - 1")], "padding position"),
    "batch-mask-float": (BATCH, [("return mask.unsqueeze(1), positions[:, T_past:]", "return mask.unsqueeze(1).float(), positions[:, T_past:]")], "bool"),
    "batch-mask-one-future": (BATCH, [(".tril(diagonal=T_past)  # (T_new, T_total)", ".tril(diagonal=T_past + 1)  # (T_new, T_total)")], "j <= T_past + i"),
    "batch-positions-columns": (BATCH, [(POSITIONS, "positions = torch.arange(T_total).expand(B, T_total) - (~real).long().sum(dim=1, keepdim=True) * 0")], "per row"),
    "batch-itself-missing-decode": (BATCH, [(MASK, "mask = causal & real.unsqueeze(1) | torch.eye(T_new, T_total, dtype=torch.bool)")], "j <= T_past + i"),
    # grouped query
    "gqa-interleave-wrong-dim": (GQA, [("k_all = k.repeat_interleave(group, dim=1)", "k_all = k.repeat_interleave(group, dim=2)")], "raised"),
    "gqa-group-inverted": (GQA, [("group = nh // n_kv", "group = n_kv // nh")], "raised"),
    "gqa-key-view-nh": (GQA, [("k = self.key(x).view(B, T_new, n_kv, hs).transpose(1, 2)", "k = self.key(x).view(B, T_new, nh, hs).transpose(1, 2)")], "raised"),
    "gqa-scale-by-C": (GQA, [("scores = q @ k_all.transpose(-2, -1) / math.sqrt(hs)", "scores = q @ k_all.transpose(-2, -1) / math.sqrt(C)")], "sqrt(C)"),
    "gqa-only-k-interleaved": (GQA, [("v_all = v.repeat_interleave(group, dim=1)", "v_all = v.repeat(1, group, 1, 1)")], "output"),
    "gqa-no-mask": (GQA, [("weights = torch.softmax(scores.masked_fill(~mask, float(\"-inf\")), dim=-1)", "weights = torch.softmax(scores, dim=-1)")], "future"),
    "gqa-new-first": (GQA, [("k = torch.cat([cache[0], k], dim=2)  # (B, n_kv, T_past + T_new, hs)", "k = torch.cat([k, cache[0]], dim=2)"),
                            ("v = torch.cat([cache[1], v], dim=2)\n", "v = torch.cat([v, cache[1]], dim=2)\n")], "past first"),
    "gqa-no-projection": (GQA, [("return self.to_output(out), (k, v)", "return out, (k, v)")], "to_output"),
    # rope
    "rope-backwards": (ROPE, [("return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)",
                               "return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], dim=-1)")], "minus its angle"),
    "rope-growing-frequencies": (ROPE, [("base ** (-2 * torch.arange", "base ** (2 * torch.arange")], "grow"),
    "rope-in-place": (ROPE, [("return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)",
                              "x[..., :half], x[..., half:] = x1 * cos - x2 * sin, x1 * sin + x2 * cos\n    return x")], "in place"),
    "rope-angles-float32": (ROPE, [("angles = positions.to(torch.float64).unsqueeze(-1) * freqs", "angles = positions.float().unsqueeze(-1) * freqs.float()")], "float32 precision"),
    "rope-cos-for-both": (ROPE, [("x1 * sin + x2 * cos], dim=-1)", "x1 * cos + x2 * cos], dim=-1)")], "distance"),
    "rope-positions-from-hs": (ROPE, [("T_past = 0 if cache is None else cache[0].shape[2]", "T_past = 0 if cache is None else cache[0].shape[-1]")], "raised"),
    "rope-cache-unrotated": (ROPE, [("q, k = apply_rope(q, positions), apply_rope(k, positions)  # (B, nh, T_new, hs) each",
                                     "q = apply_rope(q, positions)"),
                                    ("scores = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T_new, T_past + T_new)",
                                     "scores = q @ apply_rope(k, torch.arange(T_past + T_new)).transpose(-2, -1) / math.sqrt(hs)")],
                             "already rotated"),
}

ALTERNATIVES = {
    "cache-sdpa-with-mask": {CACHE: '''
class CachedSelfAttention(CausalSelfAttention):
    def forward(self, x, cache=None, mask=None):
        B, T_new, C = x.shape
        q, k, v = (f(x).view(B, T_new, self.n_heads, self.head_dim).transpose(1, 2)
                   for f in (self.query, self.key, self.value))
        if cache:
            k = torch.cat((cache[0], k), dim=-2)
            v = torch.cat((cache[1], v), dim=-2)
        T_total = k.size(-2)
        if mask is None:
            i = torch.arange(T_new).unsqueeze(1) + (T_total - T_new)
            mask = torch.arange(T_total).unsqueeze(0) <= i
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.to_output(out.transpose(1, 2).reshape(B, T_new, -1)), (k, v)
'''},
    "cache-preallocated-einsum": {CACHE: '''
class CachedSelfAttention(CausalSelfAttention):
    def forward(self, x, cache=None, mask=None):
        B, T_new, _ = x.shape
        nh, hs = self.n_heads, self.head_dim
        T_past = 0 if cache is None else cache[0].shape[2]
        k_all = x.new_empty(B, nh, T_past + T_new, hs)
        v_all = x.new_empty(B, nh, T_past + T_new, hs)
        if cache is not None:
            k_all[:, :, :T_past] = cache[0]
            v_all[:, :, :T_past] = cache[1]
        k_all[:, :, T_past:] = self.key(x).reshape(B, T_new, nh, hs).permute(0, 2, 1, 3)
        v_all[:, :, T_past:] = self.value(x).reshape(B, T_new, nh, hs).permute(0, 2, 1, 3)
        q = self.query(x).reshape(B, T_new, nh, hs).permute(0, 2, 1, 3)
        scores = torch.einsum("bhid,bhjd->bhij", q, k_all) / hs ** 0.5
        if mask is None:
            mask = torch.triu(torch.ones(T_new, T_past + T_new, dtype=torch.bool), diagonal=T_past + 1).logical_not()
        scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
        out = torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), v_all)
        return self.to_output(out.permute(0, 2, 1, 3).reshape(B, T_new, nh * hs)), (k_all, v_all)
'''},
    "gen-prefill-then-steps": {GEN: '''
def generate_cached(model, ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    mode = model.training
    model.eval()
    single = ids.ndim == 1
    ids = ids[None] if single else ids
    window = model.config.max_len
    with torch.no_grad():
        caches = None
        while max_new_tokens > 0:
            if caches is None or caches[0][0].size(2) >= window:
                context = ids[:, -window:]
                logits, caches = forward_cached(model, context, None, torch.arange(context.size(1)))
            else:
                here = caches[0][0].size(2)
                logits, caches = forward_cached(model, ids[:, -1:], caches, torch.tensor([here]))
            chosen = sample_next(logits[:, -1], temperature, top_k, top_p, generator)
            ids = torch.cat((ids, chosen[:, None]), dim=1)
            max_new_tokens -= 1
    model.train(mode)
    return ids[0] if single else ids
'''},
    "batch-mask-by-comparisons": {BATCH: '''
def batch_mask_and_positions(real, T_new):
    B, T_total = real.shape
    query_at = torch.arange(T_total - T_new, T_total).view(1, T_new, 1)
    key_at = torch.arange(T_total).view(1, 1, T_total)
    visible = (key_at <= query_at) & (real[:, None, :] | (key_at == query_at))
    counts = torch.cumsum(real.to(torch.int64), dim=-1)
    positions = torch.where(real, counts - 1, torch.zeros_like(counts))
    return visible[:, None], positions[:, -T_new:]
'''},
    "gqa-expand-reshape": {GQA: '''
class GroupedQueryAttention(nn.Module):
    def __init__(self, emb_dim, head_dim, n_heads, n_kv_heads):
        super().__init__()
        if n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads = {n_kv_heads} must divide n_heads = {n_heads}")
        self.head_dim, self.n_heads, self.n_kv_heads = head_dim, n_heads, n_kv_heads
        self.query = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.key = nn.Linear(emb_dim, n_kv_heads * head_dim, bias=False)
        self.value = nn.Linear(emb_dim, n_kv_heads * head_dim, bias=False)
        self.to_output = nn.Linear(n_heads * head_dim, emb_dim, bias=False)

    def forward(self, x, cache=None):
        B, T_new, _ = x.shape
        nh, g, hs = self.n_heads, self.n_kv_heads, self.head_dim
        q = self.query(x).view(B, T_new, nh, hs).transpose(1, 2)
        k = self.key(x).view(B, T_new, g, hs).transpose(1, 2)
        v = self.value(x).view(B, T_new, g, hs).transpose(1, 2)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        T = k.shape[2]
        k_all = k[:, :, None].expand(B, g, nh // g, T, hs).reshape(B, nh, T, hs)
        v_all = v[:, :, None].expand(B, g, nh // g, T, hs).reshape(B, nh, T, hs)
        mask = torch.ones(T_new, T, dtype=torch.bool).tril(T - T_new)
        out = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)
        return self.to_output(out.transpose(1, 2).reshape(B, T_new, nh * hs)), (k, v)
'''},
    "rope-complex-numbers": {ROPE: '''
def apply_rope(x, positions, base=10000.0):
    half = x.shape[-1] // 2
    inv = 1.0 / base ** (torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    turn = torch.polar(torch.ones(len(positions), half, dtype=torch.float64), torch.outer(positions.double(), inv))
    z = torch.complex(x[..., :half].double(), x[..., half:].double()) * turn
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


class RotarySelfAttention(CausalSelfAttention):
    def forward(self, x, cache=None):
        B, T_new, _ = x.shape
        nh, hs = self.n_heads, self.head_dim
        start = cache[0].shape[-2] if cache is not None else 0
        where = torch.arange(start, start + T_new)
        q = apply_rope(self.query(x).view(B, T_new, nh, hs).transpose(1, 2), where)
        k = apply_rope(self.key(x).view(B, T_new, nh, hs).transpose(1, 2), where)
        v = self.value(x).view(B, T_new, nh, hs).transpose(1, 2)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        mask = torch.ones(T_new, start + T_new, dtype=torch.bool).tril(start)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.to_output(out.transpose(1, 2).reshape(B, T_new, nh * hs)), (k, v)
'''},
}

# {exercise: {words of a "must" sentence of its task: [mistakes that break it]}}
REQUIREMENTS = {
    CACHE: {"It must return `(out, (k, v))`": ["cache-returns-new-only", "cache-cat-on-heads", "cache-new-before-past"],
            "must see exactly the keys": ["cache-mask-not-offset", "cache-sdpa-is-causal"],
            "must be used instead of the causal mask": ["cache-ignores-mask"],
            "must equal one call": ["cache-mask-not-offset", "cache-new-before-past"]},
    GEN: {"It must:": ["gen-positions-from-zero", "gen-slides-the-cache", "gen-prompt-not-cropped", "gen-no-cache-used",
                       "gen-cache-under-autograd", "gen-no-eval", "gen-train-mode-after"]},
    BATCH: {"must see key": ["batch-padding-attended", "batch-mask-not-offset"],
            "no row may be all": ["batch-empty-padding-rows"],
            "must get the same tokens": ["batch-padding-attended", "batch-positions-not-per-row", "batch-positions-from-one"]},
    GQA: {"It must:": ["gqa-caches-repeated-heads", "gqa-repeat-not-interleave", "gqa-mask-not-offset"]},
    ROPE: {"It must return a **new** tensor": ["rope-interleaved-pairs", "rope-frequency-without-two", "rope-in-place",
                                               "rope-backwards", "rope-growing-frequencies"],
           "every dot product of the turned rows must stay": ["rope-rotation-not-a-rotation"],
           "values must not be turned": ["rope-rotates-values"],
           "must hold the keys already turned": ["rope-positions-restart"]},
}


class TestLesson09(CatalogueTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, requirements=REQUIREMENTS)


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
