"""Lesson 09's rotary position embeddings written out for the checks (the lesson's reference is hidden
while it is graded; ``tests/test_lesson09.py`` checks that these agree with it): ``known_good_rope``
with the classic mistakes as flavours, and rotary attention run chunk by chunk with a growing cache.

Shape legend: B batch, T time, C embedding size, nh heads, hs head size, T_past cached positions,
T_new new ones.
"""

from __future__ import annotations

import math

import torch

from helpers.checks.kv_cache_known import causal_with_past


def known_good_rope(x, positions, base=10000.0, flavour="right", k=2.0):
    """RoPE in the lesson's convention (pair i turns by base ** (-k i / hs) per position); ``flavour``
    names a mistake instead: ``interleaved`` (pairs 2i, 2i+1), ``no-two`` (k = 1), ``ignores-positions``
    (0 ... T-1), ``growing`` (k = -2), ``backwards`` (turned by minus the angle), ``cos-sin-swapped``,
    ``float32-angles`` (the angles computed in float32), ``index-minus-one`` / ``index-plus-one`` (pair i
    at the frequency of pair i - 1 / i + 1: a formula's 1-based index used with a 0-based one)."""
    hs = x.shape[-1]
    half = hs // 2
    index = torch.arange(half, dtype=torch.float64) + {"index-minus-one": -1, "index-plus-one": 1}.get(flavour, 0)
    exponent = (1 if flavour == "no-two" else -2 if flavour == "growing" else k) * index / hs
    if flavour == "ignores-positions":
        positions = torch.arange(x.shape[-2])
    angles = positions.to(torch.float64).unsqueeze(-1) * base ** (-exponent)  # (T, hs/2)
    if flavour == "float32-angles":  # positions and frequencies in float32, as torch.arange gives them by default
        angles = positions.to(torch.float32).unsqueeze(-1) * (base ** (-exponent)).to(torch.float32)
    angles = -angles if flavour == "backwards" else angles
    cos, sin = (angles.cos().to(x.dtype), angles.sin().to(x.dtype))[:: -1 if flavour == "cos-sin-swapped" else 1]
    if flavour == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def rotary_chained(weights, x, chunks, nh, flavour="right"):
    """Rotary attention chunk by chunk; ``flavour``: ``right``, ``rotate-values``, ``positions-restart``
    (each call's positions start at 0), ``no-rotation`` (plain causal attention), ``rotate-after-concat``
    (every key rotated after joining the cache: the cached ones twice), ``values-not-keys`` (the values
    rotated, the keys not), ``keys-not-turned`` and ``queries-not-turned`` (one of the two left as it is)."""
    B, _, C = x.shape
    hs = weights["query.weight"].shape[0] // nh
    outs, cache, start = [], None, 0
    for T_new in chunks:
        xc = x[:, start : start + T_new]
        T_past = 0 if cache is None else cache[0].shape[2]
        positions = torch.arange(T_new) if flavour == "positions-restart" else torch.arange(T_past, T_past + T_new)
        start += T_new

        def heads(name, xc=xc, T_new=T_new):
            return (xc @ weights[name].T).view(B, T_new, nh, hs).transpose(1, 2)  # (B, nh, T_new, hs)

        q, k, v = heads("query.weight"), heads("key.weight"), heads("value.weight")
        if flavour != "no-rotation":
            q = q if flavour == "queries-not-turned" else known_good_rope(q, positions)
            k = k if flavour in ("rotate-after-concat", "values-not-keys", "keys-not-turned") else known_good_rope(k, positions)
        if flavour in ("rotate-values", "values-not-keys"):
            v = known_good_rope(v, positions)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        if flavour == "rotate-after-concat":  # the cached keys, already turned, are turned again
            k = known_good_rope(k, torch.arange(k.shape[2]))
        cache = (k, v)
        mask = causal_with_past(T_new, k.shape[2])
        scores = (q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~mask, float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T_new, nh * hs)  # (B, T_new, nh*hs)
        outs.append(out @ weights["to_output.weight"].T)
    return torch.cat(outs, dim=1), cache
