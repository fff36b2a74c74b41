"""Lesson 08: every catalogued sampling mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the reference's filters behave as documented."""

import torch
from harness import Catalogue, HiddenOnlyTests

from helpers.reference.sampling import sample_next, top_k_filter, top_p_filter

A = "08-generation"
TEMP, TOPK, TOPP, SAMPLE = "temperature", "top-k", "top-p", "sample-next"
KTH = "kth_largest = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1)"
KMASK = 'return logits.masked_fill(logits < kth_largest, float("-inf"))  # (..., V)'
MASS = "mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs"
SORT = "sorted_probs, order = torch.sort(probs, dim=-1, descending=True)"
UNSORT = "remove = remove_sorted.scatter(-1, order, remove_sorted)"
TEMPER = "logits = apply_temperature(logits, temperature)  # (..., V)"
DRAW = "ids = torch.multinomial(flat, num_samples=1, generator=generator)  # (N, 1)"

# name -> (exercise, edits of the solution, words the feedback must contain)
MISTAKES = {
    "temperature-multiplies": (TEMP, [("logits / temperature", "logits * temperature")], "multiplied by the temperature"),
    "temperature-in-place": (TEMP, [("return logits / temperature", "logits /= temperature\n    return logits")], "in place"),
    "temperature-softmax": (TEMP, [("return logits / temperature", "return torch.softmax(logits / temperature, dim=-1)")], "returned probabilities"),
    "temperature-on-probabilities": (TEMP, [("return logits / temperature", "return logits.softmax(dim=-1) / temperature")], "divided the probabilities"),
    "top-k-keeps-k-plus-one": (TOPK, [("torch.topk(logits, k, dim=-1)", "torch.topk(logits, min(k + 1, logits.shape[-1]), dim=-1)")], "k+1"),
    "top-k-strict": (TOPK, [("logits < kth_largest", "logits <= kth_largest")], "dropped the k-th largest"),
    "top-k-drops-ties": (
        TOPK,
        [(KTH, "idx = torch.topk(logits, k, dim=-1).indices  # (..., k)"),
         (KMASK, 'return torch.full_like(logits, float("-inf")).scatter(-1, idx, logits.gather(-1, idx))')],
        "ties all stay",
    ),
    "top-k-zero-not-inf": (TOPK, [('float("-inf"))  # (..., V)', "0.0)  # (..., V)")], "0 instead of -inf"),
    "top-k-in-place": (TOPK, [("logits.masked_fill(", "logits.masked_fill_(")], "in place"),
    "top-k-whole-batch": (TOPK, [("torch.topk(logits, k, dim=-1).values[..., -1:]", "logits.flatten().sort(descending=True).values[k - 1]")], "whole batch"),
    "top-p-drops-crossing-token": (TOPP, [(MASS, "mass_before = torch.cumsum(sorted_probs, dim=-1)"), ("mass_before >= p", "mass_before > p")], "crosses p"),
    "top-p-not-sorted": (TOPP, [(SORT, "sorted_probs, order = probs, torch.arange(probs.shape[-1]).expand(probs.shape)")], "did not sort"),
    "top-p-not-scattered-back": (TOPP, [(UNSORT, "remove = remove_sorted")], "scatter"),
    "top-p-ascending": (TOPP, [("descending=True", "descending=False")], "ascending"),
    "top-p-zero-not-inf": (TOPP, [('float("-inf"))  # (..., V)', "0.0)  # (..., V)")], "0 instead of -inf"),
    "sample-multiplies-temperature": (SAMPLE, [(TEMPER, "logits = logits * temperature")], "multiplies the logits"),
    "sample-ignores-generator": (SAMPLE, [("generator=generator)", ")")], "Pass the generator on"),
    "sample-keeps-draw-dimension": (SAMPLE, [("return ids.reshape(logits.shape[:-1])", "return ids")], "shape (N,)"),
    "sample-no-greedy": (SAMPLE, [("if temperature == 0:", "if False:")], "Temperature 0 means greedy"),
    "sample-argmax-always": (SAMPLE, [(DRAW, "ids = flat.argmax(dim=-1, keepdim=True)  # (N, 1)")], "argmax"),
    "sample-softmax-before-filters": (
        SAMPLE,
        [(TEMPER, "logits = torch.softmax(apply_temperature(logits, temperature), dim=-1)"),
         ("probs = torch.softmax(logits, dim=-1)  # (..., V)", "probs = logits")],
        "softmax before filtering",
    ),
    "sample-top-p-before-temperature": (
        SAMPLE,
        [(TEMPER, "pass"), ("probs = torch.softmax(logits, dim=-1)", "probs = torch.softmax(apply_temperature(logits, temperature), dim=-1)")],
        "top-p before the temperature",
    ),
    "temperature-minus": (TEMP, [("return logits / temperature", "return logits - temperature")], "subtracted the temperature"),
    "temperature-float32": (TEMP, [("return logits / temperature", "return logits.float() / temperature")], "precision was lost"),
    "temperature-squared": (TEMP, [("return logits / temperature", "return logits / temperature ** 2")], "temperature squared"),
    "temperature-log-softmax": (TEMP, [("return logits / temperature", "return torch.log_softmax(logits / temperature, dim=-1)")], "log-probabilities"),
    "temperature-int": (TEMP, [("return logits / temperature", "return logits / int(temperature)")], "int(temperature)"),
    "temperature-sqrt": (TEMP, [("return logits / temperature", "return logits / temperature ** 0.5")], "square root"),
    "top-k-no-keepdim": (TOPK, [("values[..., -1:]", "values[..., -1]")], "lines two tensors up"),
    "top-k-only-the-largest": (TOPK, [("values[..., -1:]", "values[..., 0:1]")], "only the largest logit"),
    "top-k-over-rows": (TOPK, [("torch.topk(logits, k, dim=-1)", "torch.topk(logits, k, dim=0)")], "ran along a shorter dimension"),
    "top-k-kthvalue": (TOPK, [(KTH, "kth_largest = torch.kthvalue(logits, k, dim=-1, keepdim=True).values")], "k-th smallest"),
    "top-k-returns-mask": (TOPK, [(KMASK, "return logits >= kth_largest")], "bool tensor"),
    "top-k-minus-1e9": (TOPK, [('float("-inf"))  # (..., V)', "-1e9)  # (..., V)")], "-1e+09 instead of -inf"),
    "top-p-softmax-over-rows": (TOPP, [("probs = torch.softmax(logits, dim=-1)", "probs = torch.softmax(logits, dim=0)")], "over the rows (dim=0)"),
    "top-p-gather": (TOPP, [(UNSORT, "remove = remove_sorted.gather(-1, order)")], "with gather"),
    "top-p-no-softmax": (TOPP, [("probs = torch.softmax(logits, dim=-1)", "probs = logits")], "summed the logits"),
    "top-p-inverted": (TOPP, [("remove_sorted = mass_before >= p", "remove_sorted = mass_before < p")], "wrong way round"),
    "top-p-returns-probabilities": (TOPP, [('return logits.masked_fill(remove, float("-inf"))', "return probs.masked_fill(remove, 0.0)")], "0 on the removed tokens"),
    "top-p-in-place": (TOPP, [("logits.masked_fill(remove", "logits.masked_fill_(remove")], "in place"),
    "top-p-drops-the-top-token": (TOPP, [(MASS, "mass_before = torch.cumsum(sorted_probs, dim=-1).roll(1, -1)")], "the wrong tokens are kept (too few)"),
    "sample-multinomial-on-logits": (SAMPLE, [("flat = probs.reshape(", "flat = logits.reshape(")], "non-negative, finite"),
    "sample-reshape-minus-one": (SAMPLE, [("return ids.reshape(logits.shape[:-1])", "return ids.reshape(-1)")], "should return shape ()"),
    "sample-squeeze": (SAMPLE, [("return ids.reshape(logits.shape[:-1])", "return ids.squeeze()")], "should return shape (1,)"),
    "sample-temperature-twice": (SAMPLE, [("probs = torch.softmax(logits, dim=-1)", "probs = torch.softmax(logits / temperature, dim=-1)")], "applied twice"),
    "sample-softmax-over-rows": (SAMPLE, [("probs = torch.softmax(logits, dim=-1)", "probs = torch.softmax(logits, dim=0)")], "uniform"),
    "sample-temperature-on-probabilities": (
        SAMPLE, [(TEMPER, "pass"), ("probs = torch.softmax(logits, dim=-1)", "probs = torch.softmax(logits, dim=-1) / temperature")],
        "temperature has no effect",
    ),
}

# mistakes that only the hidden tests can see (a case only they have): they lose the hidden points
HIDDEN_ONLY = {
    "temperature-same-object": (TEMP, [("return logits / temperature", "return logits if temperature == 1 else logits / temperature")], "returned its input itself"),
    "top-k-no-min": (TOPK, [("k = min(k, logits.shape[-1])", "pass")], "k = min(k, logits.shape[-1])"),
    "sample-top-p-before-top-k": (
        SAMPLE,
        [("    if top_k is not None:\n        logits = top_k_filter(logits, top_k)\n", ""),
         ("        logits = top_p_filter(logits, top_p)\n", "        logits = top_p_filter(logits, top_p)\n    if top_k is not None:\n        logits = top_k_filter(logits, top_k)\n")],
        "top-p before top-k",
    ),
}

ALTERNATIVES = {
    "temperature-reciprocal": {TEMP: '''
def apply_temperature(logits, temperature):
    return torch.mul(logits, 1.0 / temperature)
'''},
    "top-k-sort": {TOPK: '''
def top_k_filter(logits, k):
    if k >= logits.size(-1):
        return logits.clone()
    values, _ = logits.sort(dim=-1, descending=True)
    threshold = values[..., k - 1].unsqueeze(-1)
    return torch.where(logits >= threshold, logits, torch.full_like(logits, -float("inf")))
'''},
    "top-p-index-with-order": {TOPP: '''
def top_p_filter(logits, p):
    probs = logits.softmax(dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    cumulative = sorted_probs.cumsum(dim=-1)
    keep_sorted = torch.cat([torch.ones_like(cumulative[..., :1], dtype=torch.bool),
                             cumulative[..., :-1] < p], dim=-1)
    keep = torch.zeros_like(keep_sorted)
    keep.scatter_(-1, order, keep_sorted)
    out = logits.clone()
    out[~keep] = float("-inf")
    return out
'''},
    "sample-categorical-style": {SAMPLE: '''
def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature <= 0:
        return torch.argmax(logits, dim=-1)
    scaled = apply_temperature(logits, temperature)
    if top_k:
        scaled = top_k_filter(scaled, top_k)
    if top_p:
        scaled = top_p_filter(scaled, top_p)
    probs = F.softmax(scaled, dim=-1)
    if probs.dim() == 1:
        return torch.multinomial(probs, 1, generator=generator)[0]
    return torch.multinomial(probs, 1, generator=generator)[:, 0]
'''},
}


# ---------------------------------------------------------------------------------------------
# The reference itself, on a fixed distribution


def test_top_k_keeps_ties_and_everything_when_k_is_large():
    logits = torch.tensor([[1.0, 3.0, 2.0, 2.0, 0.0]])
    out = top_k_filter(logits, 2)
    assert (out > float("-inf")).tolist() == [[False, True, True, True, False]]
    assert torch.equal(top_k_filter(logits, 9), logits)


def test_top_p_keeps_the_crossing_token_and_always_the_top_one():
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])
    logits = probs.log()
    kept = top_p_filter(logits, 0.7) > float("-inf")
    assert kept.tolist() == [False, True, False, True]  # 0.5, then 0.3 crosses 0.7
    assert (top_p_filter(logits, 0.1) > float("-inf")).tolist() == [False, True, False, False]


def test_sample_next_greedy_shapes_and_reproducibility():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 1.0]])
    assert sample_next(logits, temperature=0).tolist() == [1, 0]
    assert sample_next(logits[0], temperature=0).shape == ()
    a = sample_next(logits.repeat(50, 1), generator=torch.Generator().manual_seed(3))
    b = sample_next(logits.repeat(50, 1), generator=torch.Generator().manual_seed(3))
    assert a.shape == (100,) and a.dtype == torch.long and torch.equal(a, b)


# ---------------------------------------------------------------------------------------------
# The lesson's text: what it states must hold for any trained model, not one checkpoint


def _cells():
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "solutions" / A / f"{A}.ipynb"
    return [(c["cell_type"], c.get("id"), "".join(c["source"])) for c in json.loads(path.read_text("utf-8"))["cells"]]


def test_the_temperature_is_never_written_T():
    """T is the sequence length in the shape legend; the temperature is written out, or τ."""
    import re

    pattern = re.compile(r"\bT\s*(=\s*[0-9.]|[<>]\s*[0-9]|→)")
    found = [(cid, m.group(0)) for _, cid, src in _cells() for m in pattern.finditer(src)]
    assert not found, found


def test_the_model_comes_from_the_course_cache_or_is_trained_there():
    cells = {cid: src for _, cid, src in _cells()}
    code = cells["l08-06"]
    assert "course_checkpoint_path()" in code and "save_checkpoint(" in code and "train(" in code
    assert "not QUICK" in code or "if QUICK" in code, "only the full setting saves the model it trained"
    assert "checkpoints/" not in "".join(cells.values()), "the repository holds no checkpoints/ folder"


def test_the_prose_quotes_no_measured_share_head_or_loss():
    """Figures come from the cells' output; the markdown gives ranges and names no specific head."""
    import re

    rules = [
        (re.compile(r"\b\d+(\.\d+)?\s*%"), "a percentage"),
        (re.compile(r"\blayer \d+,? head \d+", re.I), "a specific head"),
        (re.compile(r"\b(layer|head) \d+\b(?!\))", re.I), "a specific layer or head"),
        (re.compile(r"\breaches \d\.\d\d"), "a measured loss"),
    ]
    found = []
    for kind, cid, src in _cells():
        if kind != "markdown":
            continue
        for pattern, what in rules:
            found += [(cid, what, m.group(0)) for m in pattern.finditer(src)]
    assert not found, found


def test_the_model_is_called_gpt2_style():
    texts = "".join(src for kind, _, src in _cells() if kind == "markdown")
    assert "GPT-2's architecture" not in texts
    assert "GPT-2-style" in texts


class TestCatalogue(HiddenOnlyTests):
    catalogue = Catalogue(A, MISTAKES, ALTERNATIVES, hidden_only=HIDDEN_ONLY, requirements={
        TEMP: {"do not change `logits` in place": ["temperature-in-place"],
               "do not take the softmax here": ["temperature-softmax", "temperature-log-softmax"]},
        TOPP: {"the result must be in the": ["top-p-not-scattered-back", "top-p-gather"]},
    })
