"""Lesson 08: every catalogued sampling mistake loses exactly its exercise's points and is named;
correct answers written differently get full marks; the reference's filters behave as documented."""

import torch
from harness import CatalogueTests, catalogue

from helpers.reference.sampling import sample_next, top_k_filter, top_p_filter

A = "08-generation"


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
    assert "course_model(data," in code and "save=not QUICK" in code, "only the full setting saves the model it trained"
    import inspect

    from helpers.training import course_model

    source = inspect.getsource(course_model)  # the one home of "load lesson 07's model, or train and save it"
    assert "course_checkpoint_path(data.corpus)" in source and "save_checkpoint(" in source and "train(" in source
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


class TestCatalogue(CatalogueTests):
    catalogue = catalogue(A)
