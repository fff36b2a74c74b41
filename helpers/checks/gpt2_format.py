"""A small checkpoint in GPT-2's format and every sub-layer's output: what lesson 10's loading
check (``helpers.checks.gpt2``) probes with, and what the lesson draws its pictures from; and,
for that check's judge, which checkpoint entry each course parameter comes from and why one differs."""

from __future__ import annotations

import math
import re

import torch

from helpers.checks.core import first_mismatch

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


class WatchedCheckpoint(dict):
    """A checkpoint that records, in ``missed``, each name it was asked for (``[name]``) and does not hold."""

    def __init__(self, *args):
        super().__init__(*args)
        self.missed: list[str] = []

    def __missing__(self, key):
        self.missed.append(repr(key)[:100])
        raise KeyError(key)


def key_error_facts(load, fresh_model, checkpoint: WatchedCheckpoint, exc: BaseException) -> dict:
    """Probe side, after ``load(model, checkpoint)`` raised ``exc``: for a KeyError, whether the
    checkpoint itself was asked for the missing name (``asked_checkpoint``), and what the loader does
    on a fresh model and the same checkpoint without its two buffers (``without_buffers``: "ran" or
    the error)."""
    if not isinstance(exc, KeyError):
        return {}
    facts = {"asked_checkpoint": repr(exc.args[0] if exc.args else None)[:100] in checkpoint.missed}
    try:
        load(fresh_model(), {k: v for k, v in checkpoint.items() if not re.search(r"(^|\.)attn\.(masked_)?bias$", k)})
        facts["without_buffers"] = "ran"
    except Exception as other:  # noqa: BLE001 - what it raises then is evidence too
        facts["without_buffers"] = f"{type(other).__name__}: {other}"[:200]
    return facts


def key_error_hint(key: str, facts: dict) -> str | None:
    """Judge side: what ``key_error_facts`` established about a loader's KeyError for ``key``, or None."""
    if facts.get("without_buffers") == "ran":
        return (f"On the same checkpoint without its buffers h.i.attn.bias and h.i.attn.masked_bias, your loader runs "
                f"without an error: the KeyError {key!r} comes from those two entries. They are buffers (a causal "
                "mask and a constant), not weights: skip them." + ("" if facts.get("asked_checkpoint") else
                f" ({key!r} was looked up in a dict of your own, or a copy of state_dict, not in state_dict itself.)"))
    if facts.get("asked_checkpoint") is False:
        return (f"state_dict itself was never asked for {key!r}: the KeyError comes from another dict (a table of "
                "your own, or a copy of state_dict), which has no entry with that name.")
    return None


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


# ---------------------------------------------------------------------------------------------
# Where each course parameter comes from, and why a loaded one may differ


def gpt2_source(name: str) -> str:
    """The checkpoint entry a course parameter comes from."""
    parts = name.split(".")
    last = parts[-1]
    if name.startswith("word_to_embedding") or name.startswith("lm_head"):
        return "wte.weight"
    if name.startswith("pos_to_embedding"):
        return "wpe.weight"
    if name.startswith("final_norm"):
        return f"ln_f.{last}"
    i, part = parts[1], parts[2]
    if part in ("norm_before_attn", "norm_before_mlp"):
        return f"h.{i}.{'ln_1' if part == 'norm_before_attn' else 'ln_2'}.{last}"
    if part == "attention":
        if parts[3] == "to_output":
            return f"h.{i}.attn.c_proj.{last}"
        k = ("query", "key", "value").index(parts[3])
        return f"{parts[3]}'s third of h.{i}.attn.c_attn.{last} (output features {k}C to {k + 1}C)"
    return f"h.{i}.mlp.{'c_fc' if parts[4] == '0' else 'c_proj'}.{last}"


def _thirds(k: int) -> str:
    """Output features of c_attn's k-th third: "0 to C", "C to 2C", "2C to 3C"."""
    return " to ".join(("0", "C", "2C", "3C")[k:k + 2])


def _same(a, b) -> bool:  # noqa: D103
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=1e-6, rtol=1e-5)


def _cause(name, got, expected, initial, C, nh) -> str:
    """The most likely reason why parameter ``name`` holds ``got`` instead of ``expected``."""
    want, source = expected[name], gpt2_source(name)
    have = got.get(name)
    if not isinstance(have, torch.Tensor):
        return f"the model has no parameter {name} any more (keep the modules; copy into their parameters)"
    if have.shape != want.shape:
        return f"{name} has shape {tuple(have.shape)}, it should keep its {tuple(want.shape)}"
    if _same(have, initial[name]):
        layer = re.match(r"layers\.(\d+)\.", name)
        unloaded = {int(m[1]) for n in expected if (m := re.match(r"layers\.(\d+)\.", n))
                    and isinstance(got.get(n), torch.Tensor) and _same(got[n], initial[n])}
        layers = 1 + max((int(m[1]) for n in expected if (m := re.match(r"layers\.(\d+)\.", n))), default=-1)
        last = layers - 1
        if layer and int(layer[1]) == last and last > 0 and unloaded == {last} and all(
                _same(got.get(n), initial[n]) for n in expected if n.startswith(f"layers.{last}.")):
            return (f"none of layer {last}'s weights were loaded, the last of the checkpoint's {layers} layers, and "
                    f"every other layer's were: the loop over the layers stops one short (range({layers}) has {layers} "
                    "steps; the highest index h.i is one less than the count). Loop over model.layers, or "
                    "range(model.config.n_layers)")
        return f"{name} was not loaded: it still holds its initial random values; it comes from {source}"
    if have.dim() == 2 and have.shape[0] == have.shape[1] and _same(have, want.T):
        if ".attention.query" in name or ".attention.key" in name or ".attention.value" in name:
            return ("the fused query/key/value weight (c_attn) was not transposed: GPT-2's Conv1D stores it "
                    "(in, out) = (C, 3C); nn.Linear wants (out, in), so transpose before splitting")
        return f"{source} was not transposed: GPT-2's Conv1D stores (in, out), nn.Linear (out, in)"
    recut = ("was reshaped (view or reshape) into nn.Linear's shape instead of transposed: a reshape keeps the "
             "numbers in their order and only cuts the rows anew; Conv1D's (in, out) becomes (out, in) with .T")
    if have.dim() == 2 and _same(have, want.T.reshape(want.shape)):
        return f"{source} {recut}"
    prefix = name.rsplit(".", 2)[0]
    if ".attention." in name and name.split(".")[-2] in ("query", "key", "value"):
        kind = name.split(".")[-1]
        fused = torch.cat([expected[f"{prefix}.{p}.{kind}"] for p in ("query", "key", "value")])  # (3C, ...)
        part = ("query", "key", "value").index(name.split(".")[-2])
        if have.dim() == 2 and _same(have, fused.T.reshape(fused.shape)[part * C:(part + 1) * C]):
            return f"the fused query/key/value weight h.{name.split('.')[1]}.attn.c_attn.weight {recut}, before splitting"
        if _same(have, fused[part::3]):  # rows part, part + 3, ... of the (3C, ...) fused layout
            return (f"{name} holds every third output feature of c_attn.{kind} ({part}, {part + 3}, {part + 6}, ...): "
                    f"{name.split('.')[-2]}'s are the contiguous block {_thirds(part)}, [{part} * C : {part + 1} * C]")
        mine = name.split(".")[-2]
        for other in ("query", "key", "value"):
            if other != mine and _same(have, expected[f"{prefix}.{other}.{kind}"]):
                # the order is wrong only when the weight and the bias both show it (verified on both)
                both = all(_same(got.get(f"{prefix}.{mine}.{k}"), expected[f"{prefix}.{other}.{k}"])
                           for k in ("weight", "bias") if f"{prefix}.{mine}.{k}" in expected)
                if both:
                    return ("query, key and value came out of c_attn in the wrong order: its output features are "
                            f"query (0:C), then key (C:2C), then value (2C:3C); your {mine} holds {other}'s")
                o = ("query", "key", "value").index(other)
                return (f"{name} holds {other}'s {kind}: {mine}'s {kind} is output features {_thirds(part)} of "
                        f"c_attn.{kind}, and yours is {other}'s, {_thirds(o)}" + (" (the weight is right)" if _same(
                            got.get(f"{prefix}.{mine}.weight"), expected[f"{prefix}.{mine}.weight"]) else ""))
        hs = C // nh
        by_head = fused.reshape(nh, 3, hs, *fused.shape[1:])  # the per-head layout some other models use
        if _same(have, by_head[:, part].reshape(C, *fused.shape[1:])):
            return ("you split c_attn head by head (nh, 3, hs); GPT-2 keeps all of query's C features first, "
                    "then key's, then value's: split the 3C features into three blocks of C")
    if name.endswith(".weight") and _same(have, expected.get(name[: -len("weight")] + "bias", want * 0)):
        return f"{name} holds the bias: weight and bias were swapped ({source})"
    holds = [other for other, tensor in expected.items() if other != name and tensor.shape == want.shape and _same(have, tensor)]
    if holds:
        other = min(holds, key=lambda o: o.split(".")[-1] != name.split(".")[-1])  # a like-named one first
        return f"{name} holds what belongs in {other} (from {gpt2_source(other)}); it comes from {source}"
    return f"{name} differs from {source}: " + first_mismatch(want, have, 1e-6, 1e-5)


# ---------------------------------------------------------------------------------------------
# Loading a checkpoint (GPT-2's and Llama's): the model's own tensors, not views of the checkpoint's


def shared_with_checkpoint(model: torch.nn.Module, checkpoint) -> dict[str, str]:
    """``{parameter name: checkpoint key}`` for every parameter of ``model`` whose memory is a
    checkpoint tensor's (``param.data = sd[k]`` makes it so; ``param.copy_(sd[k])`` does not)."""
    stored = {t.untyped_storage().data_ptr(): k for k, t in checkpoint.items() if isinstance(t, torch.Tensor)}
    return {n: stored[p.untyped_storage().data_ptr()] for n, p in model.named_parameters()
            if p.untyped_storage().data_ptr() in stored}


def shared_message(what: str, shared: dict[str, str]) -> str:
    """What a parameter that shares the checkpoint's memory means, with the first such pair."""
    (param, key), *more = shared.items()
    return (f"{what}: after loading, the model's {param} shares its memory with the checkpoint's {key}"
            + (f" ({len(more)} more parameters share theirs)" if more else "") + ": the parameter became a view of "
            "the checkpoint (as `.data = ...` makes it), so changing one changes the other and the model takes the "
            "checkpoint's dtype. Copy the values into the model's own tensors: param.copy_(...).")


def changed_message(what: str, how: str) -> str:
    """Judge side: the loader changed the checkpoint it was handed."""
    return (f"{what}: the weights load, but the caller's checkpoint came back changed: {how}. The caller may load it "
            "again (into a second model, after a restart) or keep reading it: read the checkpoint, and transpose, "
            "split or rename into new tensors (w.t(), not w.t_(); a dict of your own, not pop or assignment into "
            "the caller's).")
