"""Checks for lesson 10's byte-level BPE: count_pairs, merge, train_bpe, encode, decode.

Token ids are plain Python ints in lists; a pair is a tuple (a, b). The probes run the student's
function on inputs of their own and return lists (a dict of pairs travels as [a, b, value]
triples, in the dict's order). ``train_bpe`` and ``encode`` call ``count_pairs`` and ``merge`` by
name: while their probes run, those names mean the known-good versions (``helpers.checks.bpe_known``),
so a mistake in one exercise costs only that exercise. The probes and judges are the engine's
(``helpers.checks.functions``); ``make_checks`` gives it what is BPE's: those helpers, a loop bound,
the plain data and its readings.
"""

from __future__ import annotations

from collections import Counter

from helpers.checks.bpe_known import known_helpers, merge_known, pairs_known, train_known
from helpers.checks.core import describe
from helpers.checks.functions import Spec, function_checks, on_copy
from helpers.reference import gpt2


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
    if isinstance(data, dict) and "pairs" in data:
        return {(a, b): v for a, b, v in data["pairs"]}
    return data.get("ids", data.get("text", data)) if isinstance(data, dict) else data


def _usable(returns):
    """Form: an output the probe could not read as ids, pairs or text fails, saying what to return."""
    def form(what, case, got, run):
        out = run.get("out")
        return f"{what} returned {out['unusable']}; {returns}" if isinstance(out, dict) and "unusable" in out else None

    return form


def _in_order(what, case, got, expected, run):
    """Right: the counts must also come in the reference's order (== ignores a dict's order)."""
    if isinstance(got, dict) and list(got) != list(expected):
        return (f"{what}: the right counts in another order. The dict must list each pair in the order "
                "of its first occurrence: training breaks ties between equal counts by that order. "
                f"Evidence: expected {list(expected)[:6]}, got {list(got)[:6]}.")
    return None


# ---------------------------------------------------------------------------------------------
# count_pairs(ids) -> {(a, b): count}

PAIR_CASES = [[1, 2, 3, 1, 2], [97, 97, 97], [5, 5, 5, 5, 6, 5, 5], [4], [], [7, 8, 9]]
PAIR_HIDDEN_CASES = [[9, 8, 9, 8, 9, 8, 8, 8], [300, 301, 300, 301, 2, 2], [0, 255],
                     [3, 1, 2, 1, 2, 1, 2],  # the commonest pair is not the first: the dict's order is seen
                     # a text's length (the training text is long): its pairs change after its first thousands
                     list(("to be, or not to be " * 110 + "that is the question " * 100).encode())]


def _ids_words(ids) -> str:
    """A case of ids as the message shows it: a long list by its length and start."""
    return repr(ids) if len(ids) <= 12 else f"a list of {len(ids)} ids ({repr(ids[:6])[:-1]}, ...])"


def _copying_call(fn, ids, *rest):
    return on_copy(fn, ids, *rest, plain=_plain)


def pair_variants(ids):
    stride = dict(Counter(zip(ids[::2], ids[1::2])))  # noqa: B905
    once = {p: merge_known(ids, p, -1).count(-1) for p in pairs_known(ids)}  # like str.count
    hop, i = {}, 0
    while i < len(ids) - 1:  # a scan that jumps over a pair of two equal ids
        hop[(ids[i], ids[i + 1])] = hop.get((ids[i], ids[i + 1]), 0) + 1
        i += 2 if ids[i] == ids[i + 1] else 1
    return {
        "overlapping pairs were counted once: in [7, 7, 7] the pair (7, 7) occurs twice, at positions 0 "
        "and 1; count every neighbouring pair (counting is not merging)": once,
        "overlapping pairs were counted once: your scan jumped over the second id of a pair of equal ids, so in [7, 7, 7] "
        "the pair (7, 7) at position 1 was not counted; count every neighbouring pair (counting is not merging)": hop,
        "you stepped through ids two at a time, so only the pairs at even positions were counted": stride,
        "the last pair is missing (loop up to len(ids) - 1)": pairs_known(ids[:-1]),
        "the first pair is missing: start at position 0": pairs_known(ids[1:]),
        "every pair counts 1: count how often each occurs": {p: 1 for p in pairs_known(ids)},
        "you paired tokens two apart (ids[i], ids[i + 2]); neighbours are ids[i], ids[i + 1]": pairs_known(ids, gap=2),
        "only the last pair is in your dict, counted once: is the dict created anew inside the loop? Create it "
        "once, before the loop": {(ids[-2], ids[-1]): 1} if len(ids) > 1 else {},
    }


def _positions(ids, pair):
    at = [i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == pair]
    return f"position{'s' if len(at) > 1 else ''} {', '.join(map(str, at[:4]))}" if at else "no position"


def pairs_reading(ids, got, expected):
    if not isinstance(got, dict):
        return None
    n = sum(v for v in got.values() if isinstance(v, int)) + 1  # a prefix of n ids holds n - 1 pairs
    if 2 <= n < len(ids) and got == pairs_known(ids[:n]):
        return (f"your counts are exactly those of the first {n} of the {len(ids)} ids (ids[:{n}]): no pair after "
                f"position {n - 2} was counted. Is the list cut short (a slice, or a bound kept from trying it out)?")
    if set(got) == set(expected) and len(expected) > 2:
        for words, f in {"0": lambda e: 0, "minus what it should be": lambda e: -e, "one more than it should be": lambda e: e + 1,
                         "one less than it should be": lambda e: e - 1, "twice what it should be": lambda e: 2 * e}.items():
            if all(got[p] == f(e) for p, e in expected.items()):
                if words == "0":  # nothing was ever added: the pairs were found, the counting never ran or never added
                    return ("the pairs are right, but every count is 0: nothing was ever added to a count. Does the "
                            "loop that counts run over the pairs at all (an iterator, such as a zip(...), that an "
                            "earlier pass used up is empty the second time), and does each occurrence add 1 to a "
                            "count that starts at 0 (counts.get(pair, 0) + 1)?")
                return (f"the pairs are right, but every count is {words}: each occurrence must add 1 to a "
                        "count that starts at 0 (counts.get(pair, 0) + 1)")
    if set(got) == set(expected):
        p = next(p for p in expected if got[p] != expected[p])
        return f"the pairs are right, not every count: {p} occurs {expected[p]}× (at {_positions(ids, p)}), yours says {got[p]}"
    extra = [p for p in got if p not in expected]
    missing = [p for p in expected if p not in got]
    if extra and all(a == b for a, b in extra):
        return (f"your pairs include {extra[0]}, an id paired with itself where ids holds no such neighbours: "
                "a pair is (ids[i], ids[i + 1]), an id and the one after it")
    if extra and all((b, a) in expected for a, b in extra):
        return f"your pairs are reversed: {extra[0]} should be {extra[0][::-1]}; a pair is (ids[i], ids[i + 1])"
    if missing:
        return f"the pair {missing[0]} (at {_positions(ids, missing[0])}) is missing from your dict"
    return f"your dict holds {extra[0]}, which is not a pair of neighbours in ids"


def make_checks(name, call, cases, hidden_cases, label, expected_of, variants_of, describe_case, summary, vary=None,
                on_error=None, reading=None, ordered=False):
    """A BPE function's visible check and its hidden twin, on the engine (``helpers.checks.functions``):
    the known-good count_pairs and merge swapped in, a loop bound, outputs as plain data;
    ``on_error(case, error) -> hint or None``;
    ``summary``: what a pass checked, and what to return; ``ordered``: a dict's order counts."""
    spec = Spec(label=label, call=call, expected=expected_of, variants=variants_of, arguments=describe_case,
                summary=summary[0], read=_unplain, around=known_helpers, bounded=True,
                on_error=on_error,
                changed="changed its input list in place: build and return a new list.",
                form=_usable(summary[1]), right=_in_order if ordered else None, reading=reading)
    return function_checks(name, spec, cases, hidden_cases, vary)


def _shifted(case, rng):
    """While grading: every id (the pair's and the new id too) moved by one offset: the same
    repeats and overlaps, other numbers."""
    offset = rng.randint(1, 5000)
    if isinstance(case, list):
        return [i + offset for i in case]
    ids, pair, new_id = case
    return [i + offset for i in ids], tuple(i + offset for i in pair), new_id + offset


def reference(name, unpack=lambda case: (case,)):
    """The reference's answer for a case."""
    def expected(case):
        return getattr(gpt2, name)(*unpack(case))

    return expected


_PAIR_SUMMARY = ("count_pairs: overlapping runs ([97, 97, 97] holds (97, 97) twice), a lone token and an "
                 "empty list: every neighbouring pair counted, input untouched.",
                 "return a dict {(a, b): count}.")
check_count_pairs, check_count_pairs_hidden = make_checks(
    "check_count_pairs", _copying_call, PAIR_CASES, PAIR_HIDDEN_CASES, "count_pairs", reference("count_pairs"), pair_variants, _ids_words,
    _PAIR_SUMMARY, _shifted, reading=pairs_reading, ordered=True)

# ---------------------------------------------------------------------------------------------
# merge(ids, pair, new_id) -> ids with every (non-overlapping) occurrence replaced, from the left

MERGE_CASES = [([1, 2, 3, 1, 2], (1, 2), 9), ([97, 97, 97], (97, 97), 256), ([5, 5, 5, 5], (5, 5), 7), ([3, 1, 2, 4], (2, 3), 8),
               ([11, 2, 1, 2], (1, 2), 7)]  # ids of two digits: "1 2" is also inside "11 2"
MERGE_HIDDEN_CASES = [([6, 6, 6, 6, 6], (6, 6), 300), ([1, 2], (1, 2), 257), ([2, 1, 2, 1, 1], (1, 2), 11), ([], (1, 2), 3)]


def merge_variants(case):
    ids, pair, new_id = case
    no_skip = [new_id if i + 1 < len(ids) and (x, ids[i + 1]) == pair else x for i, x in enumerate(ids)]
    whole, short = merge_known(ids, pair, new_id), merge_known(ids[:-1], pair, new_id)
    tail_lost = short if short + ids[-1:] == whole else whole  # a scan that stops one short: a last id alone is lost
    at = next((i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == pair), None)
    first = list(ids) if at is None else ids[:at] + [new_id] + ids[at + 2:]
    right = merge_known(ids[::-1], pair[::-1], new_id)[::-1]
    return {
        "after a merge the scan must skip both tokens of the pair (i += 2): your version also kept the "
        "second token, or merged overlapping pairs": no_skip,
        "the last token is lost when it is not part of a merge: append what is left after the loop": tail_lost,
        "only the first occurrence was merged: replace every occurrence": first,
        "you merged from the right: scan from the left, so [7, 7, 7] becomes [new, 7]": right,
        f"the pair was matched the other way round, {tuple(pair[::-1])}: compare ids[i] with pair[0] and ids[i + 1] "
        "with pair[1]": merge_known(ids, tuple(pair[::-1]), new_id),
    }


def merge_reading(case, got, expected):
    ids, pair, new_id = case
    if not isinstance(got, list):
        return None
    if got == list(ids):
        large = (" `is` compares identity, not value: equal ints above 256 are often different objects, so ids[i] is "
                 "pair[0] fails for them, use ==;") if max(pair) > 256 else ""
        return (f"nothing was merged: your output is ids unchanged, though {pair} occurs at {_positions(ids, pair)}. "
                "Does your comparison ever hold? (a list slice never equals a tuple, [1, 2] == (1, 2) is False;"
                f"{large} and ids[i], ids[i + 1] must be compared with pair[0], pair[1] in that order)")
    if got == [x for x in expected if x != new_id]:
        return f"each occurrence of {pair} was removed instead of replaced: append new_id ({new_id}) where the pair was"
    if got == [x for x in expected if x == new_id]:
        return f"only the new ids are in your output: the ids outside the pair ({[x for x in expected if x != new_id][:6]}) must be appended too"
    left = [i for i in range(len(got) - 1) if (got[i], got[i + 1]) == tuple(pair)]
    if left:
        return f"your output still holds {pair} at position {left[0]}: every occurrence must be replaced"
    where = [i for i, x in enumerate(expected) if x == new_id]
    other = {got[i] for i in where if i < len(got)}
    if len(got) == len(expected) and len(other) == 1 and (used := other.pop()) != new_id \
            and got == merge_known(list(ids), pair, used):
        return (f"every merge is in the right place, but with the id {used} where the call asked for new_id = {new_id}: "
                f"your output is what merge gives with new_id = {used}. Is the new id a number written into the "
                "code instead of the new_id argument?")
    return None


_MERGE_SUMMARY = ("merge: every occurrence replaced from the left, overlapping runs ([97, 97, 97] -> [256, 97]), "
                  "a pair at the very end, a pair that does not occur; input untouched.", "return a list of ints.")
check_merge, check_merge_hidden = make_checks(
    "check_merge", lambda fn, case: _copying_call(fn, *case), MERGE_CASES, MERGE_HIDDEN_CASES, "merge",
    reference("merge", lambda c: (list(c[0]), c[1], c[2])), merge_variants,
    lambda c: ", ".join(map(repr, c)), _MERGE_SUMMARY, _shifted, reading=merge_reading)

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
        "the dict records merge r under 256 + r, but the ids are merged with 256 every time: the id written into "
        "the ids must be the one recorded, merge(ids, pair, 256 + r)": train_known(text, n, merged_as=lambda r: 256),
        "the pairs were counted once, on the bytes: count again after every merge, on the merged ids": {p: 256 + r for r, p in enumerate(once)},
        "the same pair won every round: each round must count the pairs of the ids as merged so far (were the ids "
        "not updated after a merge, ids = merge(ids, pair, new_id), or the pairs counted once before the loop?)": {once[0]: 255 + n} if once else {},
        "you took the largest pair (max(counts) compares the pairs themselves), not the most frequent: max(counts, key=counts.get)": train_known(text, n, pick=max),
    }


def train_reading(case, got, expected):
    """The first merge that departs, and the counts of the ids at that step (the merges before it match)."""
    if not isinstance(got, dict):
        return None
    ids = list(case[0].encode("utf-8"))
    mine, learnt = list(got.items()), set(ids)
    if len(mine) > 1 and len({new_id for _, new_id in mine}) == 1:
        return (f"every one of your {len(mine)} merges got the same id, {mine[0][1]}: merge r gets its own id, 256 + r. "
                "Does the counter of new ids advance after each merge?")
    for rank, (pair, new_id) in enumerate(expected.items()):
        counts = pairs_known(ids)
        if rank >= len(mine):
            return (f"you learnt {len(mine)} merges where {len(expected)} were possible: after merge {rank - 1} the ids still "
                    f"hold pairs, the most frequent {pair} ({counts[pair]} times)")
        (a, b), theirs = mine[rank]
        at = f"merge {rank} ({'merge 0 matches' if rank == 1 else f'merges 0 to {rank - 1} match'})" if rank else "merge 0"
        if (a, b) != pair:
            stray = [x for x in (a, b) if x not in learnt]
            if stray and not rank:
                return (f"merge 0 is ({a}, {b}), but {stray[0]} is not among the text's UTF-8 bytes: start from "
                        "list(text.encode('utf-8'))")
            if stray:
                return (f"{at} is ({a}, {b}), and {stray[0]} is neither a UTF-8 byte of this text nor an id learnt before "
                        "it: the ids must be the text's bytes with each learnt merge applied, under the id stored for it")
            m, want = counts.get((a, b), 0), counts[pair]
            if m == want:
                return (f"{at}: {pair} and your ({a}, {b}) both occur {m} times, a tie that goes to the pair that occurs "
                        f"first ({pair} at {_positions(ids, pair)}, yours at {_positions(ids, (a, b))})")
            return (f"{at} should be {pair}, the most frequent pair of the ids at that step ({want} times); yours, ({a}, {b}), "
                    f"occurs {m} times there")
        if theirs != new_id:
            return f"{at} took the right pair {pair} but gave it the id {theirs}: merge r gets 256 + r = {new_id}"
        ids = merge_known(ids, pair, new_id)
        learnt.add(new_id)
    return f"you learnt {len(mine)} merges; the text has no pair left after {len(expected)} (stop when no pair is left)"


_TRAIN_SUMMARY = ("train_bpe: short texts, overlapping runs, non-ASCII text, more merges than pairs: the same merges "
                  "and ids as the reference, ties to the pair seen first.", "return a dict {(a, b): new_id}.")
check_train_bpe, check_train_bpe_hidden = make_checks(
    "check_train_bpe", _train_call, TRAIN_CASES, TRAIN_HIDDEN_CASES, "train_bpe", reference("train_bpe", tuple), train_variants,
    lambda c: f"{c[0]!r}, {c[1]}", _TRAIN_SUMMARY, reading=train_reading,
    on_error=lambda case, error: "When no pair is left (fewer than two tokens), stop early: there is nothing to merge." if "empty" in error else None)
