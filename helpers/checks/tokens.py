"""Checks for lesson 01 (tokens and embeddings): encode(text), a text to its code points, with a
ValueError that names a character outside the vocabulary, and decode(ids), the code points back to
the text.

Shape legend: T sequence length (one id per character).
"""

from __future__ import annotations

import re

import torch

from helpers.checks.core import CheckFailed, describe, expect_callable, runs, visible_and_hidden
from helpers.checks.diagnose import diagnose
from helpers.checks.errors import attempt, raise_caught
from helpers.reference import tokens as ref

VOCAB = 256


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


def _probe_encode(cases):
    ok_texts, bad_texts = cases  # texts to accept, texts to refuse

    def probe(encode) -> dict:
        expect_callable(encode, "encode")
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
    if "ÿ" in text and run.get("kind") == "ValueError":
        raise CheckFailed(
            f"{what} raised ValueError ({run['message']!r}), but 'ÿ' is code point 255, the last "
            "valid id: ids run from 0 to 255, so refuse a code point only when it is >= 256."
        )
    raise_caught(what, run)
    out = run.get("out")
    if isinstance(out, list):
        raise CheckFailed(
            f"{what} returned a Python list; return a tensor: torch.tensor(..., dtype=torch.long)."
        )
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"{what} should return a (T,) torch.long tensor, got {describe(out)}.")
    if out.dtype.is_floating_point:
        empty = (" (an empty list has no ints to go by: torch.tensor([]) is float32 and np.array([]) float64 "
                 "unless you pass the dtype)" if not text else "")
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
        ids, n = out.reshape(-1).tolist(), out.numel()
        early = (f" They are the text's first {n} character{'s' if n > 1 else ''} and the rest is missing: does the "
                 "loop end too soon (a return inside it, a range that stops short)?"
                 if out.ndim == 1 and 0 < n < len(text) and ids == [ord(ch) for ch in text[:n]] else "")
        raise CheckFailed(
            f"{what} should return shape ({len(text)},), one id per character, got "
            f"{tuple(out.shape)}{spelled}.{early}"
        )
    if not torch.equal(out, expected):
        _, message = diagnose(expected, out, what=f"{what} returned ids that spell {_show(_spelled(out.tolist()))}",
                              atol=0, rtol=0, axes=("T",), sizes={"T": len(text)}, dtype=torch.long)
        raise CheckFailed(f"{message} Each id must be ord(ch) of its character, in the text's order.")


def _judge_encode_bad(text: str, run: dict) -> None:
    position, ch = _offender(text)
    code = ord(ch)
    what = f"encode({_show(text)})"
    if "error" not in run:
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
    kind, message = run["kind"], run.get("message", "")
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


def _judge_encode(cases):
    ok_texts, bad_texts = cases

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


check_encode, check_encode_hidden = visible_and_hidden(
    "check_encode", _probe_encode, _judge_encode, (ENCODE_OK, ENCODE_BAD), (ENCODE_OK_HIDDEN, ENCODE_BAD_HIDDEN)
)

# ---------------------------------------------------------------------------------------------
# decode(ids) -> str

DECODE_TEXTS = ["Transformed.", "naïve café, 3×4 = 12, ÿ"]
DECODE_TEXTS_HIDDEN = ["", "é", "tab\tand\nnewline", "\x00ÿ\x7f", "".join(chr(i) for i in range(32, 127))]


def _probe_decode(texts):
    def probe(decode) -> dict:
        expect_callable(decode, "decode")
        ids = [torch.tensor([ord(ch) for ch in text], dtype=torch.long) for text in texts]  # (T,) each
        return {"runs": [attempt(decode, x, sizes={"T": len(x)}) for x in ids]}

    return probe


def _judge_decode(texts):
    def judge(data: dict) -> str:
        for text, run in zip(texts, runs(data, len(texts)), strict=True):
            ids = [ord(ch) for ch in text]
            text = ref.decode(torch.tensor(ids, dtype=torch.long))  # the reference is the last word
            what = f"decode(ids of {_show(text)})"
            kind, message = run.get("kind"), run.get("message", "")
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
            raise_caught(what, run)
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
                # which ids lost their character, when the output is the text with some characters left out
                kept = [c for c in text if c in out]
                lost = sorted({ids[k] for k, c in enumerate(text) if c not in out})
                which = (" The character of id 0 is missing and every other one is there: is id 0 filtered out "
                         "(`if code` reads 0 as false)?" if lost == [0] else
                         f" The characters of ids {lost} are missing and every other one is there.") if lost and \
                    "".join(kept) == out else ""
                raise CheckFailed(
                    f"{what} should return {len(text)} characters, one per id, got {len(out)}: {_show(out)}.{which}"
                )
            i = next(k for k, (a, b) in enumerate(zip(text, out, strict=True)) if a != b)
            how = " (the text reversed)" if out == text[::-1] else ""
            raise CheckFailed(
                f"{what} returned {_show(out)}{how}; first difference at index {i}: expected {text[i]!r} "
                f"(chr({ids[i]})), got {out[i]!r}."
            )
        return f"decode: the ids of {', '.join(_show(t) for t in texts)} give the text back."

    return judge


check_decode, check_decode_hidden = visible_and_hidden(
    "check_decode", _probe_decode, _judge_decode, DECODE_TEXTS, DECODE_TEXTS_HIDDEN
)
