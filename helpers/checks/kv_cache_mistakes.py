"""Lesson 09: the words of each mistaken flavour of cached attention (``kv_cache_known.attend_step``
computes the flavour; ``kv_cache`` names it when its output reproduces the student's)."""

from __future__ import annotations

MISTAKES = {
    "mask-not-offset": "the causal mask of the new queries was not offset by T_past: new query i sits at absolute position "
    "T_past + i and must see every key up to it (a one-token query must see all past keys; "
    "F.scaled_dot_product_attention(..., is_causal=True) aligns its mask top-left, so a one-token query sees only key 0: "
    "pass attn_mask instead)",
    "no-mask": "the new queries see every key, their own future included: is the causal mask missing, or offset by "
    "T_total where it is T_past (T_past read after the concatenation, when k.shape[2] is already T_past + T_new)? "
    "Keep the causal mask, offset by T_past",
    "view-split": "the heads were split with one view to (B, nh, T_new, hs): view re-reads the (B, T_new, nh*hs) "
    "projection in memory order, so one 'head' gets the features of several positions (and of several heads). Split "
    "the last axis first, view(B, T_new, nh, hs), then move the heads forward with transpose(1, 2)",
    "self-hidden": "each query's own key is hidden: new query i sees keys j < T_past + i, where j <= T_past + i is "
    "meant (key T_past + i is the query's own position; the very first query then sees no key at all, and its softmax "
    "over -inf alone is NaN)",
    "returns-v-k": "the cache came back as (v, k): the next call takes cache[0] for the keys; return (k, v)",
    "cache-ignored": "the cache was not used: the new queries attend only to the new keys; put the cached keys and values in "
    "front of the new ones",
    "new-first": "the new keys and values went before the cached ones: concatenate the past first, [cache[0], k], so that "
    "column j of the scores is position j",
    "sqrt-C": "the scores were divided by sqrt(C) = sqrt(emb_dim) instead of sqrt(hs) = sqrt(head_dim)",
    "v-from-k-cache": "the values were grown from the cached keys (torch.cat([cache[0], v])): the cached values are cache[1]",
    "k-from-v-cache": "the keys were grown from the cached values (torch.cat([cache[1], k])): the cached keys are cache[0]",
    "values-are-keys": "the attention weights multiply the keys instead of the values: your output is "
    "softmax(scores) @ keys (a copy of the keys' line, k where v was meant?); weight the values, softmax(scores) @ v",
    "tiled": "the key and value heads were repeated in the wrong order (repeat tiles them: query head h read kv head h % n_kv); "
    "consecutive query heads share a kv head: head h reads kv head h // (nh // n_kv), which repeat_interleave(..., dim=1) "
    "(or expand + reshape) gives",
}
