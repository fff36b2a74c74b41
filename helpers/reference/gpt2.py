"""Reference implementation for lesson 10: GPT-2 runs in your own model.

Generated from solutions/10-gpt2/10-gpt2.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


# Built in lessons 06, 08 and 09; taken from the course's reference implementation.
import collections
import json
import pathlib
import re
import unicodedata

from helpers.reference.fast_generation import generate_cached
from helpers.reference.sampling import generate, sample_next
from helpers.reference.transformer_lm import Config, TransformerLM


def count_pairs(ids: list[int]) -> dict[tuple[int, int], int]:
    """How often each pair of neighbouring ids occurs.

    ids: a list of token ids. Returns {(a, b): count} over every position i with ids[i] == a and
    ids[i + 1] == b, overlapping pairs included ([7, 7, 7] holds (7, 7) twice), each pair listed in
    the order of its first occurrence. ids is left unchanged.
    """
    counts = {}
    for pair in zip(ids, ids[1:]):  # (ids[0], ids[1]), (ids[1], ids[2]), ...
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of pair in ids by new_id, scanning from the left.

    Returns a new list; ids is left unchanged. Occurrences do not overlap: after a merge the scan
    goes on after the pair, so merge([7, 7, 7], (7, 7), 256) == [256, 7].
    """
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2  # both ids of the pair are used up
        else:
            out.append(ids[i])
            i += 1
    return out


def train_bpe(text: str, n_merges: int) -> dict[tuple[int, int], int]:
    """Learn up to n_merges byte-pair merges from text.

    Starts from the UTF-8 bytes of text (ids 0-255). Merge r takes the most frequent pair of the
    current ids (ties: the pair that occurs first), gives it the id 256 + r and replaces it
    everywhere with merge(); stops early when no pair is left. Returns {pair: new_id} in the
    order learnt.
    """
    ids = list(text.encode("utf-8"))  # 0-255
    merges = {}
    for rank in range(n_merges):
        counts = count_pairs(ids)
        if not counts:
            break  # fewer than two ids left
        pair = max(counts, key=counts.get)  # the first of the most frequent: dicts keep their order
        merges[pair] = 256 + rank
        ids = merge(ids, pair, 256 + rank)
    return merges


def build_vocab(merges: dict[tuple[int, int], int]) -> dict[int, bytes]:
    """Every token's bytes: ids 0-255 are one byte each, a merged token is its two parts joined."""
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new_id in merges.items():  # in rank order, so both parts exist already
        vocab[new_id] = vocab[a] + vocab[b]
    return vocab


def _unicode_class(*prefixes: str) -> str:
    """The body of a regular-expression class: every code point whose category starts with a prefix."""
    ranges, start = [], None
    for code in range(0x110001):
        inside = code <= 0x10FFFF and unicodedata.category(chr(code)).startswith(prefixes)
        if inside and start is None:
            start = code
        elif not inside and start is not None:
            ranges.append(f"{re.escape(chr(start))}-{re.escape(chr(code - 1))}")
            start = None
    return "".join(ranges)


# GPT-2's pre-split: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
_L, _N = _unicode_class("L"), _unicode_class("N")
_S = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"  # Unicode's White_Space
GPT2_SPLIT = re.compile(
    rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{_L}]+| ?[{_N}]+| ?[^{_S}{_L}{_N}]+|[{_S}]+(?![^{_S}])|[{_S}]+"
)


def train_bpe_pieces(pieces: list[str], n_merges: int) -> dict[tuple[int, int], int]:
    """Learn up to n_merges byte-pair merges from a text cut into pieces: no merge crosses two pieces.

    pieces: the text's pieces in order (GPT2_SPLIT.findall(text)). Merge r takes the pair whose
    counts, summed over the pieces, are the largest (ties: the pair that occurs first in the text),
    gives it the id 256 + r and replaces it inside every piece, with count_pairs and merge. Each
    different piece is kept once with its number of occurrences: the same merges as counting every
    piece one by one. Returns {pair: new_id} in the order learnt, as train_bpe does.
    """
    occurrences = collections.Counter(pieces)  # {piece: how often}, in the order of first occurrence
    piece_ids = [list(piece.encode("utf-8")) for piece in occurrences]  # each different piece's ids
    piece_counts = [count_pairs(ids) for ids in piece_ids]  # each different piece's own pair counts
    merges = {}
    for rank in range(n_merges):
        counts = {}
        for pairs, n in zip(piece_counts, occurrences.values()):  # pieces in the order they first occur
            for pair, k in pairs.items():
                counts[pair] = counts.get(pair, 0) + k * n  # the piece occurs n times
        if not counts:
            break  # every piece is a single token
        pair = max(counts, key=counts.get)  # the first of the most frequent, as in train_bpe
        merges[pair] = 256 + rank
        for i, pairs in enumerate(piece_counts):
            if pair in pairs:  # only the pieces that hold the pair change
                piece_ids[i] = merge(piece_ids[i], pair, 256 + rank)
                piece_counts[i] = count_pairs(piece_ids[i])
    return merges


def encode(text: str, merges: dict[tuple[int, int], int]) -> list[int]:
    """text -> token ids with learnt merges (byte-level BPE).

    Starts from the UTF-8 bytes of text; while some neighbouring pair has a merge, merges (with
    merge()) the pair with the lowest rank, i.e. the smallest new id, everywhere. Returns the ids.
    """
    ids = list(text.encode("utf-8"))
    while len(ids) >= 2:
        pairs = set(zip(ids, ids[1:]))
        pair = min(pairs, key=lambda p: merges.get(p, math.inf))  # the earliest-learnt merge that applies
        if pair not in merges:
            break  # no pair left that has a merge
        ids = merge(ids, pair, merges[pair])
    return ids


def decode(ids: list[int], vocab: dict[int, bytes]) -> str:
    """token ids -> text: every token's bytes joined, then decoded as UTF-8 once.

    Bytes that are not valid UTF-8 (ids that end in the middle of a character, say) become the
    replacement character U+FFFD (errors="replace"), as in GPT-2.
    """
    data = b"".join(vocab[i] for i in ids)  # the whole text's bytes
    return data.decode("utf-8", errors="replace")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from the 256 byte values to 256 printable characters.

    Bytes that are printable characters ('!'-'~', '¡'-'¬', '®'-'ÿ') stand for themselves; the 68
    others get chr(256), chr(257), ... in order. So a space is 'Ġ' (chr(288)) and a newline 'Ċ'.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class BPETokenizer:
    """GPT-2's tokenizer, built on this lesson's encode and decode.

    from_files reads GPT-2's vocab.json ({token written with bytes_to_unicode: id}) and merges.txt
    (one merge "left right" per line, in rank order). encode(text) pre-splits with GPT2_SPLIT and
    encodes every piece with encode(); it returns the file's ids. decode(ids) inverts it.
    """

    def __init__(self, merges: dict[tuple[int, int], int], file_id: dict[int, int], specials: dict[int, str]):
        self.merges = merges  # {(a, b): new_id} in our ids: bytes 0-255, merge r = 256 + r
        self.file_id = file_id  # our id -> the file's id
        self.our_id = {f: i for i, f in file_id.items()}
        vocab = build_vocab(merges)
        self.vocab = {file_id[i]: data for i, data in vocab.items()}  # the file's id -> bytes
        self.vocab.update({i: text.encode("utf-8") for i, text in specials.items()})  # <|endoftext|>
        self.cache: dict[str, list[int]] = {}

    @classmethod
    def from_files(cls, vocab_path, merges_path) -> "BPETokenizer":
        byte_of = {ch: b for b, ch in bytes_to_unicode().items()}
        file_ids = json.loads(pathlib.Path(vocab_path).read_text(encoding="utf-8"))  # {text: id}
        ours = {bytes([b]): b for b in range(256)}  # a token's bytes -> our id
        merges = {}
        for line in pathlib.Path(merges_path).read_text(encoding="utf-8").splitlines():
            if not line or line.startswith("#version"):
                continue
            left, right = (bytes(byte_of[ch] for ch in part) for part in line.split(" "))
            merges[(ours[left], ours[right])] = ours[left + right] = 256 + len(merges)
        table = bytes_to_unicode()
        file_id = {i: file_ids["".join(table[b] for b in data)] for data, i in ours.items()}
        known = set(file_id.values())
        specials = {i: text for text, i in file_ids.items() if i not in known}
        return cls(merges, file_id, specials)

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in GPT2_SPLIT.findall(text):
            if piece not in self.cache:
                self.cache[piece] = [self.file_id[i] for i in encode(piece, self.merges)]
            ids.extend(self.cache[piece])
        return ids

    def decode(self, ids: list[int]) -> str:
        return decode(ids, self.vocab)


def write_gpt2_files(merges: dict[tuple[int, int], int], folder) -> tuple[pathlib.Path, pathlib.Path]:
    """Save merges in GPT-2's format: folder/vocab.json and folder/merges.txt, with our ids
    (bytes 0-255, merge r = 256 + r) and <|endoftext|> after the last merge."""
    folder = pathlib.Path(folder)
    table, vocab = bytes_to_unicode(), build_vocab(merges)
    text = {i: "".join(table[b] for b in data) for i, data in vocab.items()}
    ids = {text[i]: i for i in sorted(vocab)} | {"<|endoftext|>": len(vocab)}
    (folder / "vocab.json").write_text(json.dumps(ids, ensure_ascii=False), encoding="utf-8")
    lines = ["#version: 0.2"] + [f"{text[a]} {text[b]}" for a, b in merges]
    (folder / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "vocab.json", folder / "merges.txt"


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """The Gaussian error linear unit, elementwise: x times the standard normal's probability below x.

    approximate="none": the exact form 0.5 x (1 + erf(x / sqrt 2)).
    approximate="tanh": GPT-2's form 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
    x: any shape. Returns a new tensor of x's shape and dtype.
    """
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


GPT2_SMALL = Config(
    n_vocab=50257, max_len=1024, emb_dim=768, n_hidden=3072, head_dim=64, n_heads=12, n_layers=12,
    tie_weights=True, final_norm=True, attn_bias=True, activation="gelu_tanh",
)


@torch.no_grad()
def load_gpt2_state_dict(model: TransformerLM, state_dict: dict[str, torch.Tensor]) -> TransformerLM:
    """Copy a GPT-2 checkpoint (GPT-2's names and layouts) into a GPT-2-shaped TransformerLM, in place.

    state_dict: wte.weight (V, C), wpe.weight (max_len, C); per layer i, h.i.ln_1 and h.i.ln_2
    (.weight, .bias (C,)), h.i.attn.c_attn (.weight (C, 3C): query | key | value, .bias (3C,)),
    h.i.attn.c_proj (C, C), h.i.mlp.c_fc (C, 4C), h.i.mlp.c_proj (4C, C) with their biases;
    ln_f (C,). Conv1D weights are (in, out): transposed for nn.Linear's (out, in). The buffers
    h.i.attn.bias and h.i.attn.masked_bias are ignored. lm_head stays tied to the token table.
    Returns the model.
    """
    C = model.config.emb_dim
    model.word_to_embedding.weight.copy_(state_dict["wte.weight"])  # (V, C); lm_head.weight is this tensor
    model.pos_to_embedding.weight.copy_(state_dict["wpe.weight"])  # (max_len, C)
    for i, block in enumerate(model.layers):
        h = f"h.{i}."
        for module, name, conv1d in [
            (block.norm_before_attn, "ln_1", False),
            (block.attention.to_output, "attn.c_proj", True),
            (block.norm_before_mlp, "ln_2", False),
            (block.mlp.model[0], "mlp.c_fc", True),
            (block.mlp.model[2], "mlp.c_proj", True),
        ]:
            weight = state_dict[h + name + ".weight"]
            module.weight.copy_(weight.T if conv1d else weight)  # Conv1D (in, out) -> Linear (out, in)
            module.bias.copy_(state_dict[h + name + ".bias"])
        qkv_weight = state_dict[h + "attn.c_attn.weight"].T  # (C, 3C) -> (3C, C)
        qkv_bias = state_dict[h + "attn.c_attn.bias"]  # (3C,)
        for k, name in enumerate(("query", "key", "value")):  # C output features each, in this order
            linear = getattr(block.attention, name)
            linear.weight.copy_(qkv_weight[k * C : (k + 1) * C])  # (C, C)
            linear.bias.copy_(qkv_bias[k * C : (k + 1) * C])  # (C,)
    model.final_norm.weight.copy_(state_dict["ln_f.weight"])
    model.final_norm.bias.copy_(state_dict["ln_f.bias"])
    return model


SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file: 8 bytes (N, little-endian), N bytes of JSON header
    {name: {"dtype", "shape", "data_offsets": [start, end]}}, then the data, little-endian."""
    data = bytearray(pathlib.Path(path).read_bytes())  # writable: the tensors share this buffer
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        dtype, shape = SAFETENSORS_DTYPES[info["dtype"]], info["shape"]
        start, end = info["data_offsets"]
        count = math.prod(shape)
        flat = torch.frombuffer(data, dtype=dtype, count=count, offset=8 + n + start) if count else torch.empty(0, dtype=dtype)
        assert flat.numel() * flat.element_size() == end - start, f"{name}: its byte range does not fit its shape"
        tensors[name] = flat.reshape(shape)
    return tensors


def read_gpt2_checkpoint(path) -> dict[str, torch.Tensor]:
    """GPT-2's tensors by GPT-2's names (wte.weight, h.0.attn.c_attn.weight, ...), from
    model.safetensors or pytorch_model.bin; a "transformer." prefix is dropped, and lm_head.weight
    too (a copy of wte.weight)."""
    path = pathlib.Path(path)
    if path.suffix == ".safetensors":
        raw = read_safetensors(path)
    else:
        raw = torch.load(path, map_location="cpu", weights_only=True)  # runs no code from the file
    return {name.removeprefix("transformer."): t for name, t in raw.items() if name != "lm_head.weight"}
