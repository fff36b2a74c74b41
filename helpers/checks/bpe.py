"""Checks for lesson 10's byte-level BPE: count_pairs, merge, train_bpe, encode, decode.

Token ids are plain Python ints in lists; a pair is a tuple (a, b). The probes run the student's
function on inputs of their own and return lists (a dict of pairs travels as [a, b, value]
triples, in the dict's order). ``train_bpe`` and ``encode`` call ``count_pairs`` and ``merge`` by
name: while their probes run, those names mean this module's known-good versions, so a mistake
in one exercise costs only that exercise. The judges compare with the reference.
"""

from __future__ import annotations

from contextlib import contextmanager

from helpers.checks.core import Check, CheckFailed, describe

# ---------------------------------------------------------------------------------------------
# known-good versions, for the probes (which must not need the reference) and the variants


def pairs_known(ids):
    counts = {}
    for pair in zip(ids, ids[1:]):  # noqa: B905 - one shorter by design
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge_known(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_known(text, n_merges, start=None, pick=None, first_id=256):
    ids = list(text.encode("utf-8")) if start is None else start(text)
    merges = {}
    for rank in range(n_merges):
        counts = pairs_known(ids)
        if not counts:
            break
        pair = (pick or (lambda c: max(c, key=c.get)))(counts)
        merges[pair] = first_id + rank
        ids = merge_known(ids, pair, first_id + rank)
    return merges


@contextmanager
def known_helpers(function):
    """While active, count_pairs and merge mean the known-good versions to ``function``."""
    scope = getattr(function, "__globals__", None)
    missing = object()
    saved = {}
    if isinstance(scope, dict):  # also when the notebook has none (its cell raised): then remove them after
        for name, fn in (("count_pairs", pairs_known), ("merge", merge_known)):
            saved[name] = scope.get(name, missing)
            scope[name] = fn
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                scope.pop(name, None)
            else:
                scope[name] = value


def _plain(value):
    """A result as JSON-ready data: dicts of pairs become [a, b, value] triples, in order."""
    if isinstance(value, dict):
        try:
            return {"pairs": [[int(a), int(b), int(v)] for (a, b), v in value.items()]}
        except (TypeError, ValueError):
            return {"unusable": describe(value)}
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return {"ids": list(value)}
    if isinstance(value, str):
        return {"text": value}
    return {"unusable": describe(value)}


def _unplain(data):
    if not isinstance(data, dict):
        return data
    if "pairs" in data:
        return {(a, b): v for a, b, v in data["pairs"]}
    return data.get("ids", data.get("text", data))


def _probe(cases, call):
    def probe(function) -> dict:
        if not callable(function):
            raise CheckFailed(f"expected a function, got {describe(function)}")
        runs = []
        with known_helpers(function):
            for case in cases:
                try:
                    runs.append(call(function, case))
                except NotImplementedError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the error is evidence
                    runs.append({"error": f"{type(exc).__name__}: {exc}"[:400]})
        return {"runs": runs}

    return probe


def _judge(cases, label, expected_of, variants_of, describe_case, summary, on_error=lambda error: None):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        outputs = [_unplain(run.get("out")) for run in runs]
        every = [variants_of(case) for case in cases]
        for index, (case, run) in enumerate(zip(cases, runs, strict=True)):
            what = f"{label}({describe_case(case)})"
            if "error" in run:
                raise CheckFailed(f"{what} raised {run['error']}" + (on_error(str(run["error"])) or ""))
            if run.get("input_changed"):
                raise CheckFailed(f"{what} changed its input list in place: build and return a new list.")
            got, expected = outputs[index], expected_of(case)
            if got == expected and type(got) is type(expected):
                continue
            shown = f"expected {expected!r}, got {got!r}"[:700]
            for name in every[index]:  # a mistake that explains every output, else this one
                if all(o == v[name] for o, v in zip(outputs, every, strict=True)):
                    raise CheckFailed(f"{what}: {name}. Evidence: {shown}.")
            for name, variant in every[index].items():
                if got == variant:
                    raise CheckFailed(f"{what}: {name}. Evidence: {shown}.")
            if isinstance(run.get("out"), dict) and "unusable" in run["out"]:
                raise CheckFailed(f"{what} returned {run['out']['unusable']}; {summary[1]}")
            raise CheckFailed(f"{what} differs from the reference. Evidence: {shown}.")
        return summary[0]

    return judge


# ---------------------------------------------------------------------------------------------
# count_pairs(ids) -> {(a, b): count}

PAIR_CASES = [[1, 2, 3, 1, 2], [97, 97, 97], [5, 5, 5, 5, 6, 5, 5], [4], []]
PAIR_HIDDEN_CASES = [[9, 8, 9, 8, 9, 8, 8, 8], [300, 301, 300, 301, 2, 2], [0, 255]]


def _count_call(fn, ids):
    given = list(ids)
    return {"out": _plain(fn(given)), "input_changed": given != ids}


def pair_variants(ids):
    stride = {}
    for pair in zip(ids[::2], ids[1::2]):  # noqa: B905
        stride[pair] = stride.get(pair, 0) + 1
    once = {p: merge_known(ids, p, -1).count(-1) for p in pairs_known(ids)}  # like str.count
    return {
        "overlapping pairs were counted once: in [7, 7, 7] the pair (7, 7) occurs twice, at positions 0 "
        "and 1; count every neighbouring pair (counting is not merging)": once,
        "you stepped through ids two at a time, so only the pairs at even positions were counted": stride,
        "the last pair is missing (loop up to len(ids) - 1)": pairs_known(ids[:-1]),
        "every pair counts 1: count how often each occurs": {p: 1 for p in pairs_known(ids)},
        "you paired tokens two apart (ids[i], ids[i + 2]); neighbours are ids[i], ids[i + 1]": pairs_known_gap(ids),
    }


def pairs_known_gap(ids):
    counts = {}
    for pair in zip(ids, ids[2:]):  # noqa: B905
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def _pairs_expected(ids):
    from helpers.reference.gpt2 import count_pairs

    return count_pairs(ids)


_PAIR_SUMMARY = ("count_pairs: overlapping runs ([97, 97, 97] holds (97, 97) twice), a lone token and an "
                 "empty list: every neighbouring pair counted, input untouched.",
                 "return a dict {(a, b): count}.")
check_count_pairs = Check("check_count_pairs", _probe(PAIR_CASES, _count_call),
                          _judge(PAIR_CASES, "count_pairs", _pairs_expected, pair_variants, repr, _PAIR_SUMMARY))
check_count_pairs_hidden = Check("check_count_pairs_hidden", _probe(PAIR_HIDDEN_CASES, _count_call),
                                 _judge(PAIR_HIDDEN_CASES, "count_pairs", _pairs_expected, pair_variants, repr, _PAIR_SUMMARY),
                                 hidden=True)

# ---------------------------------------------------------------------------------------------
# merge(ids, pair, new_id) -> ids with every (non-overlapping) occurrence replaced, from the left

MERGE_CASES = [([1, 2, 3, 1, 2], (1, 2), 9), ([97, 97, 97], (97, 97), 256), ([5, 5, 5, 5], (5, 5), 7), ([3, 1, 2, 4], (2, 3), 8)]
MERGE_HIDDEN_CASES = [([6, 6, 6, 6, 6], (6, 6), 300), ([1, 2], (1, 2), 257), ([2, 1, 2, 1, 1], (1, 2), 11), ([], (1, 2), 3)]


def _merge_call(fn, case):
    ids, pair, new_id = case
    given = list(ids)
    return {"out": _plain(fn(given, pair, new_id)), "input_changed": given != ids}


def merge_variants(case):
    ids, pair, new_id = case
    no_skip, tail_lost, first = [], [], list(ids)
    for i, x in enumerate(ids):  # a merge that does not skip the pair's second token
        no_skip.append(new_id if i + 1 < len(ids) and (x, ids[i + 1]) == pair else x)
    i = 0
    while i < len(ids) - 1:  # the loop stops one short and the last token is never appended
        if (ids[i], ids[i + 1]) == pair:
            tail_lost.append(new_id)
            i += 2
        else:
            tail_lost.append(ids[i])
            i += 1
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            first = ids[:i] + [new_id] + ids[i + 2:]
            break
    right = merge_known(ids[::-1], pair[::-1], new_id)[::-1]
    return {
        "after a merge the scan must skip both tokens of the pair (i += 2): your version also kept the "
        "second token, or merged overlapping pairs": no_skip,
        "the last token is lost when it is not part of a merge: append what is left after the loop": tail_lost,
        "only the first occurrence was merged: replace every occurrence": first,
        "you merged from the right: scan from the left, so [7, 7, 7] becomes [new, 7]": right,
    }


def _merge_expected(case):
    from helpers.reference.gpt2 import merge

    return merge(list(case[0]), case[1], case[2])


_MERGE_SUMMARY = ("merge: every occurrence replaced from the left, overlapping runs ([97, 97, 97] -> [256, 97]), "
                  "a pair at the very end, a pair that does not occur; input untouched.", "return a list of ints.")
check_merge = Check("check_merge", _probe(MERGE_CASES, _merge_call),
                    _judge(MERGE_CASES, "merge", _merge_expected, merge_variants, lambda c: ", ".join(map(repr, c)), _MERGE_SUMMARY))
check_merge_hidden = Check("check_merge_hidden", _probe(MERGE_HIDDEN_CASES, _merge_call),
                           _judge(MERGE_HIDDEN_CASES, "merge", _merge_expected, merge_variants, lambda c: ", ".join(map(repr, c)), _MERGE_SUMMARY),
                           hidden=True)

# ---------------------------------------------------------------------------------------------
# train_bpe(text, n_merges) -> {pair: new_id}, in the order learnt

TRAIN_CASES = [("the cat sat on the mat; the hat", 6), ("aaaaab", 4), ("bcab", 2), ("ab", 5), ("€€ naïve €", 3)]
TRAIN_HIDDEN_CASES = [("to be or not to be: that is the question", 9), ("xyz", 0), ("😀😀😀 😀", 6)]


def _train_call(fn, case):
    return {"out": _plain(fn(*case))}


def train_variants(case):
    text, n = case
    counts = pairs_known(list(text.encode("utf-8")))
    once = sorted(counts, key=counts.get, reverse=True)[:n]  # stable: ties stay in order of appearance
    return {
        "you started from code points (ord) instead of the UTF-8 bytes: text.encode('utf-8') gives ids 0-255 for any text": train_known(text, n, start=lambda t: [ord(c) for c in t]),
        "you merged the least frequent pair: take the most frequent": train_known(text, n, pick=lambda c: min(c, key=c.get)),
        "ties went to the largest pair: among equally frequent pairs take the one that occurs first (max over the dict keeps its order)": train_known(text, n, pick=lambda c: max(c.items(), key=lambda kv: (kv[1], kv[0]))[0]),
        "ties went to the smallest pair: among equally frequent pairs take the one that occurs first (max over the dict keeps its order)": train_known(text, n, pick=lambda c: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0]),
        "the new ids are off by one: merge r gets id 256 + r, the first free id after the 256 bytes": train_known(text, n, first_id=257),
        "the new ids start at 255, which is already the byte 0xff: merge r gets id 256 + r": train_known(text, n, first_id=255),
        "the pairs were counted once, on the bytes: count again after every merge, on the merged ids": {p: 256 + r for r, p in enumerate(once)},
    }


def _train_expected(case):
    from helpers.reference.gpt2 import train_bpe

    return train_bpe(*case)


def _train_error(error):
    if "empty" in error:
        return ": stop early when no pair is left (fewer than two tokens)"
    return None


_TRAIN_SUMMARY = ("train_bpe: short texts, overlapping runs, non-ASCII text, more merges than pairs: the same merges "
                  "and ids as the reference, ties to the pair seen first.", "return a dict {(a, b): new_id}.")
check_train_bpe = Check("check_train_bpe", _probe(TRAIN_CASES, _train_call),
                        _judge(TRAIN_CASES, "train_bpe", _train_expected, train_variants, lambda c: f"{c[0]!r}, {c[1]}", _TRAIN_SUMMARY, _train_error))
check_train_bpe_hidden = Check("check_train_bpe_hidden", _probe(TRAIN_HIDDEN_CASES, _train_call),
                               _judge(TRAIN_HIDDEN_CASES, "train_bpe", _train_expected, train_variants, lambda c: f"{c[0]!r}, {c[1]}", _TRAIN_SUMMARY, _train_error),
                               hidden=True)
