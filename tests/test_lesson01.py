"""Lesson 01: every catalogued mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks."""

from harness import Catalogue, HiddenOnlyTests, lesson

A = "01-tokens-and-embeddings"

RAISE_BLOCK = """        if code >= N_VOCAB:
            raise ValueError(
                f"{ch!r} (code point {code}) at position {position} is outside the "
                f"vocabulary of {N_VOCAB} ids (0 to {N_VOCAB - 1})"
            )
"""

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    "encode-utf8-bytes": (
        "encode-decode",
        [("return torch.tensor(codes, dtype=torch.long)", 'return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)')],
        "UTF-8 bytes",
    ),
    "encode-float-tensor": ("encode-decode", [("torch.tensor(codes, dtype=torch.long)", "torch.Tensor(codes)")], "capital T"),
    "encode-no-range-check": ("encode-decode", [(RAISE_BLOCK, "")], "should raise ValueError"),
    "encode-wraps-around": ("encode-decode", [(RAISE_BLOCK, ""), ("codes.append(code)", "codes.append(code % N_VOCAB)")], "% 256"),
    "encode-off-by-one-range": ("encode-decode", [("if code >= N_VOCAB:", "if code > N_VOCAB:")], "one past the last valid id"),
    "encode-assert-not-valueerror": (
        "encode-decode",
        [("if code >= N_VOCAB:\n            raise ValueError(", "assert code < N_VOCAB, (")],
        "raised AssertionError",
    ),
    "encode-error-names-nothing": (
        "encode-decode",
        [('f"{ch!r} (code point {code}) at position {position} is outside the "', '"a character is outside the "')],
        "does not say which character",
    ),
    "decode-str-not-chr": ("encode-decode", [("chr(code)", "str(code)")], "str(id) writes the number"),
    "decode-returns-list": (
        "encode-decode",
        [('return "".join(chr(code) for code in ids.tolist())', "return [chr(code) for code in ids.tolist()]")],
        "join them",
    ),
    "decode-utf8": (
        "encode-decode",
        [('return "".join(chr(code) for code in ids.tolist())', 'return bytes(ids.tolist()).decode("utf-8")')],
        "not UTF-8 bytes",
    ),
    "decode-chr-of-whole-tensor": (
        "encode-decode",
        [('return "".join(chr(code) for code in ids.tolist())', 'return "".join(chr(ids))')],
        "chr takes one number",
    ),
    "shift-swapped": ("next-token-shift", [("return inputs, targets", "return targets, inputs")], "swapped"),
    "shift-batch-dimension": (
        "next-token-shift",
        [("ids[..., :-1]", "ids[:-1]"), ("ids[..., 1:]", "ids[1:]")],
        "you cut the batch dimension",
    ),
    "shift-roll": (
        "next-token-shift",
        [("inputs = ids[..., :-1]", "inputs = ids"), ("targets = ids[..., 1:]", "targets = torch.roll(ids, -1, dims=-1)")],
        "torch.roll",
    ),
    "shift-targets-equal-inputs": ("next-token-shift", [("targets = ids[..., 1:]", "targets = ids[..., :-1]")], "equal the inputs"),
    "shift-by-two": ("next-token-shift", [("targets = ids[..., 1:]", "targets = ids[..., 2:]")], "one fewer position"),
    "encode-error-without-position": (
        "encode-decode",
        [('f"{ch!r} (code point {code}) at position {position} is outside the "', 'f"{ch!r} (code point {code}) is outside the "')],
        "not its position",
    ),
    "encode-reversed": ("encode-decode", [("codes.append(code)", "codes.insert(0, code)")], "spell '.demrofsnarT'"),
    "encode-lowercases": ("encode-decode", [("enumerate(text)", "enumerate(text.lower())")], "spell 'transformed.'"),
    "encode-batch-of-one": (
        "encode-decode",
        [("return torch.tensor(codes, dtype=torch.long)", "return torch.tensor([codes], dtype=torch.long)")],
        "one id per character",
    ),
    "encode-int32": ("encode-decode", [("dtype=torch.long)  # (T,)", "dtype=torch.int32)  # (T,)")], "use torch.long"),
    "decode-space-join": ("encode-decode", [('return "".join(', 'return " ".join(')], "one per id"),
    "shift-assumes-a-batch": (
        "next-token-shift",
        [("ids[..., :-1]", "ids[:, :-1]"), ("ids[..., 1:]", "ids[:, 1:]")],
        "IndexError in shift_for_next_token",
    ),
    "shift-transposed": ("next-token-shift", [("ids[..., :-1]", "ids.t()[:-1]"), ("ids[..., 1:]", "ids.t()[1:]")], "permuted to (T, B)"),
    "shift-targets-plus-one": ("next-token-shift", [("targets = ids[..., 1:]", "targets = inputs + 1")], "not the next number"),
    "shift-flattens-the-batch": (
        "next-token-shift",
        [("inputs = ids[..., :-1]", "ids = ids.flatten()\n    inputs = ids[..., :-1]")],
        "1 axes, 2 were expected",
    ),
    "shift-changes-ids": (
        "next-token-shift",
        [("inputs = ids[..., :-1]", "if ids.dim() == 1:\n        ids.unsqueeze_(0)\n    inputs = ids[..., :-1]")],
        "changed ids in place",
    ),
    "count-no-table": ("parameter-count", [("return table + head_weight + bias", "return head_weight + bias")], "matrix too few"),
    "count-sum-not-product": ("parameter-count", [("table = n_vocab * emb_dim", "table = n_vocab + emb_dim")], "a product, not V + C"),
    "count-padding-row": ("parameter-count", [("table = n_vocab * emb_dim", "table = (n_vocab + 1) * emb_dim")], "V·C + C"),
    "count-bias-always": ("parameter-count", [("bias = n_vocab if head_bias else 0", "bias = n_vocab")], "although head_bias=False"),
    "count-scalar-bias": ("parameter-count", [("bias = n_vocab if head_bias else 0", "bias = 1 if head_bias else 0")], "the bias's V entries are missing"),
    "count-tied-twice": (
        "parameter-count",
        [("head_weight = 0 if tie_weights else n_vocab * emb_dim", "head_weight = n_vocab * emb_dim")],
        "counted twice",
    ),
    "count-bias-emb-dim": (
        "parameter-count",
        [("bias = n_vocab if head_bias else 0", "bias = emb_dim if head_bias else 0")],
        "one entry per output",
    ),
    "count-no-bias": ("parameter-count", [("return table + head_weight + bias", "return table + head_weight")], "bias is missing"),
    "count-tie-flag-backwards": (
        "parameter-count",
        [("head_weight = 0 if tie_weights else n_vocab * emb_dim", "head_weight = n_vocab * emb_dim if tie_weights else 0")],
        "read backwards",
    ),
    "count-float": (
        "parameter-count",
        [("return table + head_weight + bias", "return float(table + head_weight + bias)")],
        "should return an int",
    ),
}

# mistakes only the hidden tests catch: they lose exactly the hidden test's points
HIDDEN_ONLY = {
    "encode-empty-is-float": (
        "encode-decode",
        [("torch.tensor(codes, dtype=torch.long)", "torch.tensor(codes)")],
        "dtype=torch.long",
    ),
}

ALTERNATIVES = {
    "latin1-codec": {"encode-decode": '''
def encode(text):
    try:
        data = text.encode("latin-1")  # exactly the code points 0..255, one byte each
    except UnicodeEncodeError as err:
        raise ValueError(f"cannot encode {text!r}: {err}") from err
    return torch.tensor(list(data), dtype=torch.long)


def decode(ids):
    return bytes(ids.tolist()).decode("latin-1")
'''},
    "codec-error-propagates": {"encode-decode": '''
def encode(text):
    # UnicodeEncodeError is a ValueError, and its message names the character
    return torch.tensor(list(text.encode("latin-1")), dtype=torch.int64)


def decode(ids):
    return "".join(map(chr, ids))  # iterating a tensor gives 0-d tensors; chr accepts them
'''},
    "map-and-as-tensor": {"encode-decode": '''
def encode(text):
    codes = list(map(ord, text))
    bad = [i for i, c in enumerate(codes) if c >= N_VOCAB]
    if bad:
        i = bad[0]
        raise ValueError(f"character {text[i]!r} (U+{codes[i]:04X}) at index {i} has no id")
    return torch.as_tensor(codes, dtype=torch.int64).reshape(len(codes))


def decode(ids):
    out = ""
    for code in ids:
        out += chr(int(code))
    return out
'''},
    "shift-narrow": {"next-token-shift": '''
def shift_for_next_token(ids):
    T = ids.shape[-1]
    return ids.narrow(-1, 0, T - 1), ids.narrow(-1, 1, T - 1)
'''},
    "shift-clones": {"next-token-shift": '''
def shift_for_next_token(ids):
    return ids[..., :-1].clone(), ids[..., 1:].clone()
'''},
    "count-by-modules": {"parameter-count": '''
def embedding_and_head_parameters(n_vocab, emb_dim, tie_weights=True, head_bias=False):
    emb = nn.Embedding(n_vocab, emb_dim)  # (not on device="meta": that imports torch._dynamo,
    head = nn.Linear(emb_dim, n_vocab, bias=head_bias)  # which the grader flags as tampering)
    if tie_weights:
        head.weight = emb.weight
    return num_parameters(nn.ModuleList([emb, head]))
'''},
    "count-one-line": {"parameter-count": '''
def embedding_and_head_parameters(n_vocab, emb_dim, tie_weights=True, head_bias=False):
    return n_vocab * emb_dim * (1 if tie_weights else 2) + n_vocab * int(head_bias)
'''},
}


def test_catalogue_covers_every_exercise():
    exercises = set(lesson(A).exercises)
    for exercise in exercises:
        assert sum(ex == exercise for ex, _, _ in MISTAKES.values()) >= 3, exercise
        assert any(exercise in alt for alt in ALTERNATIVES.values()), exercise


# every "must" / "do not" sentence of a task -> the catalogued mistakes that break it
REQUIREMENTS = {
    "next-token-shift": {"Do not change `ids`": ["shift-changes-ids"]},
}


class TestCatalogue(HiddenOnlyTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, hidden_only=HIDDEN_ONLY, requirements=REQUIREMENTS)
