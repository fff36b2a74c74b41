"""The invariants and rules that verify what a message says (helpers/checks/invariants.py lists them):
each is run here, in this process, on the course's own answer changed in one place, and the check
must fail with the words that name that change.

Each case takes an answer of the solutions (tests/harness.py), makes one change to its text, runs the
cell as a notebook would (its lines in linecache, the lesson's reference around it) and calls the
exercise's visible or hidden check. The lesson's own answer passes the same checks in its catalogue's
tests; these say that the rule fires, on a mistake no catalogue entry is.
"""

from __future__ import annotations

import importlib
import linecache
import math

import pytest
import torch
import torch.nn.functional as F
from harness import lesson, solution_answers
from torch import nn

from autograder import lesson_checks  # noqa: F401 - registers every check
from helpers.checks.core import REGISTRY, CheckFailed


def _namespace(assignment: str, source: str) -> dict:
    """``source`` run as a notebook cell of ``assignment``: the lesson's reference around it."""
    module = lesson(assignment).meta.get("reference_module")
    namespace = {"torch": torch, "nn": nn, "F": F, "math": math}
    namespace.update({k: v for k, v in vars(importlib.import_module(f"helpers.reference.{module}")).items()
                      if not k.startswith("__")})
    filename = f"<cell {abs(hash(source)) % 10**8}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace["__name__"] = "__main__"
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the course's own answer, changed by the test
    return namespace


def _changed(assignment: str, grade_id: str, *edits: tuple[str | None, str]) -> str:
    """The answer with each (old, new) made: ``old`` found once and replaced; None puts ``new`` at the
    cell's top (a line the cell sets before its function, as a notebook left from trying it out)."""
    source = solution_answers(assignment)[grade_id]
    for old, new in edits:
        if old is None:
            source = new + source
            continue
        assert source.count(old) == 1, f"{grade_id}: {old!r} is not once in the answer"
        source = source.replace(old, new)
    return source


# (assignment, grade_id, edits, check, the answer's name, words the failure must say)
CASES = {
    "a training step that sets the model's flag alone": (
        "07-training", "train-step", [("model.train()", "model.training = True")], "check_train_step", "train_step",
        ["the flag was set on the model alone"]),
    "the frozen parameters left out of the groups": (
        "07-training", "param-groups", [("if id(p) not in chosen]", "if id(p) not in chosen and p.requires_grad]"),
                                        ("and id(m.weight) not in tables]", "and id(m.weight) not in tables and m.weight.requires_grad]")],
        "check_param_groups_hidden", "param_groups", ["handed over frozen (requires_grad=False"]),
    "the mode put back inside the loop over the splits": (
        "07-training", "estimate-loss", [("        estimates[name] = total / n_batches\n    model.train(was_training)",
                                          "        estimates[name] = total / n_batches\n        model.train(was_training)")],
        "check_estimate_loss", "estimate_loss", ["the first split's", "inside the loop over the splits"]),
    "starts drawn without repetition": (
        "07-training", "get-batch", [("torch.randint(len(ids) - block_size, (batch_size,), generator=generator)",
                                      "torch.randperm(len(ids) - block_size, generator=generator)[:batch_size]")],
        "check_get_batch", "get_batch", ["different starts fit (N - block_size)", "torch.randint"]),
    "positions sliced from a table of the notebook's": (
        "06-transformer-lm", "position-embeddings", [(None, "all_positions = torch.arange(50)  # the lesson's max_len\n"),
                                                     ("    positions = torch.arange(T, device=x.device)",
                                                      "    positions = all_positions[:T]")],
        "check_position_embeddings_hidden", "add_position_embeddings", ["reads `all_positions`"]),
    "a cache's offset kept on the module": (
        "09-fast-generation", "cached-attention", [("        T_past = k.shape[2] - T_new  # the positions already cached",
                                                    "        T_past = self.seen = getattr(self, 'seen', 0) if cache is not None else 0\n"
                                                    "        self.seen = T_past + T_new")],
        "check_cached_attention", "CachedSelfAttention", ["a second time (a second continuation of one prompt"]),
    "a key view with the query's head count": (
        "09-fast-generation", "grouped-query", [("self.key(x).view(B, T_new, n_kv, hs)", "self.key(x).view(B, T_new, nh, hs)")],
        "check_grouped_query", "GroupedQueryAttention",
        ["the tensor holds n_kv"]),
    "default norms replaced by new ones": (
        "11-modern-block", "modern-options", [("    if config.norm == \"rms\":\n        block.norm_before_attn = RMSNorm(C, eps=config.norm_eps)  # weight (C,), no bias\n"
                                               "        block.norm_before_mlp = RMSNorm(C, eps=config.norm_eps)\n",
                                               "    make = (lambda: RMSNorm(C, eps=config.norm_eps)) if config.norm == \"rms\" else (lambda: nn.LayerNorm(C))\n"
                                               "    block.norm_before_attn, block.norm_before_mlp = make(), make()\n")],
        "check_modern_options", "modern_options", ["no longer hold the weights the block came with"]),
    "a layer the module holds and never calls": (
        "11-modern-block", "swiglu", [("        return self.down(gated)  # (..., H) -> (..., C)", "        return gated")],
        "check_swiglu", "SwiGLU", ["Forward never called self.down (Linear)"]),
    "a forward that switches the language model to evaluation": (
        "12-fine-tuning", "speaker-classifier", [("        hidden = self.lm(ids)  # (B, T, C)",
                                                  "        self.lm.eval()\n        hidden = self.lm(ids)  # (B, T, C)")],
        "check_speaker_classifier", "SpeakerClassifier", ["left lm,", "in evaluation mode"]),
    "an MLP whose layers are named": (
        "02-language-models", "mlp", [(None, "from collections import OrderedDict\n"),
                                      ("        self.model = nn.Sequential(\n", "        self.model = nn.Sequential(OrderedDict(zip(('up', 'act', 'down'), (\n"),
                                      ("            nn.Linear(n_hidden, emb_dim),  # (..., n_hidden) -> (..., C)\n        )",
                                       "            nn.Linear(n_hidden, emb_dim),  # (..., n_hidden) -> (..., C)\n        ))))")],
        "check_mlp", "MLP", ["their parameters have other names"]),
    "a module whose forward switches itself to evaluation": (
        "02-language-models", "mlp", [("        return self.model(x)  # (..., C)", "        self.eval()\n        return self.model(x)")],
        "check_mlp", "MLP", ["a call made in training mode", "left the module itself, model, model.0", "in evaluation mode"]),
    "a decay span replaced by 1 only when it is 0": (
        "07-training", "learning-rate", [("max(1, config.steps - 1 - config.warmup_steps)",
                                          "(config.steps - 1 - config.warmup_steps) or 1")],
        "check_learning_rate_hidden", "learning_rate", ["replaced by 1 only when it is 0"]),
    "a count of pairs cut at a fixed length": (
        "10-gpt2", "count-pairs", [("(ids, ids[1:])", "(ids[:300], ids[1:300])")], "check_count_pairs_hidden",
        "count_pairs", ["exactly those of the first 300"]),
    "a merge that writes a number of its own": (
        "10-gpt2", "merge-pair", [("out.append(new_id)", "out.append(256)")], "check_merge", "merge", ["with new_id = 256"]),
    "a loader that converts the caller's model": (
        "10-gpt2", "load-gpt2", [("    C = model.config.emb_dim", "    model.float()\n    C = model.config.emb_dim")],
        "check_load_gpt2_hidden", "load_gpt2_state_dict", ["the model came in float64", "came back float32"]),
    "a layer recognised by its exact type": (
        "07-training", "param-groups", [("isinstance(m, nn.Linear)", "type(m) is nn.Linear")],
        "check_param_groups_hidden", "param_groups", ["a subclass of nn.Linear (out, a Projection)", "type(m) is nn.Linear"]),
    "the layers searched among the direct children": (
        "07-training", "param-groups", [("model.modules() if isinstance(m, nn.Linear)", "model.children() if isinstance(m, nn.Linear)")],
        "check_param_groups", "param_groups", ["model.children()"]),
    "a target matched as the end of a name": (
        "12-fine-tuning", "add-lora", [('name.rpartition(".")[2] in targets', "name.endswith(targets)")],
        "check_add_lora_hidden", "add_lora", ["ends in 'output', but its last part is 'to_output'"]),
    "modules walked one level deep": (
        "12-fine-tuning", "add-lora", [("model.named_modules()", "model.named_children()")],
        "check_add_lora", "add_lora", ["only the direct child was wrapped", "named_children()"]),
    "an option compared by identity": (
        "11-modern-block", "modern-options", [('    if config.norm == "rms":', '    if config.norm is "rms":')],
        "check_modern_options", "modern_options", ['`config.norm is "rms"`', "Was `==` meant?"]),
    "the group size passed as the key/value head count": (
        "11-modern-block", "modern-options", [("config.n_heads, n_kv, base)", "config.n_heads, config.n_heads // n_kv, base)")],
        "check_modern_options_hidden", "modern_options", ["which is n_heads // n_kv_heads"]),
    "an estimate that reseeds the global generator": (
        "07-training", "estimate-loss", [("generator = torch.Generator().manual_seed(seed)", "torch.manual_seed(seed)"),
                                         ("get_batch(ids, batch_size, block_size, generator=generator)",
                                          "get_batch(ids, batch_size, block_size)")],
        "check_estimate_loss", "estimate_loss", ["reseeds PyTorch's global generator"]),
    "an estimate in bits": (
        "07-training", "estimate-loss", [("estimates[name] = total / n_batches", "estimates[name] = total / n_batches / math.log(2)")],
        "check_estimate_loss", "estimate_loss", ["divided by ln 2"]),
    "a training step that reseeds": (
        "07-training", "train-step", [("    model.train()", "    torch.manual_seed(0)\n    model.train()")],
        "check_train_step", "train_step", ["reseeds PyTorch's global generator"]),
    "a greedy branch that samples at a tiny temperature": (
        "08-generation", "sample-next", [("        return logits.argmax(dim=-1)  # () or (N,)", "        temperature = 1e-6")],
        "check_sample_next", "sample_next", ["it drew from the generator"]),
    "a greedy branch that returns the values": (
        "08-generation", "sample-next", [("return logits.argmax(dim=-1)", "return logits.max(dim=-1)[0]")],
        "check_sample_next", "sample_next", ["the largest logit itself, not its id"]),
    "generation restarted from the generator's seed": (
        "09-fast-generation", "generate-cached", [("    was_training = model.training\n",
                                                   "    if generator is not None:\n"
                                                   "        generator = torch.Generator().manual_seed(generator.initial_seed())\n"
                                                   "    was_training = model.training\n")],
        "check_generate_cached", "generate_cached", ["those of a new generator seeded the same"]),
    "dropout on the embeddings": (
        "06-transformer-lm", "transformer-lm", [("        for layer in self.layers:",
                                                 "        x = F.dropout(x, 0.5, self.training)\n        for layer in self.layers:")],
        "check_transformer_lm", "TransformerLM", ["with no layers gives other logits in training mode"]),
    "a bool negated with ~": (
        "01-tokens-and-embeddings", "parameter-count", [("0 if tie_weights else n_vocab * emb_dim", "n_vocab * emb_dim if ~tie_weights else 0")],
        "check_parameter_count", "embedding_and_head_parameters", ["Was `not tie_weights` meant?"]),
    "estimates written into the caller's splits": (
        "07-training", "estimate-loss", [("estimates = {}", "estimates = splits")], "check_estimate_loss", "estimate_loss",
        ["changed the caller's splits dict", "the dict returned is the one given"]),
    "decode that pops the caller's ids": (
        "10-gpt2", "decode", [('data = b"".join(vocab[i] for i in ids)', 'data = b""\n    while ids:\n        data += vocab[ids.pop(0)]')],
        "check_bpe_decode", "decode", ["changed the list of ids it was given", "afterwards 0"]),
    "encode that hands out the list it keeps": (
        "10-gpt2", "encode", [(None, "_kept = {}\n\n"), ('    ids = list(text.encode("utf-8"))',
                                                           '    if text in _kept:\n        return _kept[text]\n    ids = list(text.encode("utf-8"))'),
                              ("    return ids", "    _kept[text] = ids\n    return ids")],
        "check_bpe_encode", "encode", ["returned a list it keeps", "changes _kept"]),
    "rows written into one repeated list": (
        "07-training", "get-batch", [("    x = ids[positions]  # (B, T)",
                                      "    rows = [[0] * block_size] * batch_size\n    for b in range(batch_size):\n"
                                      "        for t in range(block_size):\n            rows[b][t] = int(ids[positions[b, t]])\n"
                                      "    x = torch.tensor(rows)")],
        "check_get_batch", "get_batch", ["`*` repeats one inner list, so every row is the same list object"]),
    "a text of max_len tokens taken as not fitting": (
        "09-fast-generation", "generate-cached", [("T_past < max_len", "ids.shape[1] < max_len")],
        "check_generate_cached", "generate_cached", ["1 of the 12 steps ran more than the newest token",
                                                      "exactly max_len = 9 tokens long"]),
    "real-token flags lined up with the queries": (
        "09-fast-generation", "batch-mask", [("real.unsqueeze(1) | itself", "real[:, T_past:].unsqueeze(2) | itself")],
        "check_batch_mask", "batch_mask_and_positions", ["real-token flags are lined up with the queries"]),
    "each query's own key hidden": (
        "09-fast-generation", "cached-attention", [(".tril(diagonal=T_past)", ".tril(diagonal=T_past - 1)")],
        "check_cached_attention", "CachedSelfAttention", ["each query's own key is hidden"]),
    "a mask built wrong for the first call too, raising only with a cache": (
        "09-fast-generation", "cached-attention", [("mask = torch.ones(T_new, T_total, dtype=torch.bool, device=x.device).tril(diagonal=T_past)",
                                                    "mask = torch.arange(T_total)[:, None] <= torch.arange(T_new)[None, :]")],
        "check_cached_attention", "CachedSelfAttention", ["the first call (no cache) ran but its output was already wrong"]),
    "a loader that transposes the caller's checkpoint in place": (
        "10-gpt2", "load-gpt2", [('qkv_weight = state_dict[h + "attn.c_attn.weight"].T  # (C, 3C) -> (3C, C)',
                                  'qkv_weight = state_dict[h + "attn.c_attn.weight"].t_()  # (C, 3C) -> (3C, C)')],
        "check_load_gpt2", "load_gpt2_state_dict", ["the caller's checkpoint came back changed", "changed in place"]),
    "a loader that pops the caller's entries": (
        "11-modern-block", "load-llama", [('block.get_submodule(ours).weight.copy_(state_dict[f"model.layers.{i}.{theirs}.weight"])',
                                           'block.get_submodule(ours).weight.copy_(state_dict.pop(f"model.layers.{i}.{theirs}.weight"))')],
        "check_load_llama", "load_llama_state_dict", ["the caller's checkpoint came back changed", "removed from it"]),
    "a table recognised by its values": (
        "07-training", "param-groups", [("and id(m.weight) not in tables]",
                                         "and not any(torch.equal(m.weight, e.weight) for e in model.modules() "
                                         "if isinstance(e, nn.Embedding) and e.weight.shape == m.weight.shape)]")],
        "check_param_groups_hidden", "param_groups", ["is a table recognised by its values"]),
    "greedy that keeps the last of tied largest logits": (
        "08-generation", "sample-next", [("return logits.argmax(dim=-1)", "return logits.argsort(dim=-1)[..., -1]")],
        "check_sample_next_hidden", "sample_next", ["a tie, 1.25 each", "argmax takes the first, 0"]),
    "logits regrouped in memory order as if the class axis moved to the front": (
        "02-language-models", "cross-entropy", [("rows = logits.reshape(-1, V)  # (N, V), N = B*T", "rows = logits.reshape(V, -1).T")],
        "check_cross_entropy", "cross_entropy", ["reshape(V, -1).T", "re-reads the numbers in memory order"]),
    "logits reshaped to (B, V, T) for the classes in dimension 1": (
        "07-training", "train-step", [("loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))",
                                       "loss = F.cross_entropy(logits.reshape(B, V, T), y)")],
        "check_train_step", "train_step", ["a reshape to (B, V, T)"]),
    "rotated halves interleaved on the way back": (
        "09-fast-generation", "rotary", [("return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)",
                                          "return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)")],
        "check_rope", "apply_rope", ["the pairs are the lesson's", "written back to other places"]),
    "heads split with one view": (
        "09-fast-generation", "cached-attention", [("q = self.query(x).view(B, T_new, nh, hs).transpose(1, 2)",
                                                    "q = self.query(x).view(B, nh, T_new, hs)"),
                                                   ("k = self.key(x).view(B, T_new, nh, hs).transpose(1, 2)",
                                                    "k = self.key(x).view(B, nh, T_new, hs)"),
                                                   ("v = self.value(x).view(B, T_new, nh, hs).transpose(1, 2)",
                                                    "v = self.value(x).view(B, nh, T_new, hs)")],
        "check_cached_attention", "CachedSelfAttention", ["the heads were split with one view to (B, nh, T_new, hs)"]),
    "an estimate over logits permuted, then flattened": (
        "07-training", "estimate-loss", [("loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))",
                                          "loss = F.cross_entropy(logits.permute(0, 2, 1).reshape(-1, V), y.reshape(-1))")],
        "check_estimate_loss", "estimate_loss", ["after the classes were moved to dimension 1 (permute(0, 2, 1))"]),
    "every target scored under the first position": (
        "07-training", "train-step", [("loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))",
                                       "loss = -torch.log_softmax(logits, dim=-1).gather(-1, y.unsqueeze(1)).mean()")],
        "check_train_step", "train_step", ["every target was scored under the first position's distribution"]),
}


def _run(name: str):
    assignment, grade_id, edits, check, obj, words = CASES[name]
    namespace = _namespace(assignment, _changed(assignment, grade_id, *edits))
    with pytest.raises(CheckFailed) as failure:
        REGISTRY[check](namespace[obj])
    missing = [w for w in words if w not in str(failure.value)]
    assert not missing, f"{name}: the message lacks {missing}: {failure.value}"


@pytest.mark.parametrize("name", CASES)
def test_the_rule_names_the_change(name):
    _run(name)
