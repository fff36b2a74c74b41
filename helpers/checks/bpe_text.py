"""Checks for lesson 10's byte-level BPE, continued: encode(text, merges) and decode(ids, vocab).

The machinery (probes that swap in known-good count_pairs and merge, judges that name the
mistake that explains every output) is lesson 10's, in ``helpers.checks.bpe``.
"""

from __future__ import annotations

from helpers.checks.bpe import _judge, _plain, _probe, merge_known, pairs_known, train_known
from helpers.checks.core import Check

# ---------------------------------------------------------------------------------------------
# encode(text, merges) and decode(ids, vocab)

CORPUS = "he she he hen; the theme then. €5 and €€€ for 😀😀 and 😀 the"
MERGES = train_known(CORPUS, 16)
ENCODE_CASES = ["then the theme", "thesis €€ 😀!", "", "ththe hen"]
ENCODE_HIDDEN_CASES = ["the then", "é thhe", "zq"]


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
    return {"out": _plain(fn(text, dict(MERGES)))}


def encode_variants(text):
    reverse = list(text.encode("utf-8"))
    for pair, new_id in reversed(list(MERGES.items())):
        reverse = merge_known(reverse, pair, new_id)
    return {
        "the merges were applied out of rank order, the most frequent pair of this text first: apply the "
        "merge learnt first (the lowest new id) first": _by_frequency(text),
        "the merges were applied out of rank order, the one learnt last first: apply the lowest new id first": encode_known(text, MERGES, pick=lambda ps: max(ps, key=MERGES.get)),
        "the merges were applied in reverse order: rank 0 first, then rank 1, ...": reverse,
        "you started from code points (ord) instead of the UTF-8 bytes": encode_known(text, MERGES, start=lambda t: [ord(c) for c in t]),
        "only one merge was applied: repeat until no pair of the ids has a merge": _one_merge(text),
    }


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


def _encode_expected(text):
    from helpers.reference.gpt2 import encode

    return encode(text, dict(MERGES))


_ENCODE_SUMMARY = ("encode: texts with and without merges, euro signs and emoji, the empty text, with "
                   f"{len(MERGES)} merges learnt from a short text: the same ids as the reference.", "return a list of ints.")
check_bpe_encode = Check("check_bpe_encode", _probe(ENCODE_CASES, _encode_call),
                     _judge(ENCODE_CASES, "encode", _encode_expected, encode_variants, lambda t: f"{t!r}, merges", _ENCODE_SUMMARY))
check_bpe_encode_hidden = Check("check_bpe_encode_hidden", _probe(ENCODE_HIDDEN_CASES, _encode_call),
                            _judge(ENCODE_HIDDEN_CASES, "encode", _encode_expected, encode_variants, lambda t: f"{t!r}, merges", _ENCODE_SUMMARY),
                            hidden=True)

DECODE_CASES = [list("naïve €".encode("utf-8")), encode_known("thesis €€ 😀!", MERGES), [104, 105, 0xE2, 0x82], [0xFF, 65]]
DECODE_HIDDEN_CASES = [encode_known("😀 the €", MERGES), [0x80, 0x80, 97], list("e\u0301".encode("utf-8"))]


def _decode_call(fn, ids):
    return {"out": _plain(fn(list(ids), vocab_known(MERGES)))}


def decode_variants(ids):
    vocab = vocab_known(MERGES)
    data = b"".join(vocab[i] for i in ids)
    return {
        "you decoded token by token: a character whose UTF-8 bytes are split over two tokens breaks; join "
        "all the bytes first, then decode once": "".join(vocab[i].decode("utf-8", errors="replace") for i in ids),
        "invalid bytes were dropped (errors='ignore'); they must become U+FFFD (errors='replace')": data.decode("utf-8", errors="ignore"),
        "you decoded the bytes as Latin-1 (one character per byte, or chr(b)): decode them as UTF-8": data.decode("latin-1"),
    }


def _decode_error(error):
    if "UnicodeDecodeError" in error:
        return ": bytes that are not valid UTF-8 must become U+FFFD: decode with errors='replace'"
    return None


def _decode_expected(ids):
    from helpers.reference.gpt2 import build_vocab, decode

    return decode(list(ids), build_vocab(dict(MERGES)))


_DECODE_SUMMARY = ("decode: multi-byte characters split across tokens, an unfinished character and invalid bytes "
                   "(U+FFFD): the same text as the reference.", "return a str.")
check_bpe_decode = Check("check_bpe_decode", _probe(DECODE_CASES, _decode_call),
                     _judge(DECODE_CASES, "decode", _decode_expected, decode_variants, repr, _DECODE_SUMMARY, _decode_error))
check_bpe_decode_hidden = Check("check_bpe_decode_hidden", _probe(DECODE_HIDDEN_CASES, _decode_call),
                            _judge(DECODE_HIDDEN_CASES, "decode", _decode_expected, decode_variants, repr, _DECODE_SUMMARY, _decode_error),
                            hidden=True)
