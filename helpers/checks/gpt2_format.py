"""A small checkpoint in GPT-2's format and every sub-layer's output: what lesson 10's loading
check (``helpers.checks.gpt2``) probes with, and what the lesson draws its pictures from."""

from __future__ import annotations

import math

import torch

# ---------------------------------------------------------------------------------------------
# A checkpoint in GPT-2's format, and every sub-layer's output


def gpt2_format_checkpoint(V: int, P: int, C: int, L: int, seed: int, dtype=torch.float64) -> dict:
    """A random checkpoint with GPT-2's names and layouts: Conv1D weights (in, out), the fused
    c_attn (C, 3C) with query, key, value side by side, n_inner = 4C, and the two buffers that
    a loader must skip. P is the number of positions (wpe's rows)."""
    g = torch.Generator().manual_seed(seed)

    def normal(*shape, scale):
        return (scale * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)

    sd = {"wte.weight": normal(V, C, scale=0.5), "wpe.weight": normal(P, C, scale=0.3)}
    for i in range(L):
        h = f"h.{i}."
        for norm in ("ln_1", "ln_2"):
            sd[h + norm + ".weight"] = 1 + normal(C, scale=0.3)
            sd[h + norm + ".bias"] = normal(C, scale=0.2)
        sd[h + "attn.bias"] = torch.tril(torch.ones(P, P, dtype=dtype)).view(1, 1, P, P)  # a buffer: the mask
        sd[h + "attn.masked_bias"] = torch.tensor(-1e4, dtype=dtype)  # a buffer of older checkpoints
        sd[h + "attn.c_attn.weight"] = normal(C, 3 * C, scale=1 / math.sqrt(C))  # (in, out): q | k | v
        sd[h + "attn.c_attn.bias"] = normal(3 * C, scale=0.2)
        sd[h + "attn.c_proj.weight"] = normal(C, C, scale=1 / math.sqrt(C))
        sd[h + "attn.c_proj.bias"] = normal(C, scale=0.2)
        sd[h + "mlp.c_fc.weight"] = normal(C, 4 * C, scale=1 / math.sqrt(C))
        sd[h + "mlp.c_fc.bias"] = normal(4 * C, scale=0.2)
        sd[h + "mlp.c_proj.weight"] = normal(4 * C, C, scale=1 / math.sqrt(4 * C))
        sd[h + "mlp.c_proj.bias"] = normal(C, scale=0.2)
    sd["ln_f.weight"] = 1 + normal(C, scale=0.3)
    sd["ln_f.bias"] = normal(C, scale=0.2)
    return sd


def gpt2_shaped_config(V: int, P: int, C: int, L: int, nh: int) -> dict:
    """The fields of lesson 06's Config for a GPT-2-shaped model of these sizes."""
    return dict(n_vocab=V, max_len=P, emb_dim=C, n_hidden=4 * C, head_dim=C // nh, n_heads=nh, n_layers=L,
                tie_weights=True, final_norm=True, attn_bias=True, activation="gelu_tanh")


SUBLAYERS = ("norm_before_attn", "attention", "norm_before_mlp", "mlp")
GPT2_NAMES = {"norm_before_attn": "ln_1", "attention": "attention", "norm_before_mlp": "ln_2", "mlp": "MLP"}


@torch.no_grad()
def sublayer_outputs(model, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every sub-layer's output for ids (B, T), in the order they run: "embeddings" (tokens plus
    positions, what layer 0 reads), "layer i ln_1", "layer i attention", "layer i ln_2", "layer i
    MLP" for every layer, "final norm" and "logits"."""
    found: dict[str, torch.Tensor] = {}
    handles = [model.layers[0].register_forward_pre_hook(lambda m, args: found.__setitem__("embeddings", args[0]))]

    def keep(name):
        return lambda module, args, out: found.__setitem__(name, out)

    for i, layer in enumerate(model.layers):
        for part in SUBLAYERS:
            handles.append(getattr(layer, part).register_forward_hook(keep(f"layer {i} {GPT2_NAMES[part]}")))
    handles.append(model.final_norm.register_forward_hook(keep("final norm")))
    try:
        logits = model(ids)  # (B, T, V)
    finally:
        for handle in handles:
            handle.remove()
    order = ["embeddings"] + [f"layer {i} {GPT2_NAMES[p]}" for i in range(len(model.layers)) for p in SUBLAYERS]
    return {**{name: found[name] for name in order + ["final norm"] if name in found}, "logits": logits}
