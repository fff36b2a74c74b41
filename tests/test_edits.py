"""The one-change variants of an answer that ``autograder.repair`` tries (``autograder/edits.py``):
each kind of slip has a variant that undoes it, a line of the course's answer is changed only after
the student's own lines, and a cell that does not parse gets none."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autograder.edits import MAX_EDITS, edits

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "a condition read the other way": (
        "def f(x, flag=True):\n    if not flag:\n        return x\n    return -x\n",
        "`not flag` (line 2) as `flag`"),
    "a comparison strict where it should not be": (
        "def f(ids):\n    while len(ids) > 2:\n        ids = ids[1:]\n    return ids\n",
        "`len(ids) > 2` (line 2) as `len(ids) >= 2`"),
    "and in place of or": (
        "def f(a, b):\n    return 1 if a and b else 0\n",
        "`a and b` (line 2) as `a or b`"),
    "a return inside the loop": (
        "def f(xs):\n    total = 0\n    for x in xs:\n        total += x\n        return total\n",
        "`return total` (line 5) moved after its loop (one indent less)"),
    "an accumulator reset inside its loop": (
        "def f(xs):\n    for x in xs:\n        out = []\n        out.append(x)\n    return out\n",
        "`out = []` (line 3) moved before its loop"),
    "a sibling attribute": (
        "class A:\n    def f(self, x):\n        q = self.query(x)\n        k = self.query(x)\n        v = self.value(x)\n"
        "        return q, k, v, self.key\n",
        "`self.query` (line 4) as `self.key`"),
    "a name in place of another": (
        "def f(q, k):\n    return q @ q.T\n",
        "`q` (line 2) as `k`"),
    "the notebook's global for the module's own": (
        "class H:\n    def __init__(self, head_dim):\n        self.head_dim = head_dim\n"
        "    def f(self, s):\n        return s / head_dim ** 0.5\n",
        "`head_dim` (line 5) as `self.head_dim`"),
    "the notebook's global for a parameter": (
        "def f(x, n_batches):\n    return x[:EVAL_BATCHES]\n",
        "`EVAL_BATCHES` (line 2) as `n_batches`"),
    "a result kept under a new name": (
        "def f(ids, step):\n    for _ in range(3):\n        new_ids = step(ids)\n    return ids\n",
        "`new_ids` (line 3) as `ids`"),
    "self where another module is meant": (
        "class L:\n    def __init__(self, base):\n        for p in self.parameters():\n            p.requires_grad = False\n",
        "`self` (line 3) as `base`"),
    "a row where a column is meant": (
        "def f(lengths, T):\n    return torch.arange(T) < lengths\n",
        "`torch.arange(T) < lengths` (line 2) as `torch.arange(T) < lengths[:, None]`"),
    "two statements in each other's place": (
        "def f(xs):\n    total = 0\n    for x in xs:\n        out = total\n        total = total + x\n    return out\n",
        "`total = total + x` (line 5) moved one statement earlier, before the line above it"),
    "a step too many": (
        "def f(x):\n    x = x - x.mean()\n    return x / x.norm()\n",
        "`x = x - x.mean()` (line 2) left out"),
    "floor division for division": (
        "def f(a, b):\n    return a // b\n",
        "`a // b` (line 2) as `a / b`"),
    "a sum for a mean": (
        "def f(x):\n    return x.sum(dim=-1)\n",
        "`x.sum(dim=-1)` (line 2) as `x.mean(dim=-1)`"),
    "is for ==": (
        "def f(a, b):\n    return a is b\n",
        "`a is b` (line 2) as `a == b`"),
    "is for == twice on one line": (
        "def f(ids, a, b, i):\n    if ids[i] is a and ids[i + 1] is b:\n        return 1\n    return 0\n",
        "`ids[i] is a and ids[i + 1] is b` (line 2) as `ids[i] == a and ids[i + 1] == b`"),
    "a tuple unpacked in the other order": (
        "def f(g):\n    values, ids = g()\n    return ids\n",
        "`values, ids` (line 2) as `ids, values`"),
    "two arguments swapped": (
        "def f(make, a, b):\n    return make(b, a)\n",
        "`make(b, a)` (line 2) as `make(a, b)`"),
    "keepdim forgotten": (
        "def f(x):\n    return x - x.mean(dim=-1)\n",
        "`x.mean(dim=-1)` (line 2) as `x.mean(dim=-1, keepdim=True)`"),
    "an axis": (
        "def f(x):\n    return x.softmax(dim=0)\n",
        "`x.softmax(dim=0)` (line 2) as `x.softmax(dim=-1)`"),
    "a result thrown away": (
        "def f(x, m):\n    x.masked_fill(m, 0.0)\n    return x\n",
        "`x.masked_fill(m, 0.0)` (line 2) as `x.masked_fill_(m, 0.0)`"),
    "a bound one off": (
        "def f(xs):\n    return [xs[i] for i in range(1, len(xs))]\n",
        "`range(1, len(xs))` (line 2) as `range(0, len(xs))`"),
}


@pytest.mark.parametrize("name", CASES)
def test_each_kind_of_slip_has_the_variant_that_undoes_it(name):
    source, wanted = CASES[name]
    found = {e.describe(): e for e in edits(source)}
    assert wanted in found, sorted(found)
    ast.parse(found[wanted].source)  # a whole cell that parses
    assert found[wanted].source != source


def test_a_line_the_course_has_is_changed_after_the_students_own():
    reference = "def f(x, y):\n    a = x + 1\n    b = y + 1\n    return a * b\n"
    student = "def f(x, y):\n    a = x + 1\n    b = x + 1\n    return a * b\n"
    lines = [e.line for e in edits(student, reference)]
    assert lines == sorted(lines, key=lambda line: line != 3) and lines[0] == 3 and set(lines) > {3}
    assert "`x` (line 3) as `y`" in [e.describe() for e in edits(student, reference) if e.line == 3]


def test_no_variant_repeats_the_cell_or_another_and_there_is_a_limit():
    source = "class M:\n" + "".join(f"    def f{i}(self, a, b, c):\n        return self.g(a, b, c) + self.h(c, b, a)\n"
                                    for i in range(30))
    found = edits(source)
    assert len(found) == MAX_EDITS
    assert len({e.source for e in found}) == len(found)
    assert ast.unparse(ast.parse(source)) not in {e.source for e in found}


@pytest.mark.parametrize("source", ["def f(:\n", "%time x = 1\n", ""])
def test_a_cell_that_does_not_parse_or_has_nothing_gets_none(source):
    assert edits(source) == []


def test_every_answer_of_the_course_and_every_catalogued_alternative_gets_variants_that_parse():
    """The variants come from any answer a student could hand in: the course's own, and every correct
    alternative of every lesson's catalogue, each against the course's answer."""
    from autograder.catalogue import load_catalogue
    from autograder.course import lessons

    for lesson in lessons(ROOT):
        answers = lesson.solution_answers()
        sources = [(gid, source) for gid, source in answers.items()]
        sources += [(gid, source) for alternative in load_catalogue(lesson).alternatives.values()
                    for gid, source in alternative.items()]
        for gid, source in sources:
            found = edits(source, answers.get(gid))
            assert found and len(found) <= MAX_EDITS, (lesson.assignment, gid)
            for edit in found:
                ast.parse(edit.source)
