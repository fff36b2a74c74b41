"""Checks for lesson 01 (tokens and embeddings): encode/decode, the next-token shift, and a
parameter count by formula.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), V vocabulary size (n_vocab).
Batched inputs use a B different from T, so that slicing the wrong dimension shows.

"""

from __future__ import annotations

import re

import torch
from torch import nn

from helpers.checks.core import Check, CheckFailed, describe, first_mismatch
from helpers.checks.diagnose import diagnose
from helpers.checks.errors import attempt, fail_if_raised, runs
from helpers.params import num_parameters
from helpers.reference import tokens as ref

VOCAB = 256


def checks(name: str, probe, judge, visible, hidden) -> tuple[Check, Check]:
    """The visible check ``name`` and its hidden twin ``name_hidden``, on their own cases."""
    return (Check(name, probe(*visible), judge(*visible)),
            Check(f"{name}_hidden", probe(*hidden), judge(*hidden), hidden=True))


def _expect_callable(obj, name: str) -> None:
    if not callable(obj):
        raise CheckFailed(f"expected the function {name}, got {describe(obj)}")


def _show(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "…"


def _spelled(ids: list[int]) -> str:
    return "".join(chr(i) if 0 <= i < 0x110000 else "�" for i in ids)


# ---------------------------------------------------------------------------------------------
# encode(text) -> (T,) long tensor of code points; ValueError for code points >= 256

# texts encode must accept (accents and the last valid id, 255, included)
ENCODE_OK = ["Transformed.", "naïve café, 3×4 = 12, ÿ"]
# texts encode must refuse: one character outside the vocabulary each (256 is one past the end)
ENCODE_BAD = ["snow ☃ man", "Ā"]
ENCODE_OK_HIDDEN = ["", "tab\tand\nnewline", "\x00ÿ\x7f", "   "]
ENCODE_BAD_HIDDEN = ["5 €", "hi 🙂!", "ok" * 20 + "Ω"]


def _probe_encode(ok_texts, bad_texts):
    def probe(encode) -> dict:
        _expect_callable(encode, "encode")
        return {key: [attempt(encode, text, sizes={"T": len(text)}) for text in texts]
                for key, texts in (("ok", ok_texts), ("bad", bad_texts))}

    return probe


def _offender(text: str) -> tuple[int, str]:
    """The position and character of the first code point outside the vocabulary."""
    return next((position, ch) for position, ch in enumerate(text) if ord(ch) >= VOCAB)


def _names(message: str, ch: str) -> bool:
    """Does an error message say which character it is about (the character or its code point)?"""
    code = ord(ch)
    low = message.lower()
    return ch in message or str(code) in message or f"{code:x}" in low or repr(ch)[1:-1] in message


def _names_position(message: str, position: int) -> bool:
    """Does it say where (the position as a number of its own, counted from 0 or from 1)?"""
    return any(re.search(rf"(?<![\d.]){p}(?![\d.])", message) for p in (position, position + 1))


def _judge_encode_ok(text: str, run: dict) -> None:
    what = f"encode({_show(text)})"
    expected = ref.encode(text)  # (T,)
    if "ÿ" in text and run.get("raised") == "ValueError":
        raise CheckFailed(
            f"{what} raised ValueError ({run['message']!r}), but 'ÿ' is code point 255, the last "
            "valid id: ids run from 0 to 255, so refuse a code point only when it is >= 256."
        )
    fail_if_raised(what, run)
    out = run.get("out")
    if isinstance(out, list):
        raise CheckFailed(
            f"{what} returned a Python list; return a tensor: torch.tensor(..., dtype=torch.long)."
        )
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"{what} should return a (T,) torch.long tensor, got {describe(out)}.")
    if out.dtype.is_floating_point:
        empty = " (torch.tensor([]) is float32 unless you pass dtype=torch.long)" if not text else ""
        raise CheckFailed(
            f"{what} returned a {out.dtype} tensor{empty}. Ids are integers: embedding tables only "
            "accept integer ids. Build it with torch.tensor(..., dtype=torch.long); "
            "torch.Tensor(...) with a capital T always makes floats."
        )
    if out.dtype != torch.long:
        raise CheckFailed(f"{what} returned a {out.dtype} tensor; use torch.long (int64).")
    utf8 = list(text.encode("utf-8"))
    if out.ndim == 1 and out.numel() == len(utf8) != len(text) and out.tolist() == utf8:
        raise CheckFailed(
            f"{what} returned the {len(utf8)} UTF-8 bytes of the text, not its {len(text)} code points: "
            f"'é' is one code point, 233, but two UTF-8 bytes. Use ord(ch) for every character."
        )
    if tuple(out.shape) != (len(text),):
        spelled = f" (they spell {_show(_spelled(out.reshape(-1).tolist()))})" if out.numel() < 1000 else ""
        raise CheckFailed(
            f"{what} should return shape ({len(text)},), one id per character, got "
            f"{tuple(out.shape)}{spelled}."
        )
    if not torch.equal(out, expected):
        _, message = diagnose(expected, out, what=f"{what} returned ids that spell {_show(_spelled(out.tolist()))}",
                              atol=0, rtol=0, axes=("T",), sizes={"T": len(text)}, dtype=torch.long)
        raise CheckFailed(f"{message} Each id must be ord(ch) of its character, in the text's order.")


def _judge_encode_bad(text: str, run: dict) -> None:
    position, ch = _offender(text)
    code = ord(ch)
    what = f"encode({_show(text)})"
    if "raised" not in run:
        out = run.get("out")
        got = describe(out)
        detail = ""
        if isinstance(out, torch.Tensor) and out.ndim == 1 and out.numel() == len(text):
            value = int(out[position].item()) if not out.dtype.is_floating_point else out[position].item()
            got = f"ids with {value} at position {position}"
            if value == code % VOCAB and code > VOCAB:
                detail = " You wrapped the code point around (% 256): that silently turns it into another character."
            elif value == code:
                detail = " The code point went through unchecked."
        if code == VOCAB:
            detail += (" 256 is one past the last valid id (255): refuse code points >= 256, "
                       "not only those > 256.")
        raise CheckFailed(
            f"{what} should raise ValueError: {ch!r} at position {position} is code point {code}, "
            f"and the vocabulary only has ids 0 to {VOCAB - 1}. It returned {got}.{detail}"
        )
    kind, message = run["raised"], run.get("message", "")
    if run.get("value_error") is not True:
        extra = ""
        if kind == "AssertionError":
            extra = " An assert is for bugs in your own code (and disappears under python -O); a bad input deserves a ValueError."
        elif kind == "IndexError":
            extra = " Check the code point yourself, before anything looks it up."
        raise CheckFailed(
            f"{what} raised {kind} ({message!r}); raise ValueError for a character outside the "
            f"vocabulary.{extra}"
        )
    if not _names(message, ch):
        raise CheckFailed(
            f"{what} raised ValueError({message!r}), which does not say which character is the "
            f"problem. Name it: {ch!r} (code point {code}) at position {position}."
        )
    if not _names_position(message, position):
        raise CheckFailed(
            f"{what} raised ValueError({message!r}), which names the character but not its position: "
            f"say where it is in the text (position {position}), so that it can be found in a long text."
        )


def _judge_encode(ok_texts, bad_texts):
    def judge(data: dict) -> str:
        for text, run in zip(ok_texts, runs(data, len(ok_texts), "ok"), strict=True):
            _judge_encode_ok(text, run)
        for text, run in zip(bad_texts, runs(data, len(bad_texts), "bad"), strict=True):
            _judge_encode_bad(text, run)
        accepted = ", ".join(_show(t) for t in ok_texts)
        refused = ", ".join(_show(t) for t in bad_texts)
        return (
            f"encode: {accepted} give one torch.long code point per character; "
            f"{refused} raise a ValueError that names the character and its position."
        )

    return judge


check_encode, check_encode_hidden = checks(
    "check_encode", _probe_encode, _judge_encode, (ENCODE_OK, ENCODE_BAD), (ENCODE_OK_HIDDEN, ENCODE_BAD_HIDDEN)
)

# ---------------------------------------------------------------------------------------------
# decode(ids) -> str

DECODE_TEXTS = ["Transformed.", "naïve café, 3×4 = 12, ÿ"]
DECODE_TEXTS_HIDDEN = ["", "tab\tand\nnewline", "\x00ÿ\x7f", "".join(chr(i) for i in range(32, 127))]


def _probe_decode(texts):
    def probe(decode) -> dict:
        _expect_callable(decode, "decode")
        ids = [torch.tensor([ord(ch) for ch in text], dtype=torch.long) for text in texts]  # (T,) each
        return {"runs": [attempt(decode, x, sizes={"T": len(x)}) for x in ids]}

    return probe


def _judge_decode(texts):
    def judge(data: dict) -> str:
        for text, run in zip(texts, runs(data, len(texts)), strict=True):
            ids = [ord(ch) for ch in text]
            text = ref.decode(torch.tensor(ids, dtype=torch.long))  # the reference is the last word
            what = f"decode(ids of {_show(text)})"
            kind, message = run.get("raised"), run.get("message", "")
            if kind == "UnicodeDecodeError" or "utf-8" in message.lower():
                raise CheckFailed(
                    f"{what} raised {kind} ({message!r}): the ids are code points, not UTF-8 bytes. "
                    "Turn each id into its character with chr."
                )
            if kind and ("single element" in message or "only integer" in message or "scalar" in message):
                raise CheckFailed(
                    f"{what} raised {kind} ({message!r}): chr takes one number. Call it on each "
                    "id (ids.tolist() gives them as Python ints), then join the characters."
                )
            fail_if_raised(what, run)
            out = run.get("out")
            if isinstance(out, list) and all(isinstance(c, str) for c in out):
                raise CheckFailed(
                    f"{what} returned a list of {len(out)} strings; join them into one string with \"\".join(...)."
                )
            if not isinstance(out, str):
                raise CheckFailed(f"{what} should return a str, got {describe(out)}.")
            if out == text:
                continue
            if out == "".join(str(i) for i in ids):
                raise CheckFailed(
                    f"{what} returned {_show(out)}: str(id) writes the number's digits; chr(id) gives the character."
                )
            if out.startswith("tensor(") or out.startswith("["):
                raise CheckFailed(
                    f"{what} returned {_show(out)}, the printed tensor; turn each id into a character with chr."
                )
            if len(out) != len(text):
                raise CheckFailed(
                    f"{what} should return {len(text)} characters, one per id, got {len(out)}: {_show(out)}."
                )
            i = next(k for k, (a, b) in enumerate(zip(text, out, strict=True)) if a != b)
            how = " (the text reversed)" if out == text[::-1] else ""
            raise CheckFailed(
                f"{what} returned {_show(out)}{how}; first difference at index {i}: expected {text[i]!r} "
                f"(chr({ids[i]})), got {out[i]!r}."
            )
        return f"decode: the ids of {', '.join(_show(t) for t in texts)} give the text back."

    return judge


check_decode, check_decode_hidden = checks(
    "check_decode", _probe_decode, _judge_decode, (DECODE_TEXTS,), (DECODE_TEXTS_HIDDEN,)
)

# ---------------------------------------------------------------------------------------------
# shift_for_next_token(ids) -> (inputs, targets)

# (seed, batch shape, T): one sequence, then a batch whose B differs from T
SHIFT_CASES = [(20, (), 9), (21, (3,), 7)]
SHIFT_HIDDEN_CASES = [(22, (), 2), (23, (5,), 11), (24, (2,), 3)]


def _shift_ids(seed: int, batch: tuple, T: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (*batch, 1), generator=g)
    steps = torch.randint(1, VOCAB, (*batch, T - 1), generator=g)  # never 0: neighbours differ
    return torch.cat([start, start + steps.cumsum(dim=-1)], dim=-1) % VOCAB  # (*batch, T)


def _shift_sizes(batch: tuple, T: int) -> dict[str, int]:
    """The sizes of the outputs: T is one less than the ids' length."""
    return {**({"B": batch[0]} if batch else {}), "T": T - 1}


def _probe_shift(cases):
    def probe(shift) -> dict:
        _expect_callable(shift, "shift_for_next_token")
        found = []
        for seed, batch, T in cases:
            ids = _shift_ids(seed, batch, T)
            before = ids.clone()
            run = attempt(shift, ids, sizes=_shift_sizes(batch, T))
            run["ids_changed"] = not torch.equal(before, ids)
            if isinstance(run.get("out"), tuple):
                run["out"] = list(run["out"])
            found.append(run)
        return {"runs": found}

    return probe


def shift_variants(ids: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) under each classic mistake."""
    return {
        "inputs and targets are swapped: return (inputs, targets), inputs first, and the targets "
        "are the ids that come *after* the inputs": (ids[..., 1:], ids[..., :-1]),
        "the targets equal the inputs: a model trained on that would learn to copy its input; "
        "the targets must be the ids one step later": (ids[..., :-1], ids[..., :-1]),
        "you used torch.roll: the last target wraps around to the first id, which does not follow "
        "the last one. Drop the last input and the first target instead": (ids, torch.roll(ids, -1, dims=-1)),
        "you shifted by two positions": (ids[..., :-2], ids[..., 2:]),
        "the targets are the inputs plus one: the target is the id of the next token *in the text*, "
        "ids[..., t + 1], not the next number": (ids[..., :-1], ids[..., :-1] + 1),
    }


def _judge_shift(cases):
    def judge(data: dict) -> str:
        for (seed, batch, T), run in zip(cases, runs(data, len(cases)), strict=True):
            ids = _shift_ids(seed, batch, T)
            what = f"shift_for_next_token(ids of shape {tuple(ids.shape)})"
            fail_if_raised(what, run)
            if run.get("ids_changed") is not False:
                raise CheckFailed(f"{what} changed ids in place; leave the input alone.")
            out = run.get("out")
            if not isinstance(out, list) or len(out) != 2:
                raise CheckFailed(f"{what} should return a pair (inputs, targets), got {describe(out)}.")
            got_in, got_tg = out
            if not isinstance(got_in, torch.Tensor) or not isinstance(got_tg, torch.Tensor):
                raise CheckFailed(
                    f"{what} should return two tensors, got {describe(got_in)} and {describe(got_tg)}."
                )
            exp_in, exp_tg = ref.shift_for_next_token(ids)
            shape = (*batch, T - 1)
            for label, (v_in, v_tg) in shift_variants(ids).items():
                if got_in.shape == got_tg.shape and (v_in.shape, v_tg.shape) == (got_in.shape, got_tg.shape) \
                        and torch.equal(v_in, got_in) and torch.equal(v_tg, got_tg):
                    if got_tg.shape == exp_tg.shape:
                        evidence = f"targets: {first_mismatch(exp_tg, got_tg, 0, 0)}"
                    else:
                        evidence = f"targets of shape {tuple(got_tg.shape)}, expected {tuple(exp_tg.shape)}"
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            if batch and got_in.shape == (batch[0] - 1, T) and torch.equal(got_in, ids[:-1]):
                raise CheckFailed(
                    f"{what}: inputs have shape {tuple(got_in.shape)}: you cut the batch dimension (the "
                    f"first), not time (the last). Slice the last dimension: ids[..., a:b] works for "
                    "(T,) and (B, T) alike."
                )
            for name, got, expected in (("inputs", got_in, exp_in), ("targets", got_tg, exp_tg)):
                if got.shape[:-1] == shape[:-1] and got.ndim == len(shape) and got.shape[-1] != shape[-1]:
                    raise CheckFailed(
                        f"{what}: {name} should have shape {shape} (one fewer position than ids), "
                        f"got {tuple(got.shape)}."
                    )
                if got.dtype != ids.dtype:
                    raise CheckFailed(f"{what}: {name} are {got.dtype}; keep the ids' dtype {ids.dtype}.")
                if tuple(got.shape) != shape or not torch.equal(got, expected):
                    rule, message = diagnose(expected, got, what=f"{what}: the {name}", atol=0, rtol=0,
                                             axes=("B", "T")[-len(shape):], sizes=_shift_sizes(batch, T))
                    hint = " (targets[..., t] must be ids[..., t + 1])" if name == "targets" else ""
                    raise CheckFailed(f"{message}{hint}")
        shapes = ", ".join(str((*c[1], c[2])) for c in cases)
        return f"shift_for_next_token: ids of shape {shapes} give inputs ids[..., :-1] and targets ids[..., 1:]."

    return judge


check_shift, check_shift_hidden = checks(
    "check_shift", _probe_shift, _judge_shift, (SHIFT_CASES,), (SHIFT_HIDDEN_CASES,)
)

# ---------------------------------------------------------------------------------------------
# embedding_and_head_parameters(n_vocab, emb_dim, tie_weights, head_bias) -> int

# (n_vocab, emb_dim, tie_weights, head_bias)
COUNT_CASES = [(256, 5, t, b) for t in (True, False) for b in (False, True)] + [(100, 7, True, True), (100, 7, False, False)]
COUNT_HIDDEN_CASES = [(50257, 768, True, False), (50257, 768, False, True), (3, 11, False, True), (1, 1, True, True),
                      (65, 384, False, False)]
# small sizes at which every flag setting is also counted, to read the student's formula off
FLAGS = [(t, b) for t in (True, False) for b in (False, True)]
GRID = [(11, 3), (13, 3), (11, 4), (13, 4)]  # (V, C)


def _probe_count(cases):
    def probe(count) -> dict:
        _expect_callable(count, "embedding_and_head_parameters")
        grid = [attempt(count, V, C, t, b).get("out") for t, b in FLAGS for V, C in GRID]
        return {"runs": [attempt(count, *case) for case in cases], "grid": [g if type(g) is int else None for g in grid]}

    return probe


def real_count(n_vocab: int, emb_dim: int, tie_weights: bool, head_bias: bool) -> int:
    """num_parameters of the real modules. Large ones go on the meta device (no memory); small ones
    stay on the CPU, because the meta device imports torch._dynamo, which takes seconds."""
    device = "meta" if n_vocab * emb_dim > 1_000_000 else "cpu"
    pair = nn.ModuleDict({
        "embedding": nn.Embedding(n_vocab, emb_dim, device=device),
        "head": nn.Linear(emb_dim, n_vocab, bias=head_bias, device=device),
    })
    if tie_weights:
        pair["head"].weight = pair["embedding"].weight
    return num_parameters(pair)


COUNT_VARIANTS = {
    "a tied weight is counted twice: when the head reuses the table there is one (V, C) tensor, "
    "and a shared tensor counts once": lambda V, C, t, b: 2 * V * C + b * V,
    "the head's bias is counted with emb_dim entries; a bias has one entry per output, and the head "
    "outputs n_vocab scores": lambda V, C, t, b: V * C * (1 if t else 2) + b * C,
    "the head's bias is missing from the count": lambda V, C, t, b: V * C * (1 if t else 2),
    "tie_weights=False is counted like a tied head: an untied head has its own (V, C) weight": lambda V, C, t, b: V * C + b * V,
    "tying is counted as if it removed the bias too; tying shares only the weight": lambda V, C, t, b: V * C * (1 if t else 2) + (0 if t else b * V),
    "tie_weights is read backwards (tied counted twice, untied once)": lambda V, C, t, b: V * C * (2 if t else 1) + b * V,
}


def _formula(values: list) -> tuple[int, int, int, int] | None:
    """(a, p, q, r) with count = a·V·C + p·V + q·C + r at the four GRID points, when whole numbers."""
    if any(v is None for v in values):
        return None
    (v1, v2, v3, v4), (V1, V2), (C1, C2) = values, (11, 13), (3, 4)
    a = (v4 - v3 - v2 + v1) / ((V2 - V1) * (C2 - C1))
    p = (v2 - v1) / (V2 - V1) - a * C1
    q = (v3 - v1) / (C2 - C1) - a * V1
    r = v1 - a * V1 * C1 - p * V1 - q * C1
    if not all(float(x).is_integer() for x in (a, p, q, r)):
        return None
    return int(a), int(p), int(q), int(r)


def _say(a: int, p: int, q: int, r: int) -> str:
    terms = [(a, "V·C"), (p, "V"), (q, "C"), (r, "")]
    text = " + ".join(f"{k if k != 1 or not s else ''}{s}" if s else str(k) for k, s in terms if k)
    return (text or "0").replace("+ -", "- ")


def _count_cause(grid: list) -> str | None:
    """The student's count read as a formula of V and C for each flag setting, and what differs."""
    if not isinstance(grid, list) or len(grid) != len(FLAGS) * len(GRID):
        return None
    for k, (t, b) in enumerate(FLAGS):
        got = _formula(grid[4 * k: 4 * k + 4])
        want = (1 if t else 2, int(b), 0, 0)
        if got is None or got == want:
            continue
        a, p, q, r = got
        if (a, p, q, r) == (want[0] - 1, want[1] + 1, 1, 0):
            return (f"with tie_weights={t}, head_bias={b} your count is {_say(*got)}: a (V, C) table has V·C "
                    "entries, a product, not V + C")
        why = []
        if a != want[0]:
            n = abs(a - want[0])
            why.append(f"{n} (V, C) matri{'ces' if n > 1 else 'x'} too {'many' if a > want[0] else 'few'}")
        if p != want[1]:
            why.append("a bias of V entries although head_bias=False" if not b else "the bias's V entries "
                       "are missing" if not p else f"{_say(0, p, 0, 0)} where the bias has V (one per output score)")
        if q:
            why.append(f"{_say(0, 0, q, 0)} too many: nothing has C entries alone (the bias has one per "
                       "output, V; a table has exactly V rows)")
        if r:
            why.append(f"a constant {r} that no module has")
        return (f"with tie_weights={t}, head_bias={b} your count is {_say(*got)}, but the modules have "
                f"{_say(*want)}: {'; '.join(why)}")
    return None


def _judge_count(cases):
    def judge(data: dict) -> str:
        got = []
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            what = "embedding_and_head_parameters({}, {}, tie_weights={}, head_bias={})".format(*case)
            fail_if_raised(what, run)
            out = run.get("out")
            if isinstance(out, bool) or not isinstance(out, int):
                hint = ""
                if isinstance(out, float) and out == int(out):
                    hint = " (a float: use // or int arithmetic only)"
                elif isinstance(out, torch.Tensor):
                    hint = " (a tensor: compute with Python ints from the sizes)"
                raise CheckFailed(f"{what} should return an int, got {describe(out)}{hint}.")
            got.append(out)
        expected = [real_count(*case) for case in cases]
        if got != expected:
            label = next(
                (name for name, formula in COUNT_VARIANTS.items() if got == [formula(*case) for case in cases]),
                None,
            ) or _count_cause(data.get("grid"))
            k = next(i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
            V, C, t, b = cases[k]
            evidence = (
                f"embedding_and_head_parameters({V}, {C}, tie_weights={t}, head_bias={b}) returned {got[k]:,}, "
                f"but num_parameters of nn.Embedding({V}, {C}) + nn.Linear({C}, {V}, bias={b})"
                f"{' with the weight tied' if t else ''} is {expected[k]:,}"
            )
            raise CheckFailed(f"{label}. Evidence: {evidence}." if label else f"{evidence}.")
        sizes = ", ".join(f"V={V} C={C} {'tied' if t else 'untied'}{' +bias' if b else ''}" for V, C, t, b in cases)
        return f"embedding_and_head_parameters matches num_parameters of real modules: {sizes}."

    return judge


check_parameter_count, check_parameter_count_hidden = checks(
    "check_parameter_count", _probe_count, _judge_count, (COUNT_CASES,), (COUNT_HIDDEN_CASES,)
)
