"""Checks for lesson 11 (a modern block), exercise 4: Llama's checkpoint loaded into the course's
model (``load_llama_state_dict``).

Shape legend: B batch, T time, C embedding size, V vocabulary, nh query heads, n_kv key/value heads,
hs head size, H the feed-forward's hidden size, L layers. The probe builds lesson 06's model (an
earlier lesson: importable while grading) made modern with ``llama_format``'s known-good parts, so
that a mistake in exercises 1 to 3 costs nothing here; the judge loads the same checkpoint with the
reference and compares every sub-layer's output in order.
"""

from __future__ import annotations

import re

import torch

from helpers.checks.core import (
    CheckFailed,
    close,
    describe,
    expect_callable,
    first_mismatch,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import explain_mismatch
from helpers.checks.errors import caught, raise_caught
from helpers.checks.gpt2_format import (
    changed_message,
    shared_message,
    shared_with_checkpoint,
)
from helpers.checks.invariants import dict_changed, tensors_kept
from helpers.checks.llama_format import (
    known_good_modern_lm,
    llama_config,
    llama_format_checkpoint,
    llama_sublayer_outputs,
)
from helpers.checks.verdict import tolerance
from helpers.reference import modern_block as ref

__all__ = ["check_load_llama", "llama_config", "llama_format_checkpoint", "llama_sublayer_outputs"]

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
                checkpoint = llama_format_checkpoint(_load_config(case), case[0], case[-1])
                before = tensors_kept(checkpoint)
                load_llama_state_dict(model, checkpoint)
                params = {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}
                found.append({"params": params, "tied": model.lm_head.weight is model.word_to_embedding.weight,
                              "shared": shared_with_checkpoint(model, checkpoint),
                              "outputs": llama_sublayer_outputs(model, _ids(case)),
                              "checkpoint_changed": dict_changed(checkpoint, before)})
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
        return ("A checkpoint tensor does not fit the weight it is copied into. Is each weight paired with the "
                "checkpoint entry of its own name (a name that a lambda or a later loop reads after its own loop "
                "has ended is the last one for every copy)? Llama's checkpoint stores nn.Linear weights as "
                "(out, in), the layout of the course's modules, so they are copied without a transpose.")
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
                if place == "logits" and case[7] and run.get("tied") is False:
                    raise CheckFailed(f"{head}: lm_head.weight is no longer word_to_embedding.weight, so the head kept the "
                                      "table it was built with while the embedding got the checkpoint's (a new tensor put "
                                      "in the place of one of them breaks the tie); copy into the existing tensors "
                                      f"(weight.copy_(...)). Evidence: {first_mismatch(want, have, tol, tol)}.")
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
            if run.get("shared"):
                raise CheckFailed(shared_message(what, run["shared"]))
            if run.get("checkpoint_changed"):
                raise CheckFailed(changed_message(what, run["checkpoint_changed"]))
        return ("load_llama_state_dict: every sub-layer's output (the embeddings, both RMSNorms, attention and SwiGLU of "
                "every layer, the final norm and the logits) matches the reference, untied and tied heads.")

    return judge


_PLACES = {"embeddings": "word_to_embedding.", "input_layernorm": "layers.{i}.norm_before_attn.",
           "attention": "layers.{i}.attention.", "post_attention_layernorm": "layers.{i}.norm_before_mlp.",
           "mlp": "layers.{i}.mlp.", "final norm": "final_norm.", "logits": "lm_head."}

check_load_llama, check_load_llama_hidden = visible_and_hidden(
    "check_load_llama", _probe_load, _judge_load, LOAD_CASES, LOAD_HIDDEN_CASES)
