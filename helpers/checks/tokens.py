"""Checks for lesson 01 (tokens and embeddings): encode/decode, the next-token shift, and a
parameter count by formula.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), V vocabulary size (n_vocab).
Batched inputs use a B different from T, so that slicing the wrong dimension shows.
"""

from __future__ import annotations

import torch
from torch import nn

from helpers.checks.core import Check, CheckFailed, describe, first_mismatch
from helpers.params import num_parameters
from helpers.reference import tokens as ref

VOCAB = 256


def _attempt(fn, *args) -> dict:
    """Call the student's ``fn``; an exception becomes data (the judge names the likely cause).
    ``NotImplementedError`` passes through: the exercise is not answered yet."""
    try:
        return {"out": fn(*args)}
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - any error of the student's code is data here
        return {
            "raised": type(exc).__name__,
            "message": str(exc)[:500],
            "value_error": isinstance(exc, ValueError),
        }


def _expect_callable(obj, name: str) -> None:
    if not callable(obj):
        raise CheckFailed(f"expected the function {name}, got {describe(obj)}")


def _runs(data: dict, n: int) -> list:
    runs = data.get("runs")
    if not isinstance(runs, list) or len(runs) != n or not all(isinstance(r, dict) for r in runs):
        raise CheckFailed("the check's data is incomplete")
    return runs


def _show(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "…"


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
        return {
            "ok": [_attempt(encode, text) for text in ok_texts],
            "bad": [_attempt(encode, text) for text in bad_texts],
        }

    return probe


def _offender(text: str) -> tuple[int, str]:
    """The position and character of the first code point outside the vocabulary."""
    for position, ch in enumerate(text):
        if ord(ch) >= VOCAB:
            return position, ch
    raise ValueError(f"{text!r} has no character outside the vocabulary")


def _names(message: str, ch: str) -> bool:
    """Does an error message say which character it is about (the character or its code point)?"""
    code = ord(ch)
    low = message.lower()
    return ch in message or str(code) in message or f"{code:x}" in low or repr(ch)[1:-1] in message


def _judge_encode_ok(text: str, run: dict) -> None:
    what = f"encode({_show(text)})"
    expected = ref.encode(text)  # (T,)
    if "raised" in run:
        if "ÿ" in text and run["raised"] == "ValueError":
            raise CheckFailed(
                f"{what} raised ValueError ({run['message']!r}), but 'ÿ' is code point 255, the last "
                "valid id: ids run from 0 to 255, so refuse a code point only when it is >= 256."
            )
        raise CheckFailed(f"{what} raised {run['raised']}: {run['message']}")
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
        raise CheckFailed(
            f"{what} should return shape ({len(text)},), one id per character, got {tuple(out.shape)}."
        )
    if not torch.equal(out, expected):
        raise CheckFailed(f"{what} gave wrong ids: {first_mismatch(expected, out, 0, 0)}.")


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


def _judge_encode(ok_texts, bad_texts):
    def judge(data: dict) -> str:
        ok = data.get("ok")
        bad = data.get("bad")
        if not isinstance(ok, list) or len(ok) != len(ok_texts) or not isinstance(bad, list) or len(bad) != len(bad_texts):
            raise CheckFailed("the check's data is incomplete")
        for text, run in zip(ok_texts, ok, strict=True):
            _judge_encode_ok(text, run if isinstance(run, dict) else {})
        for text, run in zip(bad_texts, bad, strict=True):
            _judge_encode_bad(text, run if isinstance(run, dict) else {})
        accepted = ", ".join(_show(t) for t in ok_texts)
        refused = ", ".join(_show(t) for t in bad_texts)
        return (
            f"encode: {accepted} give one torch.long code point per character; "
            f"{refused} raise a ValueError that names the character."
        )

    return judge


check_encode = Check("check_encode", _probe_encode(ENCODE_OK, ENCODE_BAD), _judge_encode(ENCODE_OK, ENCODE_BAD))
check_encode_hidden = Check(
    "check_encode_hidden",
    _probe_encode(ENCODE_OK_HIDDEN, ENCODE_BAD_HIDDEN),
    _judge_encode(ENCODE_OK_HIDDEN, ENCODE_BAD_HIDDEN),
    hidden=True,
)

# ---------------------------------------------------------------------------------------------
# decode(ids) -> str

DECODE_TEXTS = ["Transformed.", "naïve café, 3×4 = 12, ÿ"]
DECODE_TEXTS_HIDDEN = ["", "tab\tand\nnewline", "\x00ÿ\x7f", "".join(chr(i) for i in range(32, 127))]


def _probe_decode(texts):
    def probe(decode) -> dict:
        _expect_callable(decode, "decode")
        runs = []
        for text in texts:
            ids = torch.tensor([ord(ch) for ch in text], dtype=torch.long)  # (T,)
            runs.append(_attempt(decode, ids))
        return {"runs": runs}

    return probe


def _judge_decode(texts):
    def judge(data: dict) -> str:
        for text, run in zip(texts, _runs(data, len(texts)), strict=True):
            ids = [ord(ch) for ch in text]
            text = ref.decode(torch.tensor(ids, dtype=torch.long))  # the reference is the last word
            what = f"decode(ids of {_show(text)})"
            if "raised" in run:
                kind, message = run["raised"], run.get("message", "")
                if kind == "UnicodeDecodeError" or "utf-8" in message.lower():
                    raise CheckFailed(
                        f"{what} raised {kind} ({message!r}): the ids are code points, not UTF-8 bytes. "
                        "Turn each id into its character with chr."
                    )
                if "single element" in message or "only integer" in message or "scalar" in message:
                    raise CheckFailed(
                        f"{what} raised {kind} ({message!r}): chr takes one number. Call it on each "
                        "id (ids.tolist() gives them as Python ints), then join the characters."
                    )
                raise CheckFailed(f"{what} raised {kind}: {message}")
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
            raise CheckFailed(
                f"{what} returned {_show(out)}; first difference at index {i}: expected {text[i]!r}, got {out[i]!r}."
            )
        return f"decode: the ids of {', '.join(_show(t) for t in texts)} give the text back."

    return judge


check_decode = Check("check_decode", _probe_decode(DECODE_TEXTS), _judge_decode(DECODE_TEXTS))
check_decode_hidden = Check(
    "check_decode_hidden", _probe_decode(DECODE_TEXTS_HIDDEN), _judge_decode(DECODE_TEXTS_HIDDEN), hidden=True
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


def _probe_shift(cases):
    def probe(shift) -> dict:
        _expect_callable(shift, "shift_for_next_token")
        runs = []
        for case in cases:
            ids = _shift_ids(*case)
            before = ids.clone()
            run = _attempt(shift, ids)
            run["ids_changed"] = not torch.equal(before, ids)
            if "out" in run and isinstance(run["out"], tuple):
                run["out"] = list(run["out"])
            runs.append(run)
        return {"runs": runs}

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
    }


def _judge_shift(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, _runs(data, len(cases)), strict=True):
            ids = _shift_ids(*case)
            batch, T = case[1], case[2]
            what = f"shift_for_next_token(ids of shape {tuple(ids.shape)})"
            if "raised" in run:
                raise CheckFailed(f"{what} raised {run['raised']}: {run['message']}")
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
            if got_in.shape == got_tg.shape:
                for label, (v_in, v_tg) in shift_variants(ids).items():
                    if (v_in.shape == got_in.shape and torch.equal(v_in, got_in)
                            and v_tg.shape == got_tg.shape and torch.equal(v_tg, got_tg)):
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
                if tuple(got.shape) != shape:
                    raise CheckFailed(
                        f"{what}: {name} should have shape {shape} (one fewer position than ids), "
                        f"got {tuple(got.shape)}."
                    )
                if got.dtype != ids.dtype:
                    raise CheckFailed(f"{what}: {name} are {got.dtype}; keep the ids' dtype {ids.dtype}.")
                if not torch.equal(got, expected):
                    hint = " (targets[..., t] must be ids[..., t + 1])" if name == "targets" else ""
                    raise CheckFailed(f"{what}: wrong {name}{hint}: {first_mismatch(expected, got, 0, 0)}.")
        shapes = ", ".join(str((*c[1], c[2])) for c in cases)
        return f"shift_for_next_token: ids of shape {shapes} give inputs ids[..., :-1] and targets ids[..., 1:]."

    return judge


check_shift = Check("check_shift", _probe_shift(SHIFT_CASES), _judge_shift(SHIFT_CASES))
check_shift_hidden = Check(
    "check_shift_hidden", _probe_shift(SHIFT_HIDDEN_CASES), _judge_shift(SHIFT_HIDDEN_CASES), hidden=True
)

# ---------------------------------------------------------------------------------------------
# embedding_and_head_parameters(n_vocab, emb_dim, tie_weights, head_bias) -> int

# (n_vocab, emb_dim, tie_weights, head_bias)
COUNT_CASES = [(256, 5, t, b) for t in (True, False) for b in (False, True)] + [(100, 7, True, True), (100, 7, False, False)]
COUNT_HIDDEN_CASES = [(50257, 768, True, False), (50257, 768, False, True), (3, 11, False, True), (1, 1, True, True),
                      (65, 384, False, False)]


def _probe_count(cases):
    def probe(count) -> dict:
        _expect_callable(count, "embedding_and_head_parameters")
        return {"runs": [_attempt(count, *case) for case in cases]}

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


def _judge_count(cases):
    def judge(data: dict) -> str:
        runs = _runs(data, len(cases))
        got = []
        for case, run in zip(cases, runs, strict=True):
            what = "embedding_and_head_parameters({}, {}, tie_weights={}, head_bias={})".format(*case)
            if "raised" in run:
                raise CheckFailed(f"{what} raised {run['raised']}: {run['message']}")
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
            )
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


check_parameter_count = Check("check_parameter_count", _probe_count(COUNT_CASES), _judge_count(COUNT_CASES))
check_parameter_count_hidden = Check(
    "check_parameter_count_hidden", _probe_count(COUNT_HIDDEN_CASES), _judge_count(COUNT_HIDDEN_CASES), hidden=True
)
