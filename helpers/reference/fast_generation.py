"""Reference implementation for lesson 9: Fast generation: a KV cache, batches of prompts, grouped-query attention and RoPE.

Generated from solutions/09-fast-generation/09-fast-generation.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


# Built in lessons 04, 06 and 08; taken from the course's reference implementation.
from helpers.reference.multihead import CausalSelfAttention
from helpers.reference.sampling import sample_next
from helpers.reference.transformer_lm import Config, TransformerLM


class CachedSelfAttention(CausalSelfAttention):
    """Lesson 04's CausalSelfAttention that takes the keys and values of earlier positions.

    x: (B, T_new, C), the new positions only. cache: None (nothing before them), or the pair
    (k, v) of the earlier positions' keys and values, each (B, nh, T_past, hs).
    mask: None, or a boolean tensor that broadcasts to (B, nh, T_new, T_past + T_new), True where
    a query may look at a key; None means causal: new query i sits at absolute position
    T_past + i and sees the keys 0 ... T_past + i.
    Returns (out, (k, v)): out (B, T_new, C), and the grown cache, k and v each
    (B, nh, T_past + T_new, hs). Parameters: query, key, value, to_output, as in CausalSelfAttention.
    """

    def forward(self, x, cache=None, mask=None):
        B, T_new, C = x.shape
        nh, hs = self.n_heads, self.head_dim
        q = self.query(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, T_new, nh*hs) -> (B, nh, T_new, hs)
        k = self.key(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, T_new, nh*hs) -> (B, nh, T_new, hs)
        v = self.value(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, T_new, nh*hs) -> (B, nh, T_new, hs)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)  # (B, nh, T_past + T_new, hs): the past first
            v = torch.cat([cache[1], v], dim=2)  # (B, nh, T_past + T_new, hs)
        T_total = k.shape[2]
        T_past = k.shape[2] - T_new  # the positions already cached
        if mask is None:  # query i is at position T_past + i: keys 0 ... T_past + i
            mask = torch.ones(T_new, T_total, dtype=torch.bool, device=x.device).tril(diagonal=T_past)
        scores = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T_new, T_total)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (B, nh, T_new, T_total)
        out = (weights @ v).transpose(1, 2).reshape(B, T_new, nh * hs)  # (B, nh, T_new, hs) -> (B, T_new, nh*hs)
        return self.to_output(out), (k, v)


def forward_cached(model, ids, caches, positions, mask=None):
    """Run lesson 06's TransformerLM on new tokens only, reading and growing one cache per layer.

    ids: (B, T_new) the new tokens; caches: None, or one (k, v) pair per layer, each
    (B, nh, T_past, hs); positions: (T_new,) or (B, T_new) their absolute positions (ids into
    pos_to_embedding); mask: passed to every layer's attention (None: causal).
    Returns (logits (B, T_new, V), the grown caches). Layer by layer it computes what
    TransformerBlock.forward computes, with CachedSelfAttention's forward on the layer's own
    attention weights.
    """
    x = model.word_to_embedding(ids) + model.pos_to_embedding(positions)  # (B, T_new, C)
    caches = [None] * len(model.layers) if caches is None else caches
    grown = []
    for layer, cache in zip(model.layers, caches, strict=True):
        attended, cache = CachedSelfAttention.forward(layer.attention, layer.norm_before_attn(x), cache, mask)
        x = x + attended  # (B, T_new, C)
        x = x + layer.mlp(layer.norm_before_mlp(x))  # (B, T_new, C)
        grown.append(cache)
    return model.lm_head(model.final_norm(x)), grown  # (B, T_new, V), one (k, v) per layer


@torch.no_grad()
def generate_cached(model, ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    """Lesson 08's generate with a KV cache: the same tokens, far fewer computations.

    ids: (T0,) or (B, T0) prompt ids -> (T0 + max_new_tokens,) or (B, T0 + max_new_tokens).
    While the text fits in max_len, each step runs forward_cached on the newest token alone, at
    the next position. Past max_len: every step runs the last max_len tokens from scratch, at
    positions 0 ... max_len - 1 (the window lesson 08 uses), and starts a new cache.
    Runs without gradients, in evaluation mode, and puts the model back in the mode it was in.
    """
    was_training = model.training
    model.eval()
    unbatched = ids.dim() == 1
    if unbatched:
        ids = ids.unsqueeze(0)  # (T0,) -> (1, T0)
    max_len = model.config.max_len
    caches, logits = None, None
    for _ in range(max_new_tokens):
        T_past = 0 if caches is None else caches[0][0].shape[2]
        if caches is not None and T_past < max_len:  # one new token, at the next position
            positions = torch.arange(T_past, T_past + 1, device=ids.device)  # (1,)
            logits, caches = forward_cached(model, ids[:, -1:], caches, positions)  # (B, 1, V)
        else:  # the start, or the window is full: the last max_len tokens from scratch
            context = ids[:, -max_len:]  # (B, T) with T <= max_len
            positions = torch.arange(context.shape[1], device=ids.device)  # (T,)
            logits, caches = forward_cached(model, context, None, positions)  # (B, T, V)
        next_ids = sample_next(logits[:, -1, :], temperature, top_k, top_p, generator)  # (B,)
        ids = torch.cat([ids, next_ids.unsqueeze(1)], dim=1)  # (B, T0 + generated so far)
    model.train(was_training)
    return ids.squeeze(0) if unbatched else ids


def batch_mask_and_positions(real, T_new):
    """The attention mask and the position ids of the newest T_new columns of a left-padded batch.

    real: (B, T_total) bool, True at real tokens, False at padding; T_new: how many of the last
    columns are being computed now (T_past = T_total - T_new are in the cache).
    Returns:
      mask (B, 1, T_new, T_total) bool: new query i (absolute column T_past + i) may look at
        key j when j <= T_past + i and key j is a real token; a padding query looks at itself only.
      positions (B, T_new) long: for a real token, how many real tokens come before it in its
        row (0 for the first); 0 for padding.
    """
    B, T_total = real.shape
    T_past = real.shape[1] - T_new  # the columns already in the cache
    causal = torch.ones(T_new, T_total, dtype=torch.bool, device=real.device).tril(diagonal=T_past)  # (T_new, T_total)
    columns = torch.arange(T_total, device=real.device)  # (T_total,)
    itself = columns == (T_past + torch.arange(T_new, device=real.device)).unsqueeze(1)  # (T_new, T_total)
    mask = causal & (real.unsqueeze(1) | itself)  # (T_new, T_total) & (B, 1, T_total) -> (B, T_new, T_total)
    positions = (real.long().cumsum(dim=1) - 1).clamp(min=0)  # (B, T_total): real tokens before each column
    return mask.unsqueeze(1), positions[:, T_past:]  # (B, 1, T_new, T_total), (B, T_new)


def left_pad(prompts, pad_id=0):
    """Prompts of different lengths, padded on the left: (ids (B, T0), real (B, T0) bool)."""
    T0 = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T0), pad_id, dtype=torch.long)  # (B, T0)
    real = torch.zeros(len(prompts), T0, dtype=torch.bool)  # (B, T0)
    for row, prompt in enumerate(prompts):
        ids[row, T0 - len(prompt) :] = prompt
        real[row, T0 - len(prompt) :] = True
    return ids, real


@torch.no_grad()
def generate_batch(model, prompts, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    """Generate from several prompts of different lengths at once, with a KV cache.

    prompts: a list of 1-D id tensors. Returns a list of 1-D tensors, each prompt followed by its
    max_new_tokens new ids. Every row's tokens must fit in the window: longest prompt +
    max_new_tokens <= max_len.
    """
    ids, real = left_pad(prompts)  # (B, T0) each
    B, T0 = ids.shape
    if T0 + max_new_tokens > model.config.max_len:
        raise ValueError(f"{T0} + {max_new_tokens} tokens do not fit in max_len = {model.config.max_len}")
    was_training = model.training
    model.eval()
    mask, positions = batch_mask_and_positions(real, T0)  # (B, 1, T0, T0), (B, T0)
    logits, caches = forward_cached(model, ids, None, positions, mask)  # (B, T0, V)
    new = []
    for step in range(max_new_tokens):
        next_ids = sample_next(logits[:, -1, :], temperature, top_k, top_p, generator)  # (B,)
        new.append(next_ids)
        if step + 1 < max_new_tokens:
            real = torch.cat([real, torch.ones(B, 1, dtype=torch.bool)], dim=1)  # (B, T + 1)
            mask, positions = batch_mask_and_positions(real, 1)  # (B, 1, 1, T + 1), (B, 1)
            logits, caches = forward_cached(model, next_ids.unsqueeze(1), caches, positions, mask)  # (B, 1, V)
    model.train(was_training)
    generated = torch.stack(new, dim=1) if new else ids[:, :0]  # (B, max_new_tokens)
    return [torch.cat([prompt, row]) for prompt, row in zip(prompts, generated, strict=True)]


class GroupedQueryAttention(nn.Module):
    """Causal self-attention where groups of query heads share one key head and one value head.

    x: (B, T_new, C); cache: None or (k, v), each (B, n_kv, T_past, hs), n_kv = n_kv_heads.
    Query head h reads key and value head h // (nh // n_kv): consecutive query heads share.
    Returns (out (B, T_new, C), (k, v) each (B, n_kv, T_past + T_new, hs)): the cache keeps the
    n_kv heads, never the repeated ones. With n_kv_heads == n_heads it computes what
    CausalSelfAttention computes with the same weights.
    Parameters: query (C -> nh*hs), key and value (C -> n_kv*hs), to_output (nh*hs -> C).
    """

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
        B, T_new, C = x.shape
        nh, n_kv, hs = self.n_heads, self.n_kv_heads, self.head_dim
        q = self.query(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, T_new, nh*hs) -> (B, nh, T_new, hs)
        k = self.key(x).view(B, T_new, n_kv, hs).transpose(1, 2)  # (B, T_new, n_kv*hs) -> (B, n_kv, T_new, hs)
        v = self.value(x).view(B, T_new, n_kv, hs).transpose(1, 2)  # (B, T_new, n_kv*hs) -> (B, n_kv, T_new, hs)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)  # (B, n_kv, T_past + T_new, hs)
            v = torch.cat([cache[1], v], dim=2)
        T_total = k.shape[2]
        group = nh // n_kv
        k_all = k.repeat_interleave(group, dim=1)  # (B, n_kv, T_total, hs) -> (B, nh, T_total, hs)
        v_all = v.repeat_interleave(group, dim=1)  # head h reads kv head h // group
        mask = torch.ones(T_new, T_total, dtype=torch.bool, device=x.device).tril(diagonal=T_total - T_new)
        scores = q @ k_all.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T_new, T_total)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        out = (weights @ v_all).transpose(1, 2).reshape(B, T_new, nh * hs)  # (B, nh, T_new, hs) -> (B, T_new, nh*hs)
        return self.to_output(out), (k, v)


def apply_rope(x, positions, base=10000.0):
    """Rotary position embedding: turn pairs of features by an angle that grows with the position.

    x: (..., T, hs) with hs even; positions: (T,) the absolute position of each row.
    Convention (halves): feature i pairs with feature i + hs/2, for i < hs/2; the pair is turned
    by the angle positions[t] * base ** (-2i / hs). Returns a new tensor of x's shape and dtype.
    """
    half = x.shape[-1] // 2
    freqs = base ** (-2 * torch.arange(half, dtype=torch.float64, device=x.device) / x.shape[-1])  # (hs/2,)
    angles = positions.to(torch.float64).unsqueeze(-1) * freqs  # (T, 1) * (hs/2,) -> (T, hs/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, hs/2) each
    x1, x2 = x[..., :half], x[..., half:]  # (..., T, hs/2) each: the pairs are (x1[i], x2[i])
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, hs)


class RotarySelfAttention(CausalSelfAttention):
    """CachedSelfAttention with rotary positions: queries and keys turned by apply_rope.

    x: (B, T_new, C); cache: None or (k, v), each (B, nh, T_past, hs), the keys already turned.
    The new positions are T_past ... T_past + T_new - 1; values are never turned.
    Returns (out (B, T_new, C), (k, v) each (B, nh, T_past + T_new, hs)), causal as in Exercise 1.
    """

    def forward(self, x, cache=None):
        B, T_new, C = x.shape
        nh, hs = self.n_heads, self.head_dim
        T_past = 0 if cache is None else cache[0].shape[2]
        positions = torch.arange(T_past, T_past + T_new, device=x.device)  # (T_new,)
        q = self.query(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, T_new, nh*hs) -> (B, nh, T_new, hs)
        k = self.key(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, T_new, nh*hs) -> (B, nh, T_new, hs)
        v = self.value(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, T_new, nh*hs) -> (B, nh, T_new, hs)
        q, k = apply_rope(q, positions), apply_rope(k, positions)  # (B, nh, T_new, hs) each
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)  # (B, nh, T_past + T_new, hs)
            v = torch.cat([cache[1], v], dim=2)
        mask = torch.ones(T_new, T_past + T_new, dtype=torch.bool, device=x.device).tril(diagonal=T_past)
        scores = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T_new, T_past + T_new)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, T_new, nh * hs)  # (B, nh, T_new, hs) -> (B, T_new, nh*hs)
        return self.to_output(out), (k, v)


class RotaryTransformerLM(TransformerLM):
    """Lesson 06's TransformerLM with rotary positions instead of a table of learned positions.

    The same parameters, less pos_to_embedding; every layer's attention is a RotarySelfAttention.
    input_ids: (B, T) or (T,) -> logits (B, T, V) or (T, V), for any T: nothing limits T to max_len.
    """

    def __init__(self, config):
        super().__init__(config)
        del self.pos_to_embedding  # no table of positions: the attention turns queries and keys
        for layer in self.layers:
            layer.attention = RotarySelfAttention(config.emb_dim, config.head_dim, config.n_heads)
        self.apply(self._init_weights)
        if config.tie_weights:
            self.lm_head.weight = self.word_to_embedding.weight

    def forward(self, input_ids):
        if input_ids.dim() == 1:  # (T,) -> (1, T) -> logits (1, T, V) -> (T, V)
            return self.forward(input_ids.unsqueeze(0)).squeeze(0)
        x = self.word_to_embedding(input_ids)  # (B, T, C): no position vectors added
        for layer in self.layers:
            x = x + layer.attention(layer.norm_before_attn(x))[0]  # (B, T, C)
            x = x + layer.mlp(layer.norm_before_mlp(x))  # (B, T, C)
        return self.lm_head(self.final_norm(x))  # (B, T, V)
