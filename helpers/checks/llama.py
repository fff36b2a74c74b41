"""Checks for lesson 11 (a modern block), exercises 3 and 4: the block made modern by configuration
(``modern_options``) and Llama's checkpoint loaded into the course's model (``load_llama_state_dict``).

Shape legend: B batch, T time, C embedding size, V vocabulary, nh query heads, n_kv key/value heads,
hs head size, H the feed-forward's hidden size, L layers. The probes build lesson 05's block and
lesson 06's model (earlier lessons: importable while grading) and this lesson's parts from
``llama_format``'s known-good versions, so that a mistake in exercise 1 or 2 costs nothing here.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from contextlib import contextmanager

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
from helpers.checks.llama_format import (
    KnownGoodRMSNorm,
    KnownGoodRotaryAttention,
    KnownGoodSwiGLU,
    known_good_modern_lm,
    llama_config,
    llama_format_checkpoint,
    llama_sublayer_outputs,
)
from helpers.checks.verdict import tolerance
from helpers.reference import modern_block as ref
from helpers.reference import transformer_layer, transformer_lm

__all__ = ["check_load_llama", "check_modern_options", "llama_config", "llama_format_checkpoint", "llama_sublayer_outputs"]

PARTS = {"RMSNorm": KnownGoodRMSNorm, "SwiGLU": KnownGoodSwiGLU, "RotaryGroupedAttention": KnownGoodRotaryAttention}


@contextmanager
def _known_good_parts(fn):
    """The known-good RMSNorm, SwiGLU and RotaryGroupedAttention under their names in the namespace
    ``fn`` reads, while it runs; the student's own are put back after."""
    scope = getattr(inspect.unwrap(fn), "__globals__", None)
    scope = scope if isinstance(scope, dict) and not scope.get("__name__", "").startswith("torch") else {}
    saved = {name: scope[name] for name in PARTS if name in scope}
    scope.update(PARTS)
    try:
        yield
    finally:
        for name in PARTS:
            scope.pop(name, None)
        scope.update(saved)


# ---------------------------------------------------------------------------------------------
# modern_options(block, config): a lesson-05 TransformerBlock made Llama-shaped, in place

# (seed, B, T, C, nh, n_kv, H, norm_eps, rope_base, modern, dtype); modern False: the defaults
OPTION_CASES = [(130, 3, 5, 24, 4, 2, 20, 0.05, 50.0, True, torch.float64),
                (131, 3, 4, 10, 2, 0, 14, 1e-5, 10000.0, False, torch.float64)]
OPTION_HIDDEN_CASES = [(132, 2, 7, 48, 6, 3, 26, 0.02, 30.0, True, torch.float64),
                       (133, 3, 4, 20, 2, 2, 22, 1e-5, 500.0, True, torch.float32)]


def _option_config(case):
    seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
    if not modern:
        return transformer_lm.Config(emb_dim=C, n_hidden=H, head_dim=C // nh, n_heads=nh)
    return llama_config(29, C, 1, nh, n_kv, H, norm_eps=eps, rope_base=base)


def _option_text(case) -> str:
    seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
    if not modern:
        return f"modern_options(block, config) with the defaults (norm='layer', mlp='mlp', positions='learned', n_kv_heads=0; C={C}, nh={nh})"
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


def _probe_options(cases):
    def probe(modern_options) -> dict:
        expect_callable(modern_options, "modern_options")
        found = []
        for case in cases:
            seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
            block = _block(case)
            with case_sizes({"B": B, "T": T, "C": C, "nh": nh, "H": H}):
                try:
                    with _known_good_parts(modern_options):
                        modern_options(block, _option_config(case))
                except Exception as exc:  # noqa: BLE001 - the error is evidence
                    found.append(caught(exc))
                    continue
            shapes = _shapes(block)
            run = {"shapes": {n: list(s) for n, s in shapes.items()}}
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


def _reference_block(case, **changes):
    config = dataclasses.replace(_option_config(case), **changes)
    block = _block(case)
    ref.modern_options(block, config)
    return block


def _layout_told(got: dict, want: dict, case) -> str:
    """Which part of the block has the wrong parameters, from their names and shapes."""
    seed, B, T, C, nh, n_kv, H, eps, base, modern, dtype = case
    hs = C // nh
    extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
    if not modern:
        return ("with the defaults nothing may change: the block keeps lesson 05's LayerNorms, attention and MLP "
                f"(the config asks for norm='layer', mlp='mlp', positions='learned', n_kv_heads=0); it now has {sorted(got)}")
    found = []
    for norm in ("norm_before_attn", "norm_before_mlp"):
        if f"{norm}.bias" in got:
            found.append(f"{norm} is still a LayerNorm (it has a bias): norm='rms' makes both norms RMSNorm(C, eps=config.norm_eps)")
    if "mlp.model.0.weight" in got:
        found.append("the feed-forward is still lesson 02's MLP (mlp.model.0): mlp='swiglu' makes it SwiGLU(C, config.n_hidden)")
    elif "mlp.gate.weight" in got and got["mlp.gate.weight"] != want["mlp.gate.weight"]:
        found.append(f"SwiGLU's hidden size is {got['mlp.gate.weight'][0]}, not config.n_hidden = {H}")
    key = got.get("attention.key.weight")
    if key and key != want["attention.key.weight"]:
        heads = key[0] // hs if key[0] % hs == 0 else None
        found.append(f"attention.key.weight has shape {tuple(key)}: {heads} key/value heads" + (
            f" where config.n_kv_heads = {n_kv}: pass it to RotaryGroupedAttention" if heads == nh else "") if heads else
            f"attention.key.weight has shape {tuple(key)}, expected {want['attention.key.weight']}")
    if any(n.startswith("attention.") and n.endswith(".bias") for n in got):
        found.append("the attention's maps have biases: Llama's have none")
    if found:
        return "; ".join(found)
    return f"its parameters differ from the reference's: extra {extra or 'none'}, missing {missing or 'none'}"


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
                raise CheckFailed(f"{what}: {_layout_told(got, want, case)}.")
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
            variants = {
                f"the RMSNorms use their own default eps (1e-06), not config.norm_eps = {eps:g}": dict(norm_eps=1e-6),
                f"RoPE turns by RotaryGroupedAttention's default base 10000, not config.rope_base = {base:g}": dict(rope_base=10000.0),
                "the queries and keys are not rotated: positions='rope' asks for RoPE (pass config.rope_base, not None)":
                    dict(positions="learned"),
            }
            label = identify(out, {k: output(_reference_block(case, **v)) for k, v in variants.items()
                                   if dataclasses.replace(_option_config(case), **v) != _option_config(case)}, tol, tol)
            if label:
                raise CheckFailed(f"{what}: {label}. Evidence: {first_mismatch(expected, out, tol, tol)}.")
            raise CheckFailed(explain_mismatch(expected, out, what=f"{what}: its parameters have the right names and shapes, "
                                               "but the block's output", atol=tol, rtol=tol, dtype=dtype))
        return ("modern_options: RMSNorms with config.norm_eps, rotary grouped-query attention with config.n_kv_heads and "
                "config.rope_base, SwiGLU of config.n_hidden; the block's outputs match the reference; the defaults change nothing.")

    return judge


check_modern_options, check_modern_options_hidden = visible_and_hidden(
    "check_modern_options", _probe_options, _judge_options, OPTION_CASES, OPTION_HIDDEN_CASES)

# ---------------------------------------------------------------------------------------------
# load_llama_state_dict(model, state_dict): LlamaForCausalLM's names onto the course's modules

# (seed, V, C, L, nh, n_kv, H, tie, B, T, dtype)
LOAD_CASES = [(140, 23, 24, 2, 4, 2, 20, False, 3, 7, torch.float64)]
LOAD_HIDDEN_CASES = [(141, 31, 40, 3, 4, 1, 26, False, 2, 5, torch.float64),
                     (142, 19, 24, 1, 6, 2, 22, True, 3, 5, torch.float32)]


def _load_config(case):
    seed, V, C, L, nh, n_kv, H, tie, B, T, dtype = case
    return llama_config(V, C, L, nh, n_kv, H, tie=tie, norm_eps=1e-5, rope_base=300.0)


def _load_text(case) -> str:
    seed, V, C, L, nh, n_kv, H, tie, B, T, dtype = case
    return (f"load_llama_state_dict on a Llama-format checkpoint with V={V}, C={C}, {L} layer{'s' * (L > 1)} of {nh} query "
            f"and {n_kv} key/value heads, n_hidden={H}, {'a tied head (no lm_head.weight)' if tie else 'an untied head'} "
            f"({str(dtype)[6:]}), on ids of shape ({B}, {T})")


def _fresh(case):
    torch.manual_seed(case[0])  # known initial weights: one that was not loaded keeps them
    return known_good_modern_lm(_load_config(case)).to(case[-1]).eval()


def _ids(case):
    seed, V, C, L, nh, n_kv, H, tie, B, T, dtype = case
    return torch.randint(V, (B, T), generator=torch.Generator().manual_seed(seed + 9))  # (B, T)


def _probe_load(cases):
    def probe(load_llama_state_dict) -> dict:
        expect_callable(load_llama_state_dict, "load_llama_state_dict")
        found = []
        for case in cases:
            model = _fresh(case)
            try:
                load_llama_state_dict(model, llama_format_checkpoint(_load_config(case), case[0], case[-1]))
                params = {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}
                found.append({"params": params, "tied": model.lm_head.weight is model.word_to_embedding.weight,
                              "outputs": llama_sublayer_outputs(model, _ids(case))})
            except Exception as exc:  # noqa: BLE001 - the error is evidence
                found.append(caught(exc))
        return {"runs": found}

    return probe


def _source(name: str, got: torch.Tensor, checkpoint: dict, initial: torch.Tensor) -> str:
    """Where a wrongly loaded parameter's values came from, when they equal something known."""
    if got is None or not isinstance(got, torch.Tensor):
        return f"{name} is missing"
    if got.shape == initial.shape and close(initial, got, 0, 0):
        return f"{name} was not loaded (it still holds its initial values)"
    for key, value in checkpoint.items():
        if value.shape == got.shape and close(value.double(), got.double(), 1e-12, 0):
            return f"{name} holds the checkpoint's {key}"
        if value.dim() == 2 and value.T.shape == got.shape and close(value.T.double(), got.double(), 1e-12, 0):
            return (f"{name} holds the checkpoint's {key} transposed: Llama's checkpoint stores nn.Linear weights, "
                    "(out, in) already; copy them as they are (only GPT-2's Conv1D needed a transpose)")
    return f"{name} differs from the reference's"


def _load_hint(error: str, case) -> str:
    if "lm_head.weight" in error and case[7]:
        return ("This checkpoint's head is tied (config.tie_weights): it has no lm_head.weight; the token table "
                "serves as the head, and the model's lm_head.weight already is word_to_embedding.weight.")
    if re.search(r"size of tensor a \((\d+)\) must match", error):
        return ("A weight does not fit its module. Llama's checkpoint stores nn.Linear weights as (out, in), "
                "the layout of the course's modules: copy them without transposing.")
    key = re.fullmatch(r"KeyError: '(.*)'", error)
    if key:
        return (f"The checkpoint has no entry {key[1]!r}. Its names: model.embed_tokens.weight, "
                "model.layers.i.input_layernorm.weight, model.layers.i.self_attn.q_proj.weight, ..., model.norm.weight, "
                "lm_head.weight (untied heads only).")
    return ""


def _judge_load(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            what = _load_text(case)
            raise_caught(what, run, hint=_load_hint(str(run.get("error")), case))
            checkpoint = llama_format_checkpoint(_load_config(case), case[0], case[-1])
            initial = dict(_fresh(case).named_parameters(remove_duplicate=False))
            model = ref.load_llama_state_dict(_fresh(case), checkpoint)
            expected = {n: p.detach() for n, p in model.named_parameters(remove_duplicate=False)}
            wanted, got = llama_sublayer_outputs(model, _ids(case)), run.get("outputs") or {}
            params, tol = run.get("params") or {}, tolerance(case[-1])
            for place, want in wanted.items():
                have = got.get(place)
                if isinstance(have, torch.Tensor) and have.shape == want.shape and close(want, have, tol, tol):
                    continue
                head = f"{what}: the first sub-layer that differs is {place}"
                if not isinstance(have, torch.Tensor) or have.shape != want.shape:
                    raise CheckFailed(f"{head}: it returned {describe(have)}, expected shape {tuple(want.shape)}.")
                prefix = _PLACES[place.split(" ", 2)[-1] if place.startswith("layer") else place]
                prefix = prefix.format(i=place.split()[1]) if place.startswith("layer") else prefix
                wrong = [n for n in expected if n.startswith(prefix) and not (
                    isinstance(params.get(n), torch.Tensor) and params[n].shape == expected[n].shape
                    and close(expected[n], params[n], 0, 0))]
                if wrong:
                    told = "; ".join(_source(n, params.get(n), checkpoint, initial[n].detach()) for n in wrong[:2])
                    raise CheckFailed(f"{head}: {told}. Evidence: {first_mismatch(want, have, tol, tol)}.")
                raise CheckFailed(explain_mismatch(want, have, what=f"{head}: its weights match, but the output", atol=tol, rtol=tol))
            if case[7] and run.get("tied") is not True:
                raise CheckFailed(f"{what}: lm_head.weight is no longer word_to_embedding.weight; copy into the existing "
                                  "tensors (weight.copy_(...)) so that a tied head stays tied.")
        return ("load_llama_state_dict: every sub-layer's output (the embeddings, both RMSNorms, attention and SwiGLU of "
                "every layer, the final norm and the logits) matches the reference, untied and tied heads.")

    return judge


_PLACES = {"embeddings": "word_to_embedding.", "input_layernorm": "layers.{i}.norm_before_attn.",
           "attention": "layers.{i}.attention.", "post_attention_layernorm": "layers.{i}.norm_before_mlp.",
           "mlp": "layers.{i}.mlp.", "final norm": "final_norm.", "logits": "lm_head."}

check_load_llama, check_load_llama_hidden = visible_and_hidden(
    "check_load_llama", _probe_load, _judge_load, LOAD_CASES, LOAD_HIDDEN_CASES)
