"""Checks for lesson 10's byte-level BPE, continued: encode(text, merges) and decode(ids, vocab).

The checks are made as ``helpers.checks.bpe`` makes its own (known-good count_pairs and merge
swapped in, a loop bound), on the engine of ``helpers.checks.functions`` (the mistake that explains
every output named, else a reading of the wrong output).
"""

from __future__ import annotations

import re

from helpers.checks.bpe import _plain, make_checks, reference
from helpers.checks.bpe_known import merge_known, pairs_known, train_known
from helpers.checks.functions import parting
from helpers.reference import gpt2

# ---------------------------------------------------------------------------------------------
# encode(text, merges) and decode(ids, vocab)

CORPUS = "he she he hen; the theme then. €5 and €€€ for 😀😀 and 😀 the"
MERGES = train_known(CORPUS, 16)
ENCODE_CASES = ["then the theme", "thesis €€ 😀!", "", "ththe hen", "hen", "she a a", "thenehe a"]  # "hen": 3 bytes, then 2 ids, then 1
ENCODE_HIDDEN_CASES = ["the then", "é thhe", "zq", "he"]


def vocab_known(merges):
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new_id in merges.items():
        vocab[new_id] = vocab[a] + vocab[b]
    return vocab


def encode_known(text, merges, start=None, pick=None):
    ids = list(text.encode("utf-8")) if start is None else start(text)
    while len(ids) >= 2:
        present = [p for p in pairs_known(ids) if p in merges]
        if not present:
            break
        pair = (pick or (lambda ps: min(ps, key=merges.get)))(present)
        ids = merge_known(ids, pair, merges[pair])
    return ids


def _encode_call(fn, text):
    merges = dict(MERGES)
    first = fn(text, merges)
    out = _plain(first)
    if isinstance(first, list) and merges == MERGES:  # a caller that goes on writing into the ids it got back
        first.append(-1)
        again = fn(text, dict(MERGES))
        if isinstance(again, list) and (again is first or again[-1:] == [-1]):
            return {"out": out, "input_changed": "returned a list it keeps: the caller appended -1 to the ids it got "
                    "back, and encoding the same text again returned them with that -1. A kept result (a memo) is "
                    "handed out as a copy, list(ids), so that nothing a caller does to it reaches the next call."}
    if merges == MERGES:
        return {"out": out}
    gone = [pair for pair in MERGES if pair not in merges]
    what = (f"{len(gone)} of its {len(MERGES)} entries are gone after the call, {gone[0]} first" if gone else
            "entries were added or changed during the call")
    return {"out": out, "input_changed": f"changed the merges dict it was given ({what}): they are the tokenizer's, "
            "and the next text is encoded with the same merges. Read them (merges[pair], merges.get(pair)); "
            "never pop, delete or assign."}


def encode_variants(text):
    return {
        "the merges were applied out of rank order, the most frequent pair of this text first: apply the "
        "merge learnt first (the lowest new id) first": _by_frequency(text),
        "the merges were applied out of rank order, the one learnt last first: apply the lowest new id first": encode_known(text, MERGES, pick=lambda ps: max(ps, key=MERGES.get)),
        "your ids are the text's bytes with only the merges of two bytes applied: no merge that joins an already "
        "merged token ran, though your ids hold pairs that have one (a single pass over the pairs of the bytes, or "
        "each merge tried once, gives this). A merge makes new pairs: look for the pairs again after every merge, "
        "until no neighbouring pair has a merge": _bytes_only(text),
        "you started from code points (ord) instead of the UTF-8 bytes": encode_known(text, MERGES, start=lambda t: [ord(c) for c in t]),
        "only one merge was applied: repeat until no pair of the ids has a merge": _one_merge(text),
        "a pair without a merge ranked first (merges.get(pair, 0)), so the loop stopped at it while merges remained: "
        "a pair that has no merge must rank last, merges.get(pair, math.inf)": _unmerged_first(text),
    }


def _bytes_only(text):
    """The merges of two bytes alone, by rank, each once (what remains of encode without its loop)."""
    ids = list(text.encode("utf-8"))
    for pair, new_id in MERGES.items():
        ids = merge_known(ids, pair, new_id) if max(pair) < 256 else ids
    return ids


def _unmerged_first(text):
    ids = list(text.encode("utf-8"))
    while len(ids) >= 2:
        pair = min(set(zip(ids, ids[1:], strict=False)), key=lambda p: MERGES.get(p, 0))
        if pair not in MERGES:
            break
        ids = merge_known(ids, pair, MERGES[pair])
    return ids


def _by_frequency(text):
    ids = list(text.encode("utf-8"))
    while True:
        counts = pairs_known(ids)
        present = [p for p in counts if p in MERGES]
        if not present:
            return ids
        pair = max(present, key=counts.get)
        ids = merge_known(ids, pair, MERGES[pair])


def _one_merge(text):
    ids = list(text.encode("utf-8"))
    present = [p for p in pairs_known(ids) if p in MERGES]
    if not present:
        return ids
    pair = min(present, key=MERGES.get)
    return merge_known(ids, pair, MERGES[pair])


def _rank(i):
    return f"byte {i}" if i < 256 else f"rank {i - 256}"


def encode_reading(text, got, expected):
    """Do the ids spell the text, is a merge left, else where the segmentation first parts."""
    vocab = vocab_known(MERGES)
    stray = [i for i in got if i not in vocab]
    if stray:
        return f"your ids hold {stray[0]}, which is neither a byte (0-255) nor the id of a merge (256-{255 + len(MERGES)})"
    data, want = b"".join(vocab[i] for i in got), text.encode("utf-8")
    if data != want:
        k = parting(data, want)
        return (f"your ids do not spell the text: their bytes are {data!r}, the text's {want!r}; they part at byte {k}"[:400])
    left = sorted((MERGES[p], i) for i, p in enumerate(zip(got, got[1:])) if p in MERGES)  # noqa: B905
    if left:
        new_id, i = left[0]
        return (f"encode stopped too early: at positions {i}, {i + 1} your ids still hold {tuple(got[i:i + 2])}, "
                f"which has a merge ({_rank(new_id)}, id {new_id}); go on until no neighbouring pair has one")
    p = parting(got, expected)
    offset = sum(len(vocab[i]) for i in got[:p])
    return (f"your ids spell the text and no merge is left, but the merges were applied in another order than by rank: "
            f"from byte {offset} (position {p}) the reference has {expected[p]} = {vocab[expected[p]]!r} "
            f"({_rank(expected[p])}) where you have {got[p]} = {vocab[got[p]]!r} ({_rank(got[p])}); the lowest rank "
            "must be applied first, everywhere, before the next")


def _no_pairs(text, error):
    """min() or max() over the pairs of a sequence that has none left."""
    if re.search(r"(min|max)\(\) (arg is an empty sequence|iterable argument is empty)", error):
        size = len(text.encode("utf-8"))
        return (f"The min (or max) was taken over no pairs at all: {text!r} has {size} byte{'s' if size != 1 else ''}, and "
                "fewer than two ids (the empty text, one byte, or a text merged down to one token) have no neighbouring "
                "pair. Stop merging when count_pairs finds none, before the min.")
    return None


_ENCODE_SUMMARY = ("encode: texts with and without merges, euro signs and emoji, the empty text, with "
                   f"{len(MERGES)} merges learnt from a short text: the same ids as the reference.", "return a list of ints.")
check_bpe_encode, check_bpe_encode_hidden = make_checks(
    "check_bpe_encode", _encode_call, ENCODE_CASES, ENCODE_HIDDEN_CASES, "encode", reference("encode", lambda t: (t, dict(MERGES))), encode_variants,
    lambda t: f"{t!r}, merges", _ENCODE_SUMMARY, on_error=lambda t, error: _no_pairs(t, error),
    reading=lambda t, got, want: isinstance(got, list) and encode_reading(t, got, want))

DECODE_CASES = [list("naïve €".encode("utf-8")), encode_known("thesis €€ 😀!", MERGES), [104, 105, 0xE2, 0x82], [0xFF, 65]]
DECODE_HIDDEN_CASES = [encode_known("😀 the €", MERGES), [0x80, 0x80, 97], list("e\u0301".encode("utf-8")), []]


def _decode_call(fn, ids):
    given = list(ids)
    out = _plain(fn(given, vocab_known(MERGES)))
    if given == list(ids):
        return {"out": out}
    return {"out": out, "input_changed": f"changed the list of ids it was given (it held {len(ids)} ids, afterwards "
            f"{len(given)}): the caller keeps its ids for what comes next. Read them (a for loop, an index); never "
            "pop, remove or assign."}


def decode_variants(ids):
    vocab = vocab_known(MERGES)
    data = b"".join(vocab[i] for i in ids)
    return {
        "you decoded token by token: a character whose UTF-8 bytes are split over two tokens breaks; join "
        "all the bytes first, then decode once": "".join(vocab[i].decode("utf-8", errors="replace") for i in ids),
        "invalid bytes were dropped (errors='ignore'); they must become U+FFFD (errors='replace')": data.decode("utf-8", errors="ignore"),
        "invalid bytes were written as escapes (errors='backslashreplace'); they must become U+FFFD (errors='replace')": data.decode("utf-8", errors="backslashreplace"),
        "you decoded the bytes as Latin-1 (one character per byte, or chr(b)): decode them as UTF-8": data.decode("latin-1"),
        **{f"you joined the tokens' bytes with {sep!r} between them: a token's bytes already hold any space it "
           "needs; join with b\"\" (nothing between)": sep.join(vocab[i] for i in ids).decode("utf-8", errors="replace")
           for sep in (b" ", b"\n", b",", b", ")},
    }


def _decode_error(ids, error):
    if not ids and re.match(r"(IndexError|ValueError|StopIteration)\b", error):
        return ("No ids at all (an empty list) must decode to the empty text '', without touching ids[0] or any "
                "first element: start from b'' and join.")
    if "UnicodeDecodeError" in error:
        return "Bytes that are not valid UTF-8 must become U+FFFD: decode with errors='replace'."
    if "bytes must be in range(0, 256)" in error:
        return ("An id of 256 or more is a merged token, not a byte: look each id's bytes up in vocab "
                "(b''.join(vocab[i] for i in ids)).")
    return None


def decode_reading(ids, got, expected):
    if not isinstance(got, str):
        return None
    data = b"".join(vocab_known(MERGES)[i] for i in ids)
    if got == str(data):
        return "you returned str() of the bytes, their Python spelling: decode them (data.decode('utf-8', errors='replace'))"
    k = parting(got, expected)

    def char(text):
        return f"{text[k]!r} (UTF-8 bytes {text[k].encode('utf-8', 'surrogatepass').hex(' ')})" if k < len(text) else "nothing more"
    return f"the texts agree on {k} characters, then the reference has {char(expected)} where yours has {char(got)}"


def _decode_expected(ids):
    return gpt2.decode(list(ids), gpt2.build_vocab(dict(MERGES)))


_DECODE_SUMMARY = ("decode: multi-byte characters split across tokens, an unfinished character and invalid bytes "
                   "(U+FFFD): the same text as the reference.", "return a str.")
check_bpe_decode, check_bpe_decode_hidden = make_checks(
    "check_bpe_decode", _decode_call, DECODE_CASES, DECODE_HIDDEN_CASES, "decode", _decode_expected, decode_variants, repr,
    _DECODE_SUMMARY, on_error=_decode_error, reading=decode_reading)
