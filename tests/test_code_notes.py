"""The notes a failing check adds about the student's code (``helpers/checks/diagnose/code_notes.py``):
each rule says what a line does when it is there, and nothing at all on correct code: the course's
own reference, every correct alternative of every lesson's catalogue, and the course's own helpers."""

from __future__ import annotations

import importlib
import linecache
import math
import pkgutil
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import helpers.reference
from autograder.catalogue import load_catalogue
from autograder.course import SOLUTIONS, lessons
from helpers.checks.diagnose import code_notes as cn

ROOT = Path(__file__).resolve().parents[1]


def _cell(source: str) -> dict:
    """Run ``source`` as a notebook cell does (its lines in linecache); its namespace."""
    filename = f"<cell {abs(hash(source)) % 10**8}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"torch": torch, "nn": nn, "F": F, "math": math, "__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the test's own source
    return namespace


def _notes(source: str, name: str, many: bool = True) -> list[str]:
    namespace = _cell(source)
    namespace.setdefault("temperature", 0.8)  # a name of the notebook's earlier cells
    saved, cn.MAX_NOTES = cn.MAX_NOTES, 50 if many else cn.MAX_NOTES
    try:
        return cn.code_notes(namespace[name])
    finally:
        cn.MAX_NOTES = saved


# one example of each rule, and the words its note must say
EXAMPLES = {
    "a tensor method's result dropped": (
        "def f(x, t):\n    x.div(t)\n    return x\n", "f", ["`x.div(t)`, keeps nothing", "in-place form is .div_"]),
    "a torch function's result dropped": (
        "def f(ids, new):\n    torch.cat([ids, new], dim=1)\n    return ids\n", "f", ["torch.cat returns a new tensor"]),
    "a notebook function's result dropped": (
        "def g(x):\n    return x * 2\n\ndef f(x):\n    g(x)\n    return x\n", "f", ["g returns its result"]),
    "a method named, not called": (
        "def f(model):\n    model.train\n    return model\n", "f", ["names the method without calling it"]),
    "an exception built, not raised": (
        "def f(x):\n    if x < 0:\n        ValueError('negative')\n    return x\n", "f", ["builds a ValueError", "`raise"]),
    "a return in a loop's body": (
        "def f(xs):\n    out = []\n    for x in xs:\n        out.append(x)\n        return out\n", "f",
        ["under no condition, so the loop ends during its first pass"]),
    "an inner loop taking the outer loop's name": (
        "def f(n):\n    total = 0\n    for i in range(n):\n        for i in range(3):\n            total += i\n    return total\n",
        "f", ["the inner loop takes the name `i`"]),
    "arguments in each other's places": (
        "def g(a, top_k, top_p):\n    return a\n\ndef f(a, top_k, top_p):\n    return g(a, top_p, top_k)\n", "f",
        ["`top_p` goes in as g's parameter `top_k`", "`top_k` goes in as g's parameter `top_p`"]),
    "sort's pair read the other way round": (
        "def f(p):\n    order, probs = torch.sort(p, descending=True)\n    return probs[order]\n", "f",
        ["returns (values, indices)", "`order` receives the values"]),
    "max's indices taken for its values": (
        "def f(x):\n    return x - x.max(dim=-1, keepdim=True)[1]\n", "f", ["the indices (the argmax)"]),
    "one expression given to two names": (
        "def f(q, k, rope):\n    q, k = rope(q), rope(q)\n    return q @ k.T\n", "f", ["get the same expression, `rope(q)`"]),
    "enumerate's pair read the other way round": (
        "def f(text):\n    out = []\n    for ch, i in enumerate(text):\n        out.append(ord(ch))\n    return out\n", "f",
        ["`ch` receives the index"]),
    "values kept on the function": (
        "def f(x):\n    cache = f.__dict__.setdefault('memo', {})\n    return cache.setdefault(len(x), x * 2)\n", "f",
        ["keeps values on the function f itself"]),
    "a loop over a set": ("def f(ids):\n    n = {}\n    for p in set(zip(ids, ids[1:])):\n        n[p] = n.get(p, 0) + 1\n"
                          "    return n\n", "f", ["the loop runs over set(zip(ids, ids[1:]))"]),
    "a tie through .data": ("def f(head, emb):\n    head.weight.data = emb.weight.data\n    return head\n", "f",
                            ["keeps the Parameter itself"]),
    "a mutable default": ("def f(x, seen=[]):\n    seen.append(x)\n    return len(seen)\n", "f", ["default argument of f is a list"]),
    "a future mask given as attn_mask": (
        "def f(q, k, v, T):\n    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=future)\n", "f", ["True where a query MAY attend"]),
    "a list of the notebook's changed by a function": (
        "seen = []\n\ndef f(x):\n    seen.append(x)\n    return list(seen)\n", "f",
        ["changes seen, a list that f does not make", "start empty at every call"]),
    "a layer with weights built in forward": (
        "class M(nn.Module):\n    def forward(self, x):\n        return nn.Linear(x.shape[-1], 4)(x)\n", "M",
        ["builds a new Linear at every call of forward", "Build it once in __init__"]),
    "a second name taken for a copy, then written through": (
        "def f(x, pos):\n    out = x\n    out += pos\n    return out\n", "f",
        ["makes out a second name for x, not a copy", "(line 3)", "`x.clone()`"]),
    "a full slice of a tensor taken for a copy": (
        "def f(scores):\n    masked = scores[:]\n    masked[0, 1] = 0.0\n    return masked\n", "f",
        ["`scores[:]` is a view that shares scores's memory"]),
    "an iterator read twice": (
        "def f(ids):\n    pairs = zip(ids, ids[1:])\n    counts = dict.fromkeys(pairs, 0)\n    for p in pairs:\n"
        "        counts[p] += 1\n    return counts\n", "f",
        ["`pairs` is zip(...), an iterator", "(line 3, `counts = dict.fromkeys(pairs, 0)`) uses it up", "(line 4)"]),
    "a lambda made in a loop that reads the loop's name": (
        "def f(table, state):\n    copies = {ours: (lambda: state[theirs]) for ours, theirs in table.items()}\n"
        "    return {k: g() for k, g in copies.items()}\n", "f",
        ["reads `theirs` when it is called", "`lambda theirs=theirs: ...`"]),
    "a size set at the top of the function's own cell": (
        "block_size = 8\n\ndef f(ids):\n    return ids[..., :block_size], ids[..., 1:block_size + 1]\n", "f",
        ["line 4 of f reads `block_size`", "the cell sets it at its top (line 1, `block_size = 8`; now block_size = 8)"]),
    "the notebook's name where the module has its own": (
        "head_dim = 4\n\nclass M(nn.Module):\n    def __init__(self, head_dim):\n        super().__init__()\n"
        "        self.head_dim = head_dim\n    def forward(self, x):\n        return x.view(-1, head_dim)\n", "M",
        ["reads `head_dim` from the notebook (now head_dim = 4), not `self.head_dim`", "Was `self.head_dim` meant?"]),
    "the notebook's name where an argument goes unread": (
        "def f(logits, temp):\n    return logits / temperature\n", "f",
        ["reads `temperature` from the notebook (now temperature = 0.8 (a float))", "Was `temp` (an argument f never reads) meant?"]),
    "an argument set before it is read": (
        "def f(model, targets, r):\n    \"\"\"Doc.\"\"\"\n    targets = ('query', 'value')\n    return [t * r for t in targets]\n",
        "f", ["line 3 of f, `targets = ('query', 'value')`, sets `targets`, an argument of f, before anything reads it"]),
    "a mutable default in a helper written beside the answer": (
        "def collect(model, found=[]):\n    found.extend(model)\n    return found\n\n"
        "def f(model):\n    return collect(model)\n", "f", ["default argument of collect is a list"]),
    "one inner list repeated for every row": (
        "def f(ids, B, T):\n    rows = [[0] * T] * B\n    for b in range(B):\n        rows[b][0] = ids[b]\n"
        "    return rows\n", "f", ["`[[0] * T] * B`: `*` repeats one inner list", "`[[0] * n for _ in range(m)]`"]),
    "torch.tensor of an argument": (
        "def f(x, w):\n    x = torch.tensor(x)\n    return x @ w\n", "f",
        ["torch.tensor of a tensor copies its values into a new tensor outside autograd", "`x.clone()`"]),
    "linspace with its end point": (
        "def f(T):\n    return torch.linspace(0, T, T).long()\n", "f", ["linspace includes its end", "torch.arange(T)"]),
    "squeeze with no axis": (
        "def f(draws):\n    return draws.squeeze()\n", "f", ["squeeze() with no axis drops every axis of size 1"]),
    "an in-place method on a name the same statement reads": (
        "def f(g, u):\n    h = g * g.sigmoid_()\n    return h * u\n", "f",
        ["`g.sigmoid_()` changes `g` in place while the same statement also uses `g`", "out-of-place `sigmoid`"]),
}


def test_python_semantics_notes_stay_silent_where_the_code_is_right():
    sources = {
        "a copy written into": "def f(x, pos):\n    out = x.clone()\n    out += pos\n    return out\n",
        "a second name rebound before the write": "def f(x, pos):\n    out = x\n    out = out + pos\n    out += 1\n    return out\n",
        "an iterator read once": "def f(ids):\n    pairs = zip(ids, ids[1:])\n    return dict.fromkeys(pairs, 0)\n",
        "an iterator stepped by next, then read": "def f(xs):\n    it = iter(xs)\n    first = next(it)\n"
                                                 "    return [first] + [x for x in it]\n",
        "a lambda called in its own pass": "def f(rows):\n    out = []\n    for r in rows:\n"
                                            "        out.append(sorted(r, key=lambda v: abs(v - r[0])))\n    return out\n",
        "a lambda that binds the name at once": "def f(table, state):\n"
                                                "    return {o: (lambda t=t: state[t]) for o, t in table.items()}\n",
        # not a tie: a loaded tensor put in a Parameter (the loading checks say what that does)
        "a checkpoint's tensor given to .data": "def f(layer, sd):\n    layer.weight.data = sd['w'].T\n    return layer\n",
        "rows of their own": "def f(B, T):\n    return [[0] * T for _ in range(B)]\n",
        "squeeze of one axis": "def f(draws):\n    return draws.squeeze(-1)\n",
        "a list made a tensor": "def f(ids):\n    rows = [i + 1 for i in ids]\n    return torch.tensor(rows)\n",
        "linspace over a range of its own": "def f(T):\n    return torch.linspace(0, 1, T)\n",
        "a flat list repeated": "def f(B):\n    return [0] * B + [None] * 2\n",
        "an in-place method whose own arguments read the name": "def f(x):\n    x = x.clone()\n"
                                                                "    x.masked_fill_(x == 0, 1.0)\n    return x.mul_(2)\n",
    }
    for label, source in sources.items():
        assert _notes(source, "f") == [], label
    helper = _cell("def collect(model, found=[]):\n    found.extend(model)\n    return found\n")["collect"]
    namespace = _cell("def f(model):\n    return collect(model)\n")
    namespace["collect"] = helper  # defined in an earlier cell: not the answer's own code
    assert cn.code_notes(namespace["f"]) == []


def test_a_container_made_in_the_function_or_given_to_it_has_no_note():
    source = ("table = {}\n\ndef f(x, out):\n    out.append(x)\n    table = {}\n    table[x] = 1\n"
              "    mine = []\n    mine.append(x)\n    return out, table, mine\n")
    assert not [n for n in _notes(source, "f") if "does not make" in n]


def test_the_notebooks_names_read_as_meant_have_no_note():
    """A constant in capitals, a function of the notebook, a name of an earlier cell with nothing of the
    function's own beside it: no note (the note is for a value where the function's own was meant)."""
    source = ("N_VOCAB = 256\nscale = 2.0\n\ndef helper(x):\n    return x\n\n"
              "def f(text, table):\n    return helper(torch.tensor([min(ord(c), N_VOCAB - 1) for c in text])) * table\n")
    namespace = _cell(source)
    namespace["vocab"] = {"a": 0}
    assert cn.code_notes(namespace["f"]) == []
    assert _notes("def g(ids):\n    return [vocab[i] for i in ids]\n", "g") == []


def test_a_forward_that_only_wraps_registered_layers_has_no_note():
    source = ("class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.layers = nn.ModuleList([nn.Linear(3, 3)])\n"
              "    def forward(self, x):\n        return nn.Sequential(*self.layers)(x)\n")
    assert not [n for n in _notes(source, "M") if "every call of forward" in n]


@pytest.mark.parametrize("rule", EXAMPLES)
def test_each_rule_says_what_the_line_does(rule):
    source, name, words = EXAMPLES[rule]
    text = " ".join(_notes(source, name))
    missing = [w for w in words if w not in text]
    assert not missing, f"{rule}: the notes lack {missing}; they read: {text!r}"


def test_notes_name_the_line_as_the_cell_counts_it_and_stay_few():
    source = "import torch\n\n\ndef f(x, t):\n    x.div(t)\n    x.mul(t)\n    x.add(t)\n    x.sub(t)\n    return x\n"
    notes = _notes(source, "f", many=False)
    assert len(notes) == cn.MAX_NOTES
    assert notes[0].startswith("line 5 of f, `x.div(t)`")


def test_in_place_code_and_side_effects_have_no_notes():
    source = ("def g(path, text):\n    open(path, 'w').write(text)\n    return len(text)\n\n"
              "def f(x, model, path):\n    x.add_(1)\n    seen = set()\n    seen.add(3)\n    model.to('cpu')\n"
              "    g(path, 'a')\n    for i, row in enumerate(x):\n        if row.sum() > 0:\n            continue\n"
              "        return i\n    return x\n")
    assert _notes(source, "f") == []


def test_a_class_is_read_method_by_method_and_unreadable_code_has_no_notes():
    source = "class M(nn.Module):\n    def forward(self, x):\n        x.unsqueeze(0)\n        return x\n"
    assert "`x.unsqueeze(0)`, keeps nothing" in " ".join(_notes(source, "M"))
    assert cn.code_notes(len) == [] and cn.code_notes(42) == [] and cn.code_notes(lambda: 0) == []


def _module_objects(package) -> list[tuple[str, object]]:
    found = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        found += [(f"{info.name}.{name}", obj) for name, obj in vars(module).items()
                  if isinstance(obj, (types.FunctionType, type)) and getattr(obj, "__module__", None) == module.__name__]
    return found


def test_silent_on_the_reference_of_every_lesson():
    objects = _module_objects(helpers.reference)
    assert len(objects) > 40
    noisy = {name: cn.code_notes(obj) for name, obj in objects if cn.code_notes(obj)}
    assert not noisy, noisy


def _alternatives():
    for lesson in lessons(ROOT, SOLUTIONS):
        try:
            catalogue = load_catalogue(lesson)
        except FileNotFoundError:
            continue
        for name, answers in catalogue.alternatives.items():
            for grade_id, source in answers.items():
                yield f"{lesson.assignment}:{name}:{grade_id}", source


def test_silent_on_every_correct_alternative_of_the_catalogues():
    noisy, read = {}, 0
    for label, source in _alternatives():
        try:
            namespace = _cell(source)
        except Exception:  # noqa: BLE001 - an answer that needs the notebook's earlier cells: not read here
            continue
        for value in list(namespace.values()):
            if isinstance(value, (types.FunctionType, type)) and value.__module__ == "__main__":
                read += 1
                if cn.code_notes(value):
                    noisy[f"{label}:{value.__name__}"] = cn.code_notes(value)
    assert read > 20, f"only {read} alternatives could be read"
    assert not noisy, noisy


def test_a_decorated_function_is_read_as_written():
    source = ("def pick(logits, top_k, top_p):\n    return logits\n\n@torch.no_grad()\n"
              "def f(logits, top_k, top_p):\n    return pick(logits, top_p, top_k)\n")
    assert "`top_p` goes in as pick's parameter `top_k`" in " ".join(_notes(source, "f"))


def test_a_memo_the_function_fills_is_told_as_kept_between_calls_not_as_a_size_left_at_the_top():
    notes = _notes("_seen = {}\n\ndef f(text):\n    if text not in _seen:\n        _seen[text] = list(text)\n"
                   "    return _seen[text]\n", "f")
    assert notes and not any("neither takes nor sets" in n for n in notes), notes
    assert any("changes _seen" in n for n in notes), notes
