"""Lesson 09's known-good cached attention, written out for the checks: one call of attention on new
positions with a growing cache (``attend_step``), a run chunk after chunk (``chained``), the course's
``CachedSelfAttention`` and ``forward_cached`` as the checks' own (the lesson's reference is hidden
while it is graded; ``tests/test_lesson09.py`` checks that they agree with it), and a small seeded
``TransformerLM``.

Shape legend: B batch, C embedding size, nh heads, n_kv key-value heads, hs head size, T_past cached
positions, T_new new ones, T_total = T_past + T_new.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# lesson 06's model: hidden while lessons up to 06 are graded, so used only inside functions
from helpers.reference import transformer_lm


def causal_with_past(T_new: int, T_total: int, offset: bool = True) -> torch.Tensor:
    """(T_new, T_total) bool, True where new query i (at T_total - T_new + i) may see key j."""
    diagonal = T_total - T_new if offset else 0
    return torch.ones(T_new, T_total, dtype=torch.bool).tril(diagonal=diagonal)


def attend_step(weights: dict, xc, cache, nh: int, n_kv: int, flavour: str = "right", mask=None):
    """One call of cached attention on the new positions ``xc`` (B, T_new, C): ``(out, (k, v))``. ``flavour``:
    ``right``, or a mistake: ``mask-not-offset`` (the new chunk's causal mask, top-left aligned), ``no-mask``,
    ``self-hidden`` (key T_past + i hidden from new query i), ``cache-ignored``, ``new-first`` (new keys before the cached ones), ``sqrt-C`` (scaled by sqrt(C)),
    ``tiled`` (key-value heads repeated with ``repeat`` instead of ``repeat_interleave``), ``v-from-k-cache``
    and ``k-from-v-cache`` (one cache grown from the other's past), ``values-are-keys`` (the keys weighted in
    place of the values), ``returns-v-k`` (the cache handed back as (v, k)), ``view-split`` (the heads split with
    one view to (B, nh, T_new, hs), which reads the features of several positions as one head's)."""
    (B, T_new, C), hs = xc.shape, weights["query.weight"].shape[0] // nh
    if flavour == "view-split":  # (B, T_new, nh*hs) read in memory order as (B, nh, T_new, hs): no transpose
        q, k, v = ((xc @ weights[f"{m}.weight"].T).view(B, h, T_new, hs)
                   for m, h in (("query", nh), ("key", n_kv), ("value", n_kv)))
    else:
        q = (xc @ weights["query.weight"].T).view(B, T_new, nh, hs).transpose(1, 2)  # (B, nh, T_new, hs)
        k = (xc @ weights["key.weight"].T).view(B, T_new, n_kv, hs).transpose(1, 2)  # (B, n_kv, T_new, hs)
        v = (xc @ weights["value.weight"].T).view(B, T_new, n_kv, hs).transpose(1, 2)
    if cache is not None and flavour != "cache-ignored":
        olds = {"v-from-k-cache": (cache[0], cache[0]), "k-from-v-cache": (cache[1], cache[1])}.get(flavour, cache)
        k, v = (torch.cat((new, old) if flavour == "new-first" else (old, new), dim=2)
                for old, new in zip(olds, (k, v), strict=True))
    T_total, k_all, v_all = k.shape[2], k, v
    if nh != n_kv:  # (B, n_kv, T_total, hs) -> (B, nh, T_total, hs)
        group = nh // n_kv
        k_all, v_all = (t.repeat(1, group, 1, 1) if flavour == "tiled" else t.repeat_interleave(group, dim=1) for t in (k, v))
    if flavour == "values-are-keys":
        v_all = k_all
    if mask is None:
        mask = causal_with_past(T_new, T_total, offset=flavour != "mask-not-offset").to(xc.device)
        mask = torch.ones_like(mask) if flavour == "no-mask" else mask
        mask = mask.tril(diagonal=T_total - T_new - 1) if flavour == "self-hidden" else mask
    scale = math.sqrt(C if flavour == "sqrt-C" else hs)
    scores = (q @ k_all.transpose(-2, -1) / scale).masked_fill(~mask, float("-inf"))  # (B, nh, T_new, T_total)
    out = (torch.softmax(scores, dim=-1) @ v_all).transpose(1, 2).reshape(B, T_new, nh * hs)  # (B, T_new, nh*hs)
    return out @ weights["to_output.weight"].T, ((v, k) if flavour == "returns-v-k" else (k, v))  # (B, T_new, C)


def chained(weights: dict, x: torch.Tensor, chunks: list[int], nh: int, n_kv: int | None = None,
            flavour: str = "right", masks: list | None = None):
    """Run attention chunk after chunk with a growing cache: ``(out (B, T, C), [(k, v) per chunk])``."""
    outs, caches, cache, start = [], [], None, 0
    for index, T_new in enumerate(chunks):
        out, cache = attend_step(weights, x[:, start : start + T_new], cache, nh, n_kv or nh, flavour,
                                 None if masks is None else masks[index])
        start += T_new
        outs.append(out)
        caches.append(cache)
    return torch.cat(outs, dim=1), caches


class KnownGoodCachedAttention(nn.Module):
    """The course's ``CachedSelfAttention``, with lesson 04's parameters written out (its reference is hidden
    while lessons 03 and 04 are graded). ``calls`` records every call: the number of new positions, whether
    the returned cache carries an autograd graph (``requires_grad``), and the mode it ran in."""

    calls: list[dict] = []

    def __init__(self, emb_dim: int, head_dim: int, n_heads: int):
        super().__init__()
        self.head_dim, self.n_heads = head_dim, n_heads
        for name in ("query", "key", "value"):
            setattr(self, name, nn.Linear(emb_dim, n_heads * head_dim, bias=False))
        self.to_output = nn.Linear(n_heads * head_dim, emb_dim, bias=False)

    def forward(self, x, cache=None, mask=None):
        weights = {f"{name}.weight": getattr(self, name).weight for name in ("query", "key", "value", "to_output")}
        out, (k, v) = attend_step(weights, x, cache, self.n_heads, self.n_heads, mask=mask)
        KnownGoodCachedAttention.calls.append({"T_new": x.shape[1], "grad": bool(k.requires_grad), "training": self.training})
        return out, (k, v)


CONFIG = dict(n_vocab=13, max_len=9, emb_dim=12, n_hidden=14, head_dim=5, n_heads=3, n_layers=2)


def small_model(max_len: int = 9) -> transformer_lm.TransformerLM:
    """A float64 TransformerLM with seeded weights large enough that its choices vary."""
    model = transformer_lm.TransformerLM(transformer_lm.Config(**{**CONFIG, "max_len": max_len})).double()
    g = torch.Generator().manual_seed(90)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=g, dtype=torch.float64) * 0.7)
    return model.eval()


def known_good_forward_cached(model, ids, caches, positions, mask=None):
    """The course's ``forward_cached``, with ``KnownGoodCachedAttention`` in every layer."""
    x = model.word_to_embedding(ids) + model.pos_to_embedding(positions)  # (B, T_new, C)
    caches = [None] * len(model.layers) if caches is None else caches
    grown = []
    for layer, cache in zip(model.layers, caches, strict=True):
        attended, cache = KnownGoodCachedAttention.forward(layer.attention, layer.norm_before_attn(x), cache, mask)
        x = x + attended
        x = x + layer.mlp(layer.norm_before_mlp(x))
        grown.append(cache)
    return model.lm_head(model.final_norm(x)), grown

