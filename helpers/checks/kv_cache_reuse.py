"""Lesson 09's cached attention, handed a cache other than the one its previous call returned: the first
chunk's cache continued a second time (two continuations of one prompt, as beam search or a retry makes)
and by a new module of the same weights. Everything a call needs about the past is in the cache it is
given; a module that keeps a counter or a tensor of its own between calls gives other outputs here."""

from __future__ import annotations

import torch

from helpers.checks.core import CheckFailed, close, describe, first_mismatch
from helpers.checks.diagnose import case_sizes
from helpers.checks.errors import caught


def from_a_given_cache(build, module, x, chunks, sizes: dict) -> dict:
    """Probe side: the second chunk computed from the first chunk's cache twice by ``module`` (two
    continuations of one prompt) and once by a new module of the same weights (``build()``): each
    reads the positions so far from the cache alone, so all three give the same output."""
    first, second = chunks[0], chunks[1]
    here = {**sizes, "T_new": second, "T_past": first, "T_total": first + second}
    found = {}
    with torch.no_grad(), case_sizes(here):
        try:
            _, cache = module(x[:, :first], None)
            module(x[:, first:first + second], cache)
            found["second_continuation"] = module(x[:, first:first + second], cache)[0]
        except Exception as exc:  # noqa: BLE001
            found["second_continuation"] = caught(exc, here)
        try:
            fresh = build()
            found["new_module"] = fresh(x[:, first:first + second], cache)[0]
        except Exception as exc:  # noqa: BLE001
            found["new_module"] = caught(exc, here)
    return found


def given_cache_told(what: str, run: dict, expected: torch.Tensor, chunks, tol: float) -> None:
    """Judge side: the second chunk from the first chunk's cache, continued twice and by a new module."""
    if len(chunks) < 2:
        return
    first, second = chunks[0], chunks[1]
    want = expected[:, first:first + second]
    for key, call in (("second_continuation", "the same module, handed the first call's cache a second time (a second "
                                              "continuation of one prompt, as beam search or a retry does)"),
                      ("new_module", "a new module with the same weights, handed that cache for its first call")):
        got = run.get(key)
        if got is None:
            continue
        if isinstance(got, torch.Tensor) and got.shape == want.shape and close(want, got, tol, tol):
            continue
        outcome = (f"raised {got['error']}" if isinstance(got, dict) and "error" in got else
                   f"gave {describe(got)}, expected shape {tuple(want.shape)}" if not isinstance(got, torch.Tensor)
                   or got.shape != want.shape else f"gave other outputs ({first_mismatch(want, got, tol, tol)})")
        raise CheckFailed(f"{what}: right when each call is given the cache the previous one returned, but {call} "
                          f"{outcome}. Everything a call needs about the past is in the cache it is given (the "
                          "positions so far: cache[0].shape[2]); does the module keep something of its own between "
                          "calls (a counter or a tensor on self)?")
