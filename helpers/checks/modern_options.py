"""Checks for lesson 11 (a modern block), exercise 3: a lesson-05 block made modern by its
configuration (``modern_options``).

Shape legend: B batch, T time, C embedding size, nh query heads, n_kv key/value heads, hs head
size, H the feed-forward's hidden size. The probe builds lesson 05's block (an earlier lesson:
importable while grading) and runs the student's function with ``llama_format``'s known-good
RMSNorm, SwiGLU and RotaryGroupedAttention under those names, so that a mistake in exercise 1 or 2
costs nothing here. A cause is named only when the reference's block with that change gives the
student's output (or the parameters' names and shapes show it).
"""

from __future__ import annotations

import dataclasses

import torch

from helpers.checks.core import (
    CheckFailed,
    close,
    describe,
    expect_callable,
    first_mismatch,
    identify,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import caught, raise_caught
from helpers.checks.llama_format import KnownGoodRotaryAttention, known_good_parts, llama_config
from helpers.checks.verdict import shared_modules, tolerance
from helpers.reference import modern_block as ref
from helpers.reference import transformer_layer, transformer_lm

__all__ = ["check_modern_options"]


# ---------------------------------------------------------------------------------------------
# modern_options(block, config): a lesson-05 TransformerBlock made Llama-shaped, in place

# (seed, B, T, C, nh, n_kv, H, norm_eps, rope_base, modern, dtype); modern False: the defaults
OPTION_CASES = [(130, 3, 5, 24, 4, 2, 20, 0.05, 50.0, True, torch.float64),
                (131, 3, 4, 10, 2, 0, 14, 1e-5, 10000.0, False, torch.float64)]
# modern "gqa": grouped-query attention alone (n_kv_heads < n_heads, learned positions, LayerNorm, the MLP)
OPTION_HIDDEN_CASES = [(132, 2, 7, 48, 6, 3, 26, 0.02, 30.0, True, torch.float64),
                       (133, 3, 4, 20, 2, 2, 22, 1e-5, 500.0, True, torch.float32),
                       (134, 2, 5, 24, 4, 2, 20, 1e-5, 10000.0, "gqa", torch.float64)]


def _option_config(case):
    seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
    if not modern:
        return transformer_lm.Config(emb_dim=C, n_hidden=H, head_dim=C // nh, n_heads=nh)
    if modern == "gqa":
        return transformer_lm.Config(emb_dim=C, n_hidden=H, head_dim=C // nh, n_heads=nh, n_kv_heads=n_kv)
    config = llama_config(29, C, 1, nh, n_kv, H, norm_eps=eps, rope_base=base)
    # the options as a program that read them from a file holds them: equal strings, other objects than the literals
    return dataclasses.replace(config, **{k: "".join(list(getattr(config, k))) for k in ("norm", "mlp", "positions")})


def _option_text(case) -> str:
    seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
    if not modern:
        return f"modern_options(block, config) with the defaults (norm='layer', mlp='mlp', positions='learned', n_kv_heads=0; C={C}, nh={nh})"
    if modern == "gqa":
        return (f"modern_options(block, config) with grouped-query attention alone (n_kv_heads={n_kv} for nh={nh}; "
                f"positions='learned', norm='layer', mlp='mlp'; C={C}), on x of shape ({B}, {T}, {C}) ({str(dtype)[6:]})")
    return (f"modern_options(block, config) with norm='rms', mlp='swiglu', positions='rope', C={C}, nh={nh}, "
            f"n_kv_heads={n_kv}, n_hidden={H}, norm_eps={eps:g}, rope_base={base:g}, on x of shape ({B}, {T}, {C}) ({str(dtype)[6:]})")


def _block(case):
    seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
    torch.manual_seed(seed)
    return transformer_layer.TransformerBlock(C, C // nh, nh, H)


def _block_weights(shapes: dict, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 300)
    return {n: (1 + 0.3 * torch.randn(s, generator=g, dtype=torch.float64)) if len(s) == 1
            else torch.randn(s, generator=g, dtype=torch.float64) / s[1] ** 0.5 for n, s in sorted(shapes.items())}


def _shapes(block) -> dict[str, tuple]:
    return {n: tuple(p.shape) for n, p in block.named_parameters()}


def _facts(block) -> dict:
    """What the built parts say of themselves: each norm's eps, whether the attention is the
    course's RotaryGroupedAttention (swapped in while the student's function ran), its base and
    its key/value heads."""
    norms = {n: getattr(getattr(block, n, None), "eps", None) for n in ("norm_before_attn", "norm_before_mlp")}
    attention = getattr(block, "attention", None)
    base = getattr(attention, "rope_base", "absent")
    return {"eps": {n: float(v) for n, v in norms.items() if isinstance(v, (int, float))},
            "rotary": isinstance(attention, KnownGoodRotaryAttention),
            "rope_base": base if base is None or isinstance(base, (int, float)) else "absent",
            "n_kv": getattr(attention, "n_kv_heads", None), "n_heads": getattr(attention, "n_heads", None)}


#: the block's parts a config may replace; the others it asks for stay the very modules they were
PARTS = ("norm_before_attn", "attention", "norm_before_mlp", "mlp")


def _marked(block, seed: int) -> dict[str, list[torch.Tensor]]:
    """Gives the block's parts weights of their own, as training or loading would (not the values a new
    module starts with), and returns them by part."""
    g = torch.Generator().manual_seed(seed + 900)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return {n: [p.detach().clone() for p in getattr(block, n).parameters()] for n in PARTS}


def _kept(block, marks: dict) -> list[str]:
    """The parts whose weights are still those they had before modern_options ran."""
    kept = []
    for n in PARTS:
        now = list(getattr(getattr(block, n, None), "parameters", list)())
        if len(now) == len(marks[n]) and all(a.shape == b.shape and torch.equal(a.detach(), b) for a, b in zip(now, marks[n], strict=True)):
            kept.append(n)
    return kept


def _probe_options(cases):
    def probe(modern_options) -> dict:
        expect_callable(modern_options, "modern_options")
        found = []
        for case in cases:
            seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
            block = _block(case)
            marks = _marked(block, seed)
            with case_sizes({"B": B, "T": T, "C": C, "nh": nh, "H": H}):
                try:
                    with known_good_parts(modern_options):
                        modern_options(block, _option_config(case))
                except Exception as exc:  # noqa: BLE001 - the error is evidence
                    found.append(caught(exc))
                    continue
            shapes = _shapes(block)
            run = {"shapes": {n: list(s) for n, s in shapes.items()}, **_facts(block), "shared": shared_modules(block),
                   "kept": _kept(block, marks)}
            x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64).to(dtype)
            weights = _block_weights(shapes, seed)
            try:
                block = block.to(dtype)
                with torch.no_grad():
                    for n, p in block.named_parameters():
                        p.copy_(weights[n])
                    run["out"] = block(x)
            except Exception as exc:  # noqa: BLE001 - the error is evidence
                run.update(caught(exc))
            found.append(run)
        return {"runs": found}

    return probe


def _reference_block(case, eps=None, rope_base="config", plain_attention=False):
    """The reference's block for the case; ``eps`` ({norm: eps}) and ``rope_base`` put other values
    into the built parts, ``plain_attention`` keeps lesson 04's attention."""
    block = _block(case)
    plain = block.attention
    ref.modern_options(block, _option_config(case))
    for name, value in (eps or {}).items():
        getattr(block, name).eps = value
    if rope_base != "config":
        block.attention.rope_base = rope_base
    if plain_attention:
        block.attention = plain
    return block


def _layout_told(got: dict, want: dict, case, run: dict) -> str:
    """Which part of the block has the wrong parameters, from their names and shapes and what the
    built attention says of itself."""
    seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
    extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
    if not modern and isinstance(run.get("n_kv"), int) and run.get("n_kv") != nh:  # 0 kept as 0, or read as another count
        asked = "." if run.get("n_kv") == 0 else f"; is 0 read as {run.get('n_kv')}?"
        return (f"with the defaults nothing may change, but the attention was replaced by one built with "
                f"{run.get('n_kv')} key/value head{'s' if run.get('n_kv') != 1 else ''} for {nh} query heads: "
                f"n_kv_heads = 0 means one key/value head per query head (config.n_kv_heads or config.n_heads, here "
                f"{nh}){asked} With that and positions='learned', lesson 05's attention stays")
    if not modern:
        shapes = [f"{name} {tuple(got[name])} (expected {tuple(want[name])})" for name in sorted(set(got) & set(want))
                  if got[name] != want[name]]
        if shapes and not extra and not missing:
            return ("with the defaults nothing may change: the block keeps lesson 05's LayerNorms, attention and MLP "
                    "(the config asks for norm='layer', mlp='mlp', positions='learned', n_kv_heads=0); the names are "
                    f"right but these shapes are not: {', '.join(shapes[:4])}")
        return ("with the defaults nothing may change: the block keeps lesson 05's LayerNorms, attention and MLP "
                f"(the config asks for norm='layer', mlp='mlp', positions='learned', n_kv_heads=0); it now has {sorted(got)}")
    found = []
    for norm in ("norm_before_attn", "norm_before_mlp"):
        if modern is True and f"{norm}.bias" in got:
            found.append(f"{norm} is still a LayerNorm (it has a bias): norm='rms' makes both norms RMSNorm(C, eps=config.norm_eps)")
    if modern is True and "mlp.model.0.weight" in got:
        found.append("the feed-forward is still lesson 02's MLP (mlp.model.0): mlp='swiglu' makes it SwiGLU(C, config.n_hidden)")
    elif "mlp.gate.weight" in got and got["mlp.gate.weight"] != want["mlp.gate.weight"]:
        found.append(f"SwiGLU's hidden size is {got['mlp.gate.weight'][0]}, not config.n_hidden = {H}")
    key = got.get("attention.key.weight")
    if key and key != want["attention.key.weight"]:
        if run.get("rotary") is False and modern == "gqa":
            found.append(f"the attention was not replaced (lesson 04's attention, one key/value head per query head): "
                         f"n_kv_heads = {n_kv}, fewer than the {nh} query heads, makes it RotaryGroupedAttention even with "
                         "positions='learned' (built with rope_base None: no rotation)")
        elif run.get("rotary") is False:
            found.append("the attention was not replaced (it has no rotary base: lesson 04's attention, one key/value head "
                         "per query head): positions='rope' with n_kv_heads makes it RotaryGroupedAttention")
        elif run.get("n_kv") == nh != n_kv and run.get("n_heads") == n_kv:
            found.append(f"RotaryGroupedAttention was built with {n_kv} query heads and {nh} key/value heads, where "
                         f"config.n_heads = {nh} and config.n_kv_heads = {n_kv}: the two counts are exchanged; pass each "
                         "in its own place")
        elif run.get("n_kv") == nh:
            found.append(f"RotaryGroupedAttention was built with {nh} key/value heads, as many as query heads, where "
                         f"config.n_kv_heads = {n_kv}: pass it")
        elif run.get("n_kv") == nh // (n_kv or nh) != n_kv:
            found.append(f"RotaryGroupedAttention was built with {run.get('n_kv')} key/value heads (attention.key.weight "
                         f"{tuple(key)}), which is n_heads // n_kv_heads = {nh} // {n_kv}, the query heads per group: its "
                         f"argument is the number of key/value heads itself, config.n_kv_heads = {n_kv}")
        else:
            found.append(f"attention.key.weight has shape {tuple(key)}, expected {want['attention.key.weight']}")
    if any(n.startswith("attention.") and n.endswith(".bias") for n in got):
        found.append("the attention's maps have biases: Llama's have none")
    if found:
        return "; ".join(found)
    return (f"its parameters differ from the reference's: extra {extra or 'none'}, missing {missing or 'none'}."
            + str(run.get("shared") or "")[:600]).rstrip(".")


def _built_told(case, run: dict) -> list[tuple[str, dict]]:
    """Candidate causes read from the built parts, each with the reference's change that would
    reproduce it (named only when it does)."""
    seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
    told = []
    norms = {n: v for n, v in (run.get("eps") or {}).items() if isinstance(v, float) and abs(v - eps) > 1e-12 * eps}
    if norms:
        names = " and ".join(norms)
        values = ", ".join(sorted({f"{v:g}" for v in norms.values()}))
        default = " (RMSNorm's own default)" if set(norms.values()) == {1e-6} else ""
        told.append((f"{names} {'were' if len(norms) > 1 else 'was'} built with eps={values}{default}, not "
                     f"config.norm_eps = {eps:g}", {"eps": norms}))
    if modern == "gqa":
        if isinstance(run.get("rope_base"), float | int):
            told.append((f"RotaryGroupedAttention was built with rope_base={run['rope_base']:g}, so it rotates the queries "
                         "and keys, while positions='learned' asks for no rotation (rope_base None): the positions are "
                         "already in the embeddings", {"rope_base": float(run["rope_base"])}))
    elif run.get("rotary") is False:
        told.append(("the attention was not replaced: it is lesson 04's, without rotary positions, while "
                     "positions='rope' makes it RotaryGroupedAttention with config.rope_base", {"plain_attention": True}))
    elif run.get("rope_base") is None:
        told.append((f"RotaryGroupedAttention was built with rope_base=None: the queries and keys are not rotated, while "
                     f"positions='rope' asks for RoPE with config.rope_base = {base:g}", {"rope_base": None}))
    elif isinstance(run.get("rope_base"), float | int) and run["rope_base"] != base:
        default = " (its own default)" if run["rope_base"] == 10000.0 else ""
        told.append((f"RotaryGroupedAttention was built with rope_base={run['rope_base']:g}{default}, not config.rope_base "
                     f"= {base:g}", {"rope_base": float(run["rope_base"])}))
    return told


def _judge_options(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
            what = _option_text(case)
            raise_caught(what, run if "shapes" not in run else {})
            block = _reference_block(case)
            want = _shapes(block)
            got = {n: tuple(s) for n, s in (run.get("shapes") or {}).items()}
            if got != want:
                raise CheckFailed(f"{what}: {_layout_told(got, want, case, run)}.")
            fresh = _block(case)
            marks = _marked(fresh, seed)
            kinds = {n: type(getattr(fresh, n)).__name__ for n in PARTS}
            ref.modern_options(fresh, _option_config(case))
            replaced = [n for n in _kept(fresh, marks) if n not in run.get("kept", PARTS)]
            if replaced:
                raise CheckFailed(
                    f"{what}: block.{' and block.'.join(replaced)} no longer {'hold' if len(replaced) > 1 else 'holds'} the "
                    f"weights the block came with, although the config keeps "
                    f"{'them' if len(replaced) > 1 else 'it'} as {'they are' if len(replaced) > 1 else 'it is'}: the "
                    f"block came with weights of its own in {'them' if len(replaced) > 1 else 'it'} (trained or loaded, as "
                    f"here) and they are gone (a new {kinds[replaced[0]]} starts from fresh ones). Replace only the parts "
                    "the config asks to change.")
            raise_caught(what + ", then the block's forward", run)
            x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64).to(dtype)
            weights = _block_weights(want, seed)

            def output(b, weights=weights, x=x):
                b = b.double()
                with torch.no_grad():
                    for n, p in b.named_parameters():
                        p.copy_(weights[n])
                    return b(x.double())

            expected, out, tol = output(block), run.get("out"), tolerance(dtype)
            if isinstance(out, torch.Tensor) and out.shape == expected.shape and close(expected, out, tol, tol):
                continue
            if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
                raise CheckFailed(f"{what}: the block returned {describe(out)}, expected shape {tuple(expected.shape)}.")
            told = _built_told(case, run)
            if told:  # every cause the built parts show, together: named when together they reproduce the output
                change = {k: v for _, c in told for k, v in c.items()}
                if identify(out, {"all": output(_reference_block(case, **change))}, tol, tol):
                    causes = "; ".join(words for words, _ in told)
                    raise CheckFailed(f"{what}: {causes}. Evidence: {first_mismatch(expected, out, tol, tol)}.")
            raise CheckFailed(explain_mismatch(expected, out, what=f"{what}: its parameters have the right names and shapes, "
                                               "but the block's output", atol=tol, rtol=tol, dtype=dtype))
        return ("modern_options: RMSNorms with config.norm_eps, rotary grouped-query attention with config.n_kv_heads and "
                "config.rope_base, SwiGLU of config.n_hidden; the block's outputs match the reference; the defaults change nothing.")

    return judge


check_modern_options, check_modern_options_hidden = visible_and_hidden(
    "check_modern_options", _probe_options, _judge_options, OPTION_CASES, OPTION_HIDDEN_CASES)
