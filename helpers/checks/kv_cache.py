"""Checks for lesson 09 (fast generation): attention with a KV cache, and grouped-query attention.

A module is run in chunks, each call handing back the cache it was given, grown: a prompt of a
few tokens, then a few more, then one token at a time. Its outputs side by side must equal one
call of lesson 04's ``CausalSelfAttention`` on the whole sequence, and its cache the keys and
values of every position so far, in the layout ``(B, nh, T, hs)``. Wrong answers are recognised
by computing what each classic mistake outputs on the same chunks (``chained``).

Shape legend: B batch, T time, C embedding size (emb_dim), nh heads (n_heads), n_kv key-value
heads (n_kv_heads), hs head size (head_dim), T_past cached positions, T_new new ones. No two
sizes of a case are equal.

The probes never use this lesson's reference (hidden while the lesson is graded): the arithmetic
they need is written out here (``chained``, ``KnownGoodCachedAttention``), and
``tests/test_lesson09.py`` checks that it agrees with the reference.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from helpers.checks.core import Check, CheckFailed, close, describe, first_mismatch, identify
from helpers.checks.diagnose import explain_mismatch

# lesson 06's model: hidden while lessons up to 06 are graded, so used only inside functions
from helpers.reference.transformer_lm import Config, TransformerLM

PARAMS = ("key.weight", "query.weight", "to_output.weight", "value.weight")


def causal_with_past(T_new: int, T_total: int, offset: bool = True) -> torch.Tensor:
    """(T_new, T_total) bool, True where new query i (at T_total - T_new + i) may see key j."""
    diagonal = T_total - T_new if offset else 0
    return torch.ones(T_new, T_total, dtype=torch.bool).tril(diagonal=diagonal)


def chained(weights: dict, x: torch.Tensor, chunks: list[int], nh: int, n_kv: int | None = None,
            flavour: str = "right", masks: list | None = None):
    """Run attention chunk after chunk with a growing cache: ``(out (B, T, C), [(k, v) per chunk])``.

    ``flavour`` names what is computed: ``right``, or a mistake: ``mask-not-offset`` (the causal
    mask of the new chunk alone, top-left aligned), ``no-mask``, ``cache-ignored``, ``new-first``
    (new keys before the cached ones), ``sqrt-C`` (scaled by sqrt(C)), ``tiled`` (key-value heads
    repeated with ``repeat`` instead of ``repeat_interleave``).
    """
    n_kv = nh if n_kv is None else n_kv
    B, _, C = x.shape
    hs = weights["query.weight"].shape[0] // nh
    outs, caches, cache, start = [], [], None, 0
    for index, T_new in enumerate(chunks):
        xc = x[:, start : start + T_new]  # (B, T_new, C)
        start += T_new
        q = (xc @ weights["query.weight"].T).view(B, T_new, nh, hs).transpose(1, 2)  # (B, nh, T_new, hs)
        k = (xc @ weights["key.weight"].T).view(B, T_new, n_kv, hs).transpose(1, 2)  # (B, n_kv, T_new, hs)
        v = (xc @ weights["value.weight"].T).view(B, T_new, n_kv, hs).transpose(1, 2)
        if cache is not None and flavour != "cache-ignored":
            pair = (k, cache[0]) if flavour == "new-first" else (cache[0], k)
            k = torch.cat(pair, dim=2)
            v = torch.cat((v, cache[1]) if flavour == "new-first" else (cache[1], v), dim=2)
        cache = (k, v)
        caches.append(cache)
        T_total = k.shape[2]
        if nh != n_kv:
            group = nh // n_kv
            k = k.repeat(1, group, 1, 1) if flavour == "tiled" else k.repeat_interleave(group, dim=1)
            v = v.repeat(1, group, 1, 1) if flavour == "tiled" else v.repeat_interleave(group, dim=1)
        mask = causal_with_past(T_new, T_total, offset=flavour != "mask-not-offset")
        if flavour == "no-mask":
            mask = torch.ones_like(mask)
        if masks is not None and masks[index] is not None:
            mask = masks[index]
        scale = math.sqrt(C if flavour == "sqrt-C" else hs)
        scores = (q @ k.transpose(-2, -1) / scale).masked_fill(~mask, float("-inf"))  # (B, nh, T_new, T_total)
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T_new, nh * hs)  # (B, T_new, nh*hs)
        outs.append(out @ weights["to_output.weight"].T)  # (B, T_new, C)
    return torch.cat(outs, dim=1), caches


class KnownGoodCachedAttention(nn.Module):
    """The course's ``CachedSelfAttention``, for checks that need it while another exercise is judged.

    The parameters of lesson 04's ``CausalSelfAttention`` (written out: lesson 04's reference is
    hidden while lessons 03 and 04 are graded, and this module is imported then too).
    ``calls`` records, for every call made while a check runs, the number of new positions and
    whether the returned cache carries an autograd graph (``requires_grad``).
    """

    calls: list[dict] = []

    def __init__(self, emb_dim: int, head_dim: int, n_heads: int):
        super().__init__()
        self.head_dim, self.n_heads = head_dim, n_heads
        self.query = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.key = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.value = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.to_output = nn.Linear(n_heads * head_dim, emb_dim, bias=False)

    def forward(self, x, cache=None, mask=None):
        B, T_new, _ = x.shape
        nh, hs = self.n_heads, self.head_dim
        q = self.query(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, T_new, nh*hs) -> (B, nh, T_new, hs)
        k = self.key(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, nh, T_new, hs)
        v = self.value(x).view(B, T_new, nh, hs).transpose(1, 2)  # (B, nh, T_new, hs)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)  # (B, nh, T_total, hs)
        T_total = k.shape[2]
        if mask is None:
            mask = causal_with_past(T_new, T_total).to(x.device)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~mask, float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T_new, nh * hs)  # (B, T_new, nh*hs)
        KnownGoodCachedAttention.calls.append({"T_new": T_new, "grad": bool(k.requires_grad)})
        return self.to_output(out), (k, v)


CONFIG = dict(n_vocab=13, max_len=9, emb_dim=12, n_hidden=14, head_dim=5, n_heads=3, n_layers=2)


def small_model(max_len: int = 9) -> TransformerLM:
    """A float64 TransformerLM with seeded weights large enough that its choices vary."""
    model = TransformerLM(Config(**{**CONFIG, "max_len": max_len})).double()
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


def _weights(g, C, hs, nh, n_kv, dtype):
    return {
        "query.weight": torch.randn(nh * hs, C, generator=g, dtype=torch.float64).to(dtype),
        "key.weight": torch.randn(n_kv * hs, C, generator=g, dtype=torch.float64).to(dtype),
        "value.weight": torch.randn(n_kv * hs, C, generator=g, dtype=torch.float64).to(dtype),
        "to_output.weight": (torch.randn(C, nh * hs, generator=g, dtype=torch.float64) / math.sqrt(nh * hs)).to(dtype),
    }


def _inputs(case):
    seed, B, C, hs, nh, n_kv, chunks, dtype = case
    g = torch.Generator().manual_seed(seed)
    weights = _weights(g, C, hs, nh, n_kv, dtype)
    x = torch.randn(B, sum(chunks), C, generator=g, dtype=torch.float64).to(dtype)
    T = min(sum(chunks), 6)
    mask = torch.rand(B, 1, T, T, generator=g) < 0.5
    mask |= torch.eye(T, dtype=torch.bool)  # every query sees at least itself
    return weights, x, mask


def _build(cls, case, with_kv: bool):
    seed, B, C, hs, nh, n_kv, chunks, dtype = case
    args = (C, hs, nh, n_kv) if with_kv else (C, hs, nh)
    module = cls(*args)
    names = sorted(name for name, _ in module.named_parameters())
    if names != list(PARAMS):
        raise CheckFailed(f"{cls.__name__}{args} should have exactly the parameters {', '.join(PARAMS)} "
                          f"(keep the constructor as given); it has {names}.")
    weights, x, mask = _inputs(case)
    module = module.to(dtype)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if tuple(param.shape) != tuple(weights[name].shape):
                raise CheckFailed(f"{name} has shape {tuple(param.shape)}, expected {tuple(weights[name].shape)}.")
            param.copy_(weights[name])
    return module, x, mask


def _run_chunks(module, x, chunks, **extra) -> dict:
    """Call ``module`` chunk by chunk, handing back its own cache; stop at the first error."""
    outs, shapes, cache, start = [], [], None, 0
    for step, T_new in enumerate(chunks):
        try:
            result = module(x[:, start : start + T_new], cache, **extra)
            out, cache = result
            k, v = cache
        except Exception as exc:  # noqa: BLE001 - the judge explains the error
            return {"outs": outs, "shapes": shapes, "error": f"{type(exc).__name__}: {exc}"[:1500], "step": step}
        start += T_new
        outs.append(out)
        shapes.append([list(getattr(k, "shape", [])), list(getattr(v, "shape", []))])
    return {"outs": outs, "shapes": shapes, "k": cache[0], "v": cache[1]}


def _probe(cases, with_kv: bool):
    def probe(cls) -> dict:
        if not isinstance(cls, type):
            raise CheckFailed(f"expected a class, got {describe(cls)}")
        runs = []
        for case in cases:
            module, x, mask = _build(cls, case, with_kv)
            with torch.no_grad():
                run = _run_chunks(module, x, case[6])
                if not with_kv:
                    T = mask.shape[-1]
                    try:
                        run["masked"] = module(x[:, :T], None, mask)[0]
                    except Exception as exc:  # noqa: BLE001
                        run["masked"] = f"{type(exc).__name__}: {exc}"[:500]
            runs.append(run)
        return {"runs": runs}

    return probe


CAT_HINT = ("Concatenate the cached keys and the new ones along the time dimension, dim=2 of the "
            "(B, nh, T, hs) layout: torch.cat([cache[0], k], dim=2).")
MISTAKES = {
    "mask-not-offset": "the causal mask of the new queries was not offset by T_past: new query i sits at "
    "absolute position T_past + i and must see every key up to it (a one-token query must see all past "
    "keys; F.scaled_dot_product_attention(..., is_causal=True) aligns its mask top-left, so a one-token "
    "query sees only key 0: pass attn_mask instead)",
    "no-mask": "the new queries see every key, their own future included: keep the causal mask, offset by T_past",
    "cache-ignored": "the cache was not used: the new queries attend only to the new keys; put the cached "
    "keys and values in front of the new ones",
    "new-first": "the new keys and values went before the cached ones: concatenate the past first, "
    "[cache[0], k], so that column j of the scores is position j",
    "sqrt-C": "the scores were divided by sqrt(C) = sqrt(emb_dim) instead of sqrt(hs) = sqrt(head_dim)",
    "tiled": "the key and value heads were repeated in the wrong order (repeat tiles them: query head h "
    "read kv head h % n_kv); consecutive query heads share a kv head: head h reads kv head h // (nh // n_kv), "
    "which repeat_interleave(..., dim=1) (or expand + reshape) gives",
}


def _judge(cases, with_kv: bool, name: str):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for case, run in zip(cases, runs, strict=True):
            seed, B, C, hs, nh, n_kv, chunks, dtype = case
            weights, x, mask = _inputs(case)
            w64 = {k: v.double() for k, v in weights.items()}
            expected, caches = chained(w64, x.double(), chunks, nh, n_kv)
            tol = 1e-9 if dtype == torch.float64 else 1e-4
            what = (f"{name}({C}, {hs}, {nh}{f', {n_kv}' if with_kv else ''}) on x of shape {tuple(x.shape)} "
                    f"in chunks of {chunks} new positions, each call given the cache the previous one returned")
            for step, (shape, (k_exp, _)) in enumerate(zip(run["shapes"], caches, strict=False)):
                want = list(k_exp.shape)
                if shape[0] != want or shape[1] != want:
                    extra = ""
                    if shape[0][2:3] == [chunks[step]] and step > 0:
                        extra = " It holds only the new positions: return the grown cache, the past and the new together."
                    elif with_kv and shape[0][1:2] == [nh] and nh != n_kv:
                        extra = (f" It holds the {nh} repeated heads: keep the {n_kv} key-value heads in the cache "
                                 "(that is the memory grouped-query attention saves) and repeat them only for the scores.")
                    raise CheckFailed(f"{what}: after call {step + 1} the cache's (k, v) have shapes {shape[0]} and "
                                      f"{shape[1]}; expected {want} each, the layout (B, {'n_kv' if with_kv else 'nh'}, "
                                      f"T_past + T_new, hs).{extra}")
            if "error" in run:
                error = str(run["error"])
                hint = CAT_HINT if "Sizes of tensors must match" in error or "must match the size" in error else ""
                raise CheckFailed(f"{what}: call {run['step'] + 1} (T_new = {chunks[run['step']]}) raised {error}. {hint}")
            got = torch.cat(run["outs"], dim=1)
            if not close(expected, got, tol, tol):
                flavours = ["mask-not-offset", "no-mask", "cache-ignored", "new-first", "sqrt-C"]
                if with_kv and nh != n_kv:
                    flavours.insert(0, "tiled")
                variants = {MISTAKES[f]: chained(w64, x.double(), chunks, nh, n_kv, f)[0] for f in flavours}
                label = identify(got, variants, tol, tol)
                if label is None and len(chunks) > 1:  # a mistake that shows only from the second call
                    first = expected[:, : chunks[0]]
                    if close(first, got[:, : chunks[0]], tol, tol):
                        label = ("the first call (no cache) is right but the later ones are not: the cached "
                                 "positions or the mask's offset are used wrongly")
                evidence = first_mismatch(expected, got, tol, tol)
                if label:
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
                raise CheckFailed(explain_mismatch(expected, got, what=what, atol=tol, rtol=tol,
                                                   axes=("B", "T", "C"), sizes={"B": B, "T": x.shape[1], "C": C}))
            for part, kind in ((run["k"], "k"), (run["v"], "v")):
                want = caches[-1][0 if kind == "k" else 1]
                if not close(want, part, tol, tol):
                    other = caches[-1][1 if kind == "k" else 0]
                    swapped = " The cache holds (v, k): return (k, v)." if close(other, part, tol, tol) else ""
                    raise CheckFailed(f"{what}: the cache's {kind} is not the {'keys' if kind == 'k' else 'values'} "
                                      f"of the positions so far.{swapped} Evidence: {first_mismatch(want, part, tol, tol)}.")
            if "masked" in run:
                T = mask.shape[-1]
                want = chained(w64, x[:, :T].double(), [T], nh, n_kv, masks=[mask])[0]
                got = run["masked"]
                if not isinstance(got, torch.Tensor):
                    raise CheckFailed(f"{name}: a call with mask= of shape {tuple(mask.shape)} raised {got}")
                if not close(want, got, tol, tol):
                    causal = chained(w64, x[:, :T].double(), [T], nh, n_kv)[0]
                    why = ("it ignored the mask: when mask is given, use it instead of the causal mask"
                           if close(causal, got, tol, tol) else "use mask as given: True = may attend")
                    raise CheckFailed(f"{name} with mask= of shape {tuple(mask.shape)}: {why}. "
                                      f"Evidence: {first_mismatch(want, got, tol, tol)}.")
        return (f"{name}: " + "; ".join(f"B={c[1]}, C={c[2]}, hs={c[3]}, nh={c[4]}" + (f", n_kv={c[5]}" if with_kv else "")
                                       + f", chunks {c[6]} ({str(c[7]).replace('torch.', '')})" for c in cases)
                + ": the outputs equal one pass over the whole sequence, the cache holds every position's keys "
                "and values" + ("" if with_kv else ", and a given mask is used") + ".")

    return judge


# (seed, B, C, hs, nh, n_kv, chunks, dtype)
CACHED_CASES = [(0, 2, 14, 5, 3, 3, [4, 3, 1], torch.float64)]
CACHED_HIDDEN_CASES = [(1, 3, 10, 4, 2, 2, [1, 1, 5, 2], torch.float64), (2, 1, 18, 7, 2, 2, [6, 1, 1], torch.float32)]
GQA_CASES = [(3, 3, 13, 4, 6, 2, [5, 2, 1], torch.float64), (4, 3, 11, 2, 5, 5, [7], torch.float64)]
GQA_HIDDEN_CASES = [(5, 3, 11, 5, 4, 1, [3, 1, 1, 1], torch.float64), (6, 1, 16, 5, 6, 3, [7, 2], torch.float32)]

check_cached_attention = Check("check_cached_attention", _probe(CACHED_CASES, False),
                               _judge(CACHED_CASES, False, "CachedSelfAttention"))
check_cached_attention_hidden = Check("check_cached_attention_hidden", _probe(CACHED_HIDDEN_CASES, False),
                                      _judge(CACHED_HIDDEN_CASES, False, "CachedSelfAttention"), hidden=True)
check_grouped_query = Check("check_grouped_query", _probe(GQA_CASES, True),
                            _judge(GQA_CASES, True, "GroupedQueryAttention"))
check_grouped_query_hidden = Check("check_grouped_query_hidden", _probe(GQA_HIDDEN_CASES, True),
                                   _judge(GQA_HIDDEN_CASES, True, "GroupedQueryAttention"), hidden=True)

__all__ = [
    "CONFIG",
    "KnownGoodCachedAttention",
    "causal_with_past",
    "chained",
    "check_cached_attention",
    "check_cached_attention_hidden",
    "check_grouped_query",
    "check_grouped_query_hidden",
    "known_good_forward_cached",
    "small_model",
]
