"""Lesson 10: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the GPT-2 options of lesson 06's Config
change nothing at their defaults."""

import pytest
import torch
from harness import Catalogue, HiddenOnlyTests

from helpers.reference.gpt2 import GPT2_SMALL, GPT2_SPLIT, bytes_to_unicode
from helpers.reference.transformer_lm import Config, TransformerLM

A = "10-gpt2"
PAIRS, MERGE, TRAIN, ENCODE, DECODE, GELU, LOAD = (
    "count-pairs", "merge-pair", "train-bpe", "encode", "decode", "gelu", "load-gpt2")
PAIR_LOOP = "    for pair in zip(ids, ids[1:]):  # (ids[0], ids[1]), (ids[1], ids[2]), ...\n        counts[pair] = counts.get(pair, 0) + 1"
ENCODE_PICK = "pair = min(pairs, key=lambda p: merges.get(p, math.inf))"
QKV_COPY = "linear.weight.copy_(qkv_weight[k * C : (k + 1) * C])"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    "pairs-two-at-a-time": (PAIRS, [("zip(ids, ids[1:])", "zip(ids[::2], ids[1::2])")], "two at a time"),
    "pairs-presence-only": (PAIRS, [("counts.get(pair, 0) + 1", "1")], "every pair counts 1"),
    "pairs-last-missing": (PAIRS, [("zip(ids, ids[1:])", "zip(ids[:-1], ids[1:-1])")], "the last pair is missing"),
    "pairs-overlap-once": (PAIRS, [(PAIR_LOOP, "    i = 0\n    while i < len(ids) - 1:\n        pair = (ids[i], ids[i + 1])\n"
                                   "        counts[pair] = counts.get(pair, 0) + 1\n        i += 2 if ids[i] == ids[i + 1] else 1")],
                           "overlapping pairs were counted once"),
    "merge-no-skip": (MERGE, [("i += 2  # both ids of the pair are used up", "i += 1")], "skip both tokens"),
    "merge-tail-lost": (MERGE, [("while i < len(ids):", "while i < len(ids) - 1:")], "the last token is lost"),
    "merge-first-only": (MERGE, [("out.append(new_id)", "out.append(new_id)\n            return out + ids[i + 2 :]")],
                         "only the first occurrence"),
    "train-code-points": (TRAIN, [('ids = list(text.encode("utf-8"))  # 0-255', "ids = [ord(c) for c in text]")], "code points"),
    "train-least-frequent": (TRAIN, [("max(counts, key=counts.get)", "min(counts, key=counts.get)")], "least frequent"),
    "train-ids-off-by-one": (TRAIN, [("256 + rank", "257 + rank")], "off by one"),
    "train-no-early-stop": (TRAIN, [("        if not counts:\n            break  # fewer than two ids left\n", "")], "stop early"),
    "encode-last-learnt-first": (ENCODE, [(ENCODE_PICK, "pair = max(pairs, key=lambda p: merges.get(p, -1))")],
                                 "out of rank order"),
    "encode-most-frequent-first": (ENCODE, [(ENCODE_PICK, "counts = count_pairs(ids)\n        "
                                            "pair = max((p for p in counts if p in merges), key=counts.get, default=None)")],
                                   "out of rank order"),
    "encode-code-points": (ENCODE, [('ids = list(text.encode("utf-8"))', "ids = [ord(c) for c in text]")], "code points"),
    "encode-one-merge": (ENCODE, [("ids = merge(ids, pair, merges[pair])", "return merge(ids, pair, merges[pair])")],
                         "only one merge"),
    "decode-token-by-token": (DECODE, [('data = b"".join(vocab[i] for i in ids)  # the whole text\'s bytes\n    '
                                        'return data.decode("utf-8", errors="replace")',
                                        'return "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)')],
                              "token by token"),
    "decode-ignore": (DECODE, [('errors="replace"', 'errors="ignore"')], "dropped"),
    "decode-strict": (DECODE, [('data.decode("utf-8", errors="replace")', 'data.decode("utf-8")')], "must become U+FFFD"),
    "decode-latin-1": (DECODE, [('data.decode("utf-8", errors="replace")', 'data.decode("latin-1")')], "Latin-1"),
    "gelu-erf-of-x": (GELU, [("torch.erf(x / math.sqrt(2))", "torch.erf(x)")], "erf(x / sqrt(2))"),
    "gelu-no-cubic": (GELU, [("(x + 0.044715 * x**3)", "x")], "cubic term"),
    "gelu-forms-swapped": (GELU, [('if approximate == "tanh":', 'if approximate == "none":')], "the other form"),
    "load-c-attn-not-transposed": (LOAD, [(QKV_COPY, 'linear.weight.copy_(state_dict[h + "attn.c_attn.weight"][:, k * C : (k + 1) * C])')],
                                   "fused query/key/value weight (c_attn) was not transposed"),
    "load-qkv-order": (LOAD, [('("query", "key", "value")):  # C output', '("key", "query", "value")):  # C output')], "wrong order"),
    "load-untied": (LOAD, [('model.word_to_embedding.weight.copy_(state_dict["wte.weight"])',
                            'model.word_to_embedding.weight = nn.Parameter(state_dict["wte.weight"].clone())')],
                    "lm_head.weight is no longer"),
    "load-c-proj-not-transposed": (LOAD, [('(block.attention.to_output, "attn.c_proj", True)', '(block.attention.to_output, "attn.c_proj", False)')],
                                   "attn.c_proj.weight was not transposed"),
    "load-no-qkv-bias": (LOAD, [("            linear.bias.copy_(qkv_bias[k * C : (k + 1) * C])  # (C,)\n", "")], "was not loaded"),
    "pairs-self-pairs": (PAIRS, [("zip(ids, ids[1:])", "zip(ids, ids[:-1])")], "an id paired with itself"),
    "merge-index-past-end": (MERGE, [("if i + 1 < len(ids) and", "if i < len(ids) and")], "reads index 3 of ids"),
    "merge-pair-dropped": (MERGE, [("out.append(new_id)", "pass")], "removed instead of replaced"),
    "train-max-of-pairs": (TRAIN, [("max(counts, key=counts.get)", "max(counts)")], "compares the pairs themselves"),
    "train-ids-not-updated": (TRAIN, [("ids = merge(ids, pair, 256 + rank)", "merge(ids, pair, 256 + rank)")],
                              "the same pair won every round"),
    "encode-no-progress": (ENCODE, [("ids = merge(ids, pair, merges[pair])", "merge(ids, pair, merges[pair])")],
                           "the loop does not end"),
    "encode-stops-at-two": (ENCODE, [("while len(ids) >= 2:", "while len(ids) > 2:")], "stopped too early"),
    "gelu-one-minus": (GELU, [("(1 + torch.erf(x / math.sqrt(2)))", "(1 - torch.erf(x / math.sqrt(2)))")],
                       "1 - instead of 1 +"),
    "gelu-two-over-pi": (GELU, [("math.sqrt(2 / math.pi) * (x", "2 / math.pi * (x")], "the square root is missing"),
    "load-key-without-layer": (LOAD, [('weight = state_dict[h + name + ".weight"]', 'weight = state_dict[name + ".weight"]')],
                               "the layer's prefix is missing"),
    "load-norms-swapped": (LOAD, [('(block.norm_before_attn, "ln_1", False)', '(block.norm_before_attn, "ln_2", False)'),
                                  ('(block.norm_before_mlp, "ln_2", False)', '(block.norm_before_mlp, "ln_1", False)')],
                           "holds what belongs"),
    "pairs-empties-ids": (PAIRS, [("    return counts\n", "    ids.clear()  # done with them\n    return counts\n")], "in place"),
    "merge-writes-back": (MERGE, [("    return out\n", "    ids[:] = out\n    return out\n")], "in place"),
    "gelu-calls-f-gelu": (GELU, [("    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))", "    return F.gelu(x)")], "called F.gelu"),
}

ALTERNATIVES = {
    "pairs-counter": {PAIRS: '''
from collections import Counter

def count_pairs(ids):
    return dict(Counter(zip(ids, ids[1:])))
'''},
    "merge-for-loop": {MERGE: '''
def merge(ids, pair, new_id):
    out, skip = [], False
    for a, b in zip(ids, [*ids[1:], None]):
        if skip:
            skip = False
        elif (a, b) == tuple(pair):
            out.append(new_id)
            skip = True
        else:
            out.append(a)
    return out
'''},
    "train-most-common": {TRAIN: '''
from collections import Counter

def train_bpe(text, n_merges):
    ids, merges = list(text.encode()), {}
    while len(merges) < n_merges and len(ids) > 1:
        pair = Counter(count_pairs(ids)).most_common(1)[0][0]
        merges[pair] = new_id = 256 + len(merges)
        ids = merge(ids, pair, new_id)
    return merges
'''},
    "encode-replay-in-order": {ENCODE: '''
def encode(text, merges):
    ids = list(text.encode("utf-8"))
    for pair, new_id in sorted(merges.items(), key=lambda item: item[1]):  # every merge, in rank order
        ids = merge(ids, pair, new_id)
    return ids
'''},
    "decode-bytes-of-ints": {DECODE: '''
def decode(ids, vocab):
    return bytes(b for i in ids for b in vocab[i]).decode(errors="replace")
'''},
    "gelu-ndtr-and-sigmoid": {GELU: '''
def gelu(x, approximate="none"):
    if approximate == "tanh":  # (1 + tanh(z)) / 2 == sigmoid(2 z)
        return x * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3)))
    return x * torch.special.ndtr(x)
'''},
    "load-via-load-state-dict": {LOAD: '''
@torch.no_grad()
def load_gpt2_state_dict(model, state_dict):
    sd = state_dict
    ours = {"word_to_embedding.weight": sd["wte.weight"], "pos_to_embedding.weight": sd["wpe.weight"],
            "lm_head.weight": sd["wte.weight"], "final_norm.weight": sd["ln_f.weight"], "final_norm.bias": sd["ln_f.bias"]}
    for i in range(model.config.n_layers):
        h, l = f"h.{i}.", f"layers.{i}."
        for part in ("weight", "bias"):
            ours[l + "norm_before_attn." + part] = sd[h + "ln_1." + part]
            ours[l + "norm_before_mlp." + part] = sd[h + "ln_2." + part]
            fused = sd[h + "attn.c_attn." + part]
            pieces = (fused.t() if part == "weight" else fused).chunk(3)
            for name, piece in zip(("query", "key", "value"), pieces):
                ours[l + f"attention.{name}.{part}"] = piece
            flip = (lambda t: t.t()) if part == "weight" else (lambda t: t)
            ours[l + "attention.to_output." + part] = flip(sd[h + "attn.c_proj." + part])
            ours[l + "mlp.model.0." + part] = flip(sd[h + "mlp.c_fc." + part])
            ours[l + "mlp.model.2." + part] = flip(sd[h + "mlp.c_proj." + part])
    model.load_state_dict(ours)  # copies into the existing tensors: the head stays tied
    return model
'''},
}


def test_every_exercise_has_at_least_three_mistakes():
    counts = {}
    for exercise, _, _ in MISTAKES.values():
        counts[exercise] = counts.get(exercise, 0) + 1
    assert counts == {e: counts.get(e, 0) for e in (PAIRS, MERGE, TRAIN, ENCODE, DECODE, GELU, LOAD)}
    assert min(counts.values()) >= 3, counts


def test_gpt2_options_change_nothing_at_their_defaults():
    torch.manual_seed(0)
    plain = TransformerLM(Config(n_vocab=17, max_len=12, emb_dim=8, n_hidden=20, head_dim=4, n_heads=2, n_layers=2))
    torch.manual_seed(0)
    again = TransformerLM(Config(n_vocab=17, max_len=12, emb_dim=8, n_hidden=20, head_dim=4, n_heads=2, n_layers=2,
                                 attn_bias=False, activation="relu"))
    assert list(plain.state_dict()) == list(again.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), again.state_dict().values(), strict=True))
    assert isinstance(plain.layers[0].mlp.model[1], torch.nn.ReLU) and plain.layers[0].attention.query.bias is None
    with pytest.raises(ValueError, match="activation"):
        TransformerLM(Config(activation="swish"))


def test_gpt2_small_has_its_published_parameter_count():
    with torch.device("meta"):
        model = TransformerLM(GPT2_SMALL)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808
    assert isinstance(model.layers[0].mlp.model[1], torch.nn.GELU) and model.layers[0].attention.value.bias is not None


def test_byte_table_and_pre_split():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256 and table[32] == "Ġ" and table[10] == "Ċ" and table[33] == "!"
    assert GPT2_SPLIT.findall("I'm here  now\n\n 12a!") == ["I", "'m", " here", " ", " now", "\n\n", " 12", "a", "!"]


# mistakes that only the hidden cases can see (the visible ones list their pairs in sorted order anyway)
HIDDEN_ONLY = {
    "pairs-sorted": (PAIRS, [("    return counts\n", "    return dict(sorted(counts.items()))\n")], "another order"),
}

REQUIREMENTS = {
    PAIRS: {"in the order it first occurs": ["pairs-sorted"], "Do not change `ids`": ["pairs-empties-ids"]},
    MERGE: {"Do not change `ids`": ["merge-writes-back"]},
    ENCODE: {"so every text must": ["encode-last-learnt-first", "encode-most-frequent-first"]},
    DECODE: {"become the replacement character": ["decode-ignore", "decode-strict"]},
    GELU: {"do not call `F.gelu` or `nn.GELU`": ["gelu-calls-f-gelu"]},
}


class TestCatalogue(HiddenOnlyTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, hidden_only=HIDDEN_ONLY, requirements=REQUIREMENTS)
