"""How often does a wrong answer get feedback that names its cause, and how often only the generic form?

For every exercise of every lesson (or those given with ``--lesson``) this script takes the
solution's answer cell, makes wrong versions of it and runs the exercise's visible and hidden test
cells on each, exactly as a student's notebook would (the checks judge in-process):

* automatic mutants, made with :mod:`ast` from the part of the cell the student writes (between
  ``### BEGIN SOLUTION`` and ``### END SOLUTION``): swapped operators, dropped or doubled scale
  factors, other reduction dims, transposes dropped or added, ``keepdim`` dropped, shifted
  indices and slice bounds, ``<`` for ``<=``, other ``diagonal=`` numbers, ``unbiased`` /
  ``correction`` and other boolean keywords flipped, ``mean`` for ``sum``, swapped arguments,
  and forgotten pieces: a keyword (``generator=``, ``device=``), a call (``self.norm(x)`` -> ``x``),
  a term of a sum, an update (``x = layer(x)``), a statement (``model.train()``); float
  constants doubled. Deterministic (``--seed``),
  deduplicated, at most ``--limit`` per exercise, mutants that do not compile are skipped;
* the course's own catalogue, the mistakes of ``solutions/*/catalogue.toml``
  (read by ``autograder/catalogue.py``).

Each mutant runs in a forked child of a process that has already executed the notebook's code
cells before the exercise's answer cell (``TRANSFORMER_COURSE_QUICK=1``: lessons 07 and 08 take
seconds), with a timeout. Outcomes:

* ``survived``: every test passed (an equivalent mutant, or a mistake the checks miss);
* ``named``: a ``CheckFailed`` whose message states a cause or localises the mistake;
* ``generic``: a ``CheckFailed`` whose message says only "... differs from the reference", or
  only repeats an exception of the student's code (``TypeName: text``) without an explanation;
* ``raw``: an exception other than ``CheckFailed`` escaped from the test cell (PyTorch's own
  error, as the student would see it), or the child died;
* ``timeout``: the child ran past ``--timeout`` seconds.

A catalogue mistake is also ``named-right`` when its message contains the catalogue's words.

    python benchmarks/mutations.py                      # the whole course
    python benchmarks/mutations.py --lesson 03 --show   # one lesson, every mutant and its message
    python benchmarks/mutations.py --catalogue DIR --limit 0 --show   # mistakes written apart from the checks

The last line of the output is one JSON object with the numbers of every exercise and the totals.
"""

from __future__ import annotations

import argparse
import ast
import copy
import difflib
import functools
import json
import linecache
import multiprocessing
import os
import random
import re
import select
import signal
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]  # this checkout's helpers and autograder
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TRANSFORMER_COURSE_QUICK", "1")

from autograder.catalogue import FILENAME, CatalogueError, answers_with, load_catalogue  # noqa: E402
from autograder.course import SOLUTION_MARKER as MARKER  # noqa: E402
from autograder.course import cell_source, lessons, nbgrader_meta, without_solution_markers  # noqa: E402

HIDDEN_MARKER = re.compile(r"^\s*### (BEGIN|END) HIDDEN TESTS\s*$", re.M)
MAGIC = re.compile(r"^\s*[%!]")
OUTCOMES = ("survived", "named", "generic", "raw", "timeout")

# --------------------------------------------------------------------------------------------
# Mutants


@dataclass
class Mutant:
    kind: str  # "auto" or "catalogue"
    label: str  # the operator (auto) or the catalogue's name
    source: str
    diff: str = ""
    words: str = ""  # catalogue: what the feedback must contain
    result: dict = field(default_factory=dict)


DIM_SWAP = {-1: -2, -2: -1, -3: -2, 0: 1, 1: 0, 2: 1, 3: 2}
# calls whose int arguments are dims: method calls (x.f(dim)) and functions (torch.f(x, dim))
DIM_METHODS = {
    "sum", "mean", "softmax", "log_softmax", "cumsum", "max", "min", "argmax", "argmin", "scatter",
    "gather", "squeeze", "unsqueeze", "var", "std", "amax", "amin", "logsumexp", "sort", "transpose",
    "norm", "flatten", "prod", "all", "any",
}
DIM_FUNCTIONS = {
    "softmax", "log_softmax", "cat", "stack", "sum", "mean", "cumsum", "max", "min", "argmax",
    "sort", "gather", "scatter", "var", "std", "logsumexp", "amax", "transpose", "unsqueeze",
}
DROPPABLE_METHODS = {"exp", "log", "sqrt", "rsqrt", "relu", "float", "double", "clone", "abs", "neg", "t", "item"}
SCALAR_CALLS = {
    "float", "int", "str", "bool", "len", "range", "min", "max", "abs", "round", "isinstance",
    "getattr", "setattr", "hasattr", "print", "enumerate", "zip", "super", "type", "chr", "ord",
}
SIZE_NAME = re.compile(r"(?i)(dim|size|len|steps|temperature|warmup|^[BTCVN]$|^hs$|^nh$|^n_|^k$)")


def _int_value(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return None if inner is None else -inner
    return None


def _int_node(value: int) -> ast.AST:
    return ast.UnaryOp(ast.USub(), ast.Constant(-value)) if value < 0 else ast.Constant(value)


def _name_of(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _is_scale(node: ast.AST) -> bool:
    """Does ``node`` involve a square root, a power or a size (a shape, a length, a *_dim...)?"""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and _name_of(sub.func) in ("sqrt", "rsqrt", "len", "size"):
            return True
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Pow):
            return True
        if isinstance(sub, ast.Attribute) and (sub.attr == "shape" or SIZE_NAME.search(sub.attr)):
            return True
        if isinstance(sub, ast.Name) and SIZE_NAME.search(sub.id):
            return True
    return False


def _tensor_like(node: ast.AST) -> bool:
    if isinstance(node, (ast.Constant, ast.UnaryOp, ast.Starred, ast.Lambda, ast.JoinedStr)):
        return False
    return not (isinstance(node, ast.Call) and _name_of(node.func) in SCALAR_CALLS)


def _sites(tree: ast.AST, lines: set[int]):
    """Every possible mutation: (index of the node in ast.walk order, label, function)."""
    nodes = list(ast.walk(tree))
    skip = set()
    for node in nodes:  # f-strings (error messages) and docstrings are not code to mutate
        if isinstance(node, ast.JoinedStr) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        ):
            skip.update(id(sub) for sub in ast.walk(node))
    for index, node in enumerate(nodes):
        if id(node) in skip or getattr(node, "lineno", None) not in lines:
            continue
        yield from ((index, label, fn) for label, fn in _node_mutations(node))


def _node_mutations(node: ast.AST):
    swaps = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div}
    if isinstance(node, ast.BinOp):
        op = type(node.op)
        if op in swaps:
            yield "swap-op", lambda n, new=swaps[op]: ast.BinOp(n.left, new(), n.right)
        if op is ast.MatMult:
            yield "swap-matmul-operands", lambda n: ast.BinOp(n.right, ast.MatMult(), n.left)
            if not _is_transpose(node.right):
                yield "add-transpose", lambda n: ast.BinOp(n.left, ast.MatMult(), _transposed(n.right))
        if op in (ast.Div, ast.Mult) and _is_scale(node.right):
            yield "drop-scale", lambda n: n.left
            yield "double-scale", lambda n: ast.BinOp(n.left, n.op, ast.BinOp(n.right, ast.Mult(), copy.deepcopy(n.right)))
        if op is ast.Mult and _is_scale(node.left) and not _is_scale(node.right):
            yield "drop-scale", lambda n: n.right
        if op in (ast.Add, ast.Sub) and not (_int_value(node.left) is not None or _int_value(node.right) is not None):
            yield "drop-term", lambda n: n.left  # forgot a term: the residual, the shift, the bias...
            if op is ast.Add:
                yield "drop-term", lambda n: n.right
        if op in (ast.Add, ast.Sub):
            if _int_value(node.right) == 1:
                yield "off-by-one", lambda n: n.left
            elif _int_value(node.left) == 1 and op is ast.Add:
                yield "off-by-one", lambda n: n.right
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        flips = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
        op = type(node.ops[0])
        if op in flips:
            yield "swap-comparison", lambda n, new=flips[op]: ast.Compare(n.left, [new()], n.comparators)
    elif isinstance(node, ast.Call):
        yield from _call_mutations(node)
    elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT", "mH", "H"):
        yield "drop-transpose", lambda n: n.value
    elif isinstance(node, ast.Subscript):
        yield from _index_mutations(node)
    elif isinstance(node, ast.Constant) and type(node.value) is float and node.value not in (0.0,):
        yield "change-constant", lambda n: ast.Constant(n.value * 2)
    if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)) or (
        isinstance(node, ast.Assign) and all(isinstance(t, ast.Attribute) for t in node.targets)
    ):  # a forgotten call (model.train(), optimizer.zero_grad()) or attribute (tying the weights)
        yield "drop-statement", lambda n: ast.Pass()
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and any(isinstance(s, ast.Name) and s.id == node.targets[0].id for s in ast.walk(node.value))
    ):  # a forgotten update: x = layer(x), logits = top_k_filter(logits, k)
        yield "drop-update", lambda n: ast.Pass()


def _is_transpose(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in ("T", "mT")) or (
        isinstance(node, ast.Call) and _name_of(node.func) in ("transpose", "t")
    )


def _transposed(node: ast.AST) -> ast.AST:
    return ast.Call(ast.Attribute(node, "transpose", ast.Load()), [_int_node(-2), _int_node(-1)], [])


def _call_mutations(node: ast.Call):
    name = _name_of(node.func)
    is_method = isinstance(node.func, ast.Attribute) and not (
        isinstance(node.func.value, ast.Name) and node.func.value.id in ("torch", "F", "nn", "math")
    )
    for k, kw in enumerate(node.keywords):
        value = _int_value(kw.value)
        if kw.arg == "dim" and value in DIM_SWAP:
            yield "reduction-dim", _set_keyword(k, _int_node(DIM_SWAP[value]))
        elif kw.arg == "diagonal" and value is not None:
            yield "diagonal", _set_keyword(k, _int_node(value + 1))
            yield "diagonal", _set_keyword(k, _int_node(value - 1))
        elif kw.arg == "keepdim" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
            yield "drop-keepdim", lambda n, k=k: _with_keywords(n, n.keywords[:k] + n.keywords[k + 1:])
        elif kw.arg == "unbiased" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
            yield "unbiased", _set_keyword(k, ast.Constant(not kw.value.value))
        elif kw.arg == "correction" and value is not None:
            yield "correction", _set_keyword(k, _int_node(1 - value if value in (0, 1) else 1))
        elif kw.arg == "descending" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
            yield "descending", _set_keyword(k, ast.Constant(not kw.value.value))
    for k, kw in enumerate(node.keywords):
        if kw.arg is not None and kw.arg != "keepdim" and not _is_default(name, kw):  # forgot generator=, dim=...
            yield "drop-keyword", lambda n, k=k: _with_keywords(n, n.keywords[:k] + n.keywords[k + 1:])
        if kw.arg not in ("keepdim", "unbiased", "descending") and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
            yield "flip-bool", _set_keyword(k, ast.Constant(not kw.value.value))
    if (
        len(node.args) == 1
        and not node.keywords
        and _tensor_like(node.args[0])
        and name not in SCALAR_CALLS
        and not (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id == "nn")
    ):  # a forgotten step: self.norm(x) -> x, torch.sqrt(v) -> v
        yield "drop-call", lambda n: n.args[0]
    if is_method and not node.args and not node.keywords and name in DROPPABLE_METHODS:
        yield "drop-call", lambda n: n.func.value
    positional = []
    if is_method and name in DIM_METHODS:
        positional = range(len(node.args))
    elif not is_method and name in DIM_FUNCTIONS:
        positional = range(1, len(node.args))
    for i in positional:
        value = _int_value(node.args[i])
        others = [_int_value(a) for j, a in enumerate(node.args) if j != i]
        if name == "transpose" and DIM_SWAP.get(value) in others:
            continue  # transpose(1, 1) is no transpose at all: "drop-transpose" covers it
        if value in DIM_SWAP:
            yield "reduction-dim", _set_arg(i, _int_node(DIM_SWAP[value]))
    if is_method and name == "transpose":
        yield "drop-transpose", lambda n: n.func.value
    if is_method and name in ("mean", "sum"):
        other = "sum" if name == "mean" else "mean"
        yield "mean-vs-sum", lambda n, o=other: ast.Call(ast.Attribute(n.func.value, o, ast.Load()), n.args, n.keywords)
    if (
        len(node.args) == 2
        and name not in SCALAR_CALLS
        and all(_tensor_like(a) for a in node.args)
        and not (isinstance(node.args[0], ast.Name) and isinstance(node.args[1], ast.Name) and node.args[0].id == node.args[1].id)
    ):
        yield "swap-args", lambda n: ast.Call(n.func, [n.args[1], n.args[0]], n.keywords)


# keywords whose value is the default: dropping them changes nothing
DEFAULTS = {("topk", "dim"): -1, ("sort", "dim"): -1, ("argsort", "dim"): -1, ("zero_grad", "set_to_none"): True}


def _is_default(name: str, kw: ast.keyword) -> bool:
    if (name, kw.arg) not in DEFAULTS:
        return False
    value = kw.value.value if isinstance(kw.value, ast.Constant) else _int_value(kw.value)
    return value == DEFAULTS[(name, kw.arg)]


def _with_keywords(node: ast.Call, keywords: list) -> ast.Call:
    return ast.Call(node.func, node.args, keywords)


def _set_keyword(k: int, value: ast.AST):
    def apply(n: ast.Call) -> ast.Call:
        keywords = list(n.keywords)
        keywords[k] = ast.keyword(keywords[k].arg, value)
        return _with_keywords(n, keywords)

    return apply


def _set_arg(i: int, value: ast.AST):
    def apply(n: ast.Call) -> ast.Call:
        args = list(n.args)
        args[i] = value
        return ast.Call(n.func, args, n.keywords)

    return apply


def _index_mutations(node: ast.Subscript):
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    for p, part in enumerate(parts):
        if isinstance(part, ast.Slice) and part.step is None:
            lower, upper = _int_value(part.lower) if part.lower else None, _int_value(part.upper) if part.upper else None
            if lower == 1 and part.upper is None:
                yield "shift-slice", _set_part(p, ast.Slice(None, _int_node(-1), None))
            if part.lower is None and upper == -1:
                yield "shift-slice", _set_part(p, ast.Slice(_int_node(1), None, None))
            for bound in ("lower", "upper"):
                expr = getattr(part, bound)
                if expr is None:
                    continue
                for delta in (1, -1):
                    value = _int_value(expr)
                    shifted = _int_node(value + delta) if value is not None else ast.BinOp(
                        expr, ast.Add() if delta > 0 else ast.Sub(), ast.Constant(1)
                    )
                    if value is not None and value + delta == 0 and bound == "upper":
                        continue  # x[:0] is empty: not a plausible slip
                    new = ast.Slice(part.lower, part.upper, None)
                    setattr(new, bound, shifted)
                    yield "shift-bound", _set_part(p, new)
        elif _int_value(part) is not None:
            value = _int_value(part)
            for delta in (1, -1):
                yield "shift-index", _set_part(p, _int_node(value + delta))


def _set_part(p: int, new: ast.AST):
    def apply(n: ast.Subscript) -> ast.Subscript:
        if isinstance(n.slice, ast.Tuple):
            elts = list(n.slice.elts)
            elts[p] = new
            return ast.Subscript(n.value, ast.Tuple(elts, ast.Load()), n.ctx)
        return ast.Subscript(n.value, new, n.ctx)

    return apply


def _replace(tree: ast.AST, index: int, fn) -> ast.AST:
    """A copy of ``tree`` whose ``index``-th node (ast.walk order) is replaced by ``fn(node)``."""
    tree = copy.deepcopy(tree)
    nodes = list(ast.walk(tree))
    target = nodes[index]
    new = fn(copy.deepcopy(target))
    for parent in nodes:
        for name, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, name, new)
                return ast.fix_missing_locations(tree)
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is target:
                        value[i] = new
                        return ast.fix_missing_locations(tree)
    raise LookupError("node not found")


def student_lines(raw: str) -> tuple[str, set[int]]:
    """The answer with its markers removed (as the harness builds it), and the line numbers (1-based,
    in that text) that lie between ``### BEGIN SOLUTION`` and ``### END SOLUTION``."""
    segments, pos, inside = [], 0, False
    for match in MARKER.finditer(raw):
        segments.append((raw[pos:match.start()], inside))
        inside, pos = match.group(1) == "BEGIN", match.end()
    segments.append((raw[pos:], inside))
    text = "".join(seg for seg, _ in segments)
    if text != without_solution_markers(raw):  # the markers are laid out in a way this reader does not follow
        text = without_solution_markers(raw)
        return text, set(range(1, text.count("\n") + 2))
    lines, line = set(), 1
    for seg, inside in segments:
        n = seg.count("\n")
        if inside:
            lines.update(range(line, line + n + (0 if seg.endswith("\n") else 1)))
        line += n
    return text, lines


def auto_mutants(raw: str, limit: int, seed: str) -> list[Mutant]:
    text, lines = student_lines(raw)
    tree = ast.parse(text)
    original = ast.unparse(tree)
    seen, found = {original}, []
    for index, label, fn in _sites(tree, lines):
        try:
            source = ast.unparse(_replace(tree, index, fn))
            compile(source, "<mutant>", "exec")
        except (SyntaxError, ValueError, TypeError, LookupError, RecursionError):
            continue
        if source in seen:
            continue
        seen.add(source)
        found.append(Mutant("auto", label, source, _diff(original, source)))
    if len(found) > limit:
        rng = random.Random(zlib.crc32(seed.encode()))
        keep = sorted(rng.sample(range(len(found)), limit))
        found = [found[i] for i in keep]
    return found


def _diff(before: str, after: str) -> str:
    old = before.splitlines()
    new = after.splitlines()
    changed = [line for line in difflib.unified_diff(old, new, lineterm="", n=0) if line[:1] in "-+" and line[:3] not in ("---", "+++")]
    return "  ".join(" ".join(line.split()) for line in changed)[:600]


#: where the catalogues are read from: None, the lessons' own; or a folder of
#: ``<assignment>/catalogue.toml`` files (``--catalogue``), mistakes written apart from the checks
CATALOGUE_DIR: Path | None = None


@functools.lru_cache(maxsize=None)
def _catalogue(assignment: str):
    (les,) = [le for le in lessons(ROOT) if le.assignment == assignment]
    try:
        return load_catalogue(les, CATALOGUE_DIR / assignment / FILENAME if CATALOGUE_DIR else None)
    except CatalogueError as exc:  # a catalogue being edited: say so, run the rest
        print(f"note: the catalogue of {assignment} cannot be read ({exc}); no catalogue mutants", file=sys.stderr)
        return None


def catalogue_mutants(assignment: str, exercise: str) -> list[Mutant]:
    catalogue = _catalogue(assignment)
    if catalogue is None:
        return []
    before = catalogue.lesson.solution_answers()[exercise]
    found = []
    for name, mistake in catalogue.mistakes.items():
        if mistake.exercise != exercise:
            continue
        try:  # ``also`` (edits of other exercises) does not change this exercise's own answer
            source = answers_with(catalogue.lesson, {exercise: mistake.edits})[exercise]
        except CatalogueError as exc:
            found.append(Mutant("catalogue", name, "", words=mistake.feedback_says,
                                result={"outcome": "stale", "message": str(exc)}))
            continue
        found.append(Mutant("catalogue", name, source, _text_diff(before, source), words=mistake.feedback_says))
    return found


def _text_diff(before: str, after: str) -> str:
    return _diff(before, after)


# --------------------------------------------------------------------------------------------
# Running: a process per lesson executes the notebook's cells in order; at an exercise's answer
# cell it forks one child per mutant (and one for the unchanged solution, the baseline).


def _silence(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


EXCEPTION_NAME = re.compile(r"[A-Z]\w*(Error|Exception|Warning|Interrupt|Exit)|StopIteration")


def _collect_errors(value, found: list[str]) -> None:
    if isinstance(value, str):
        if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Warning|Interrupt|Exit|Iteration): ", value):
            found.append(value)
    elif isinstance(value, dict):
        names = [v for v in value.values() if isinstance(v, str) and EXCEPTION_NAME.fullmatch(v)]
        for name in names:  # {"raised": "TypeError", "message": "..."}
            found.extend(f"{name}: {v}" for v in value.values() if isinstance(v, str) and v != name)
        for item in value.values():
            _collect_errors(item, found)
    elif isinstance(value, list):
        for item in value:
            _collect_errors(item, found)


def _child(namespace: dict, source: str, tests: list[tuple[str, str]]) -> dict:
    """Run in the forked child: the answer, then its test cells, until one fails."""
    import helpers.checks.core as core

    errors: list[str] = []
    decode = core.decode

    def watching_decode(value, *args):  # every error text the probes handed to the judges
        _collect_errors(value, errors)
        return decode(value, *args)

    core.decode = watching_decode
    step = "answer"
    try:
        # named and kept in linecache as the grader's child does with a cell ("<cell N>"), so that
        # the checks can show the student's line
        linecache.cache["<cell answer>"] = (len(source), None, source.splitlines(keepends=True), "<cell answer>")
        exec(compile(source, "<cell answer>", "exec"), namespace)
        for step, code in tests:
            exec(compile(code, f"<{step}>", "exec"), namespace)
    except core.CheckFailed as exc:
        return {"outcome": "failed", "step": step, "message": str(exc)[:4000], "errors": errors}
    except BaseException as exc:  # noqa: BLE001 - whatever escapes is what the student sees
        return {"outcome": "raw", "step": step, "message": f"{type(exc).__name__}: {exc}"[:4000]}
    return {"outcome": "survived"}


def _run_forked(namespace: dict, source: str, tests, timeout: float, tmp: str) -> dict:
    fd, path = tempfile.mkstemp(dir=tmp, suffix=".json")
    os.close(fd)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            _silence(os.devnull)
            result = _child(namespace, source, tests)
            with open(path, "w", encoding="utf-8") as out:
                json.dump(result, out)
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    status = _wait(pid, timeout)
    seconds = round(time.perf_counter() - start, 3)
    if status is None:
        return {"outcome": "timeout", "message": f"still running after {timeout:g} s", "seconds": seconds}
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError):
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
        result = {"outcome": "raw", "message": f"the child died ({how}) without a verdict"}
    finally:
        os.unlink(path)
    result["seconds"] = seconds
    return result


def _wait(pid: int, timeout: float):
    """The child's wait status, or None after killing it when it ran past ``timeout``."""
    deadline = time.monotonic() + timeout
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(0.02, left))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def run_lesson(task: dict) -> dict:
    """In a process of its own: execute the lesson's cells in order and test every mutant."""
    _silence(task["log"])
    results: dict[str, dict] = {}
    notes: list[str] = []
    try:
        _run_lesson(task, results, notes)
    except BaseException as exc:  # noqa: BLE001 - report what ran, and why the rest did not
        notes.append(f"the lesson's process stopped: {type(exc).__name__}: {str(exc)[:300]}")
    return {"assignment": task["assignment"], "results": results, "notes": notes}


def _run_lesson(task: dict, results: dict, notes: list) -> None:
    import torch

    torch.set_num_threads(1)
    namespace: dict = {"__name__": "__main__"}
    cells = task["cells"]
    last = max((i for i, c in enumerate(cells) if c["grade_id"] in task["mutants"]), default=-1)
    tests_of: dict[str, list[tuple[str, str]]] = {}
    for cell in cells:
        if cell["grade"] and cell["owner"]:
            tests_of.setdefault(cell["owner"], []).append((cell["grade_id"], HIDDEN_MARKER.sub("", cell["source"])))
    for i, cell in enumerate(cells[: last + 1]):
        gid = cell["grade_id"]
        if cell["solution"]:
            answer = without_solution_markers(cell["source"])
            if gid in task["mutants"]:
                tests = tests_of.get(gid, [])
                baseline = _run_forked(namespace, answer, tests, task["timeout"], task["tmp"])
                outcomes = []
                for mutant in task["mutants"][gid]:
                    if mutant.get("result"):
                        outcomes.append(mutant["result"])
                    else:
                        outcomes.append(_run_forked(namespace, mutant["source"], tests, task["timeout"], task["tmp"]))
                results[gid] = {"baseline": baseline, "outcomes": outcomes}
            source = answer
        elif cell["grade"]:
            continue  # the solution's own tests: the baseline child ran them
        else:
            source = "".join(line for line in cell["source"].splitlines(keepends=True) if not MAGIC.match(line))
        try:
            exec(compile(source, f"<cell {i}>", "exec"), namespace)
        except BaseException as exc:  # noqa: BLE001 - a plain cell failing is a note, not the end
            notes.append(f"cell {i} raised {type(exc).__name__}: {str(exc)[:200]}")
        torch.set_num_threads(1)  # a cell may change it; children share the cores with each other
        try:
            import matplotlib.pyplot as plt

            plt.close("all")
        except ImportError:
            pass


# --------------------------------------------------------------------------------------------
# Judging the messages


EVIDENCE_ONLY = re.compile(r"[^\n]*?[^:\n]: expected [-+.\w]+, got [-+.\w]+\.?")
EXCEPTION = re.compile(r"\b(?:[A-Z]\w*(?:Error|Exception)|StopIteration): ")


def is_generic(message: str, errors: list[str]) -> bool:
    """Does the message only say that the output is wrong, or only repeat an exception?

    Generic: "... differs from the reference"; "<what>: expected A, got B." with nothing else; or
    an exception of the student's code, ``TypeName: text``, preceded by no more than where it
    happened ("<call> raised", no full sentence) and followed by nothing. An explanation before it
    ("... then project. It raised ...", "... (The error itself: ...)") or after it ("... raised
    IndexError: .... k = 5 is more than ...") makes it named.
    """
    text = message.strip()
    if "differs from the reference" in text:
        return True
    if EVIDENCE_ONLY.fullmatch(text) and text.count(": ") == 1:
        return True
    errors = [e.strip() for e in errors]
    found = [(text.find(e), len(e)) for e in errors if len(e) >= 8 and e in text]
    if found:  # the exact text the probe recorded
        start, length = min(found, key=lambda f: (f[0], -f[1]))
        end = start + length
    else:  # no error came through the probe's data: up to the end of its line
        match = EXCEPTION.search(text)
        if not match:
            return False
        start = match.start()
        end = re.compile(r"\n(?![ \t*])").search(text, start)  # indented lines continue the error
        end = end.start() if end else len(text)
    before, after = text[:start], text[end:]
    if re.sub(r"[\s.;:,)\]'\"]+", "", after):
        return False  # something follows the error: an explanation
    if re.search(r"[.;!?]\s+[A-Z(]", before):
        return False  # a sentence before it: "concatenate along the last dimension. It raised ..."
    return not before.strip() or re.search(r"\b(raised|failed with)\s*:?\s*$", before) is not None


def verdict(result: dict) -> str:
    outcome = result.get("outcome")
    if outcome in ("survived", "raw", "timeout", "stale"):
        return outcome
    return "generic" if is_generic(result.get("message", ""), result.get("errors", [])) else "named"


# --------------------------------------------------------------------------------------------
# The command


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def summarise(auto: list[Mutant], catalogue: list[Mutant]) -> dict:
    counts = {k: 0 for k in OUTCOMES}
    for m in auto:
        counts[m.result["verdict"]] += 1
    caught = counts["named"] + counts["generic"] + counts["raw"]
    runnable = [m for m in catalogue if m.result["verdict"] != "stale"]
    cat_caught = sum(m.result["verdict"] in ("named", "generic", "raw") for m in runnable)
    cat_right = sum(bool(m.result.get("named_right")) for m in runnable)
    return {
        "mutants": len(auto),
        **counts,
        "caught": caught,
        "caught_pct": _pct(caught, len(auto)),
        "named_pct": _pct(counts["named"], caught),
        "generic_pct": _pct(counts["generic"], caught),
        "raw_pct": _pct(counts["raw"], caught),
        "catalogue": len(runnable),
        "catalogue_stale": len(catalogue) - len(runnable),
        "catalogue_caught_pct": _pct(cat_caught, len(runnable)),
        "catalogue_named_right_pct": _pct(cat_right, len(runnable)),
        "catalogue_caught": cat_caught,
        "catalogue_named_right": cat_right,
    }


def _total(rows: list[dict]) -> dict:
    keys = ("mutants", *OUTCOMES, "caught", "catalogue", "catalogue_stale", "catalogue_caught", "catalogue_named_right")
    total = {k: sum(r[k] for r in rows) for k in keys}
    total["caught_pct"] = _pct(total["caught"], total["mutants"])
    total["named_pct"] = _pct(total["named"], total["caught"])
    total["generic_pct"] = _pct(total["generic"], total["caught"])
    total["raw_pct"] = _pct(total["raw"], total["caught"])
    total["catalogue_caught_pct"] = _pct(total["catalogue_caught"], total["catalogue"])
    total["catalogue_named_right_pct"] = _pct(total["catalogue_named_right"], total["catalogue"])
    return total


def _fmt(value) -> str:
    return "-" if value is None else f"{value:g}"


def _row(name: str, r: dict) -> str:
    return (
        f"{name:42s} {r['mutants']:4d} {r['survived']:4d} {_fmt(r['caught_pct']):>6s} {_fmt(r['named_pct']):>6s} "
        f"{_fmt(r['generic_pct']):>6s} {_fmt(r['raw_pct']):>6s} {r['timeout']:4d}   "
        f"{r['catalogue']:4d} {_fmt(r['catalogue_caught_pct']):>6s} {_fmt(r['catalogue_named_right_pct']):>6s}"
    )


HEADER = (
    f"{'exercise':42s} {'mut':>4s} {'surv':>4s} {'caught':>6s} {'named':>6s} {'gener':>6s} {'raw':>6s} {'tout':>4s}   "
    f"{'cat':>4s} {'caught':>6s} {'right':>6s}"
)


def _one_line(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lesson", action="append", default=[], help="NN: only this lesson (repeatable)")
    parser.add_argument("--limit", type=int, default=25, help="automatic mutants per exercise (default 25)")
    parser.add_argument("--show", action="store_true", help="print every mutant's diff and message")
    parser.add_argument("--jobs", type=int, default=2, help="lessons run side by side, each in its own process (default 2)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per mutant (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="which mutants are kept when there are more than --limit")
    parser.add_argument("--no-catalogue", action="store_true", help="only the automatic mutants")
    parser.add_argument("--catalogue", type=Path, metavar="DIR",
                        help="read DIR/<assignment>/catalogue.toml instead of the lessons' own catalogues "
                             "(mistakes written by someone who has not read the checks); --limit 0: those alone")
    args = parser.parse_args(argv)
    global CATALOGUE_DIR
    CATALOGUE_DIR = args.catalogue

    wanted = {n.zfill(2) for n in args.lesson}
    chosen = [les for les in lessons(ROOT) if not wanted or les.assignment[:2] in wanted]
    if not chosen:
        parser.error(f"no lesson matches {sorted(wanted)}")
    started = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="mutations-")
    tasks, plans = [], {}
    for les in chosen:
        cells, mutants = [], {}
        for cell in les.notebook["cells"]:
            if cell["cell_type"] != "code":
                continue
            meta = nbgrader_meta(cell)
            gid = meta.get("grade_id")
            owner = next((e for e in les.exercises if gid and gid.startswith(e + "-")), None)
            cells.append({"grade_id": gid, "solution": bool(meta.get("solution")), "grade": bool(meta.get("grade")),
                          "owner": owner, "source": cell_source(cell)})
            if meta.get("solution") and gid in les.exercises:
                auto = auto_mutants(cell_source(cell), args.limit, f"{args.seed}/{les.assignment}/{gid}")
                cat = [] if args.no_catalogue else catalogue_mutants(les.assignment, gid)
                plans[(les.assignment, gid)] = (auto, cat)
                mutants[gid] = [{"source": m.source, "result": m.result} for m in auto + cat]
        tasks.append({"assignment": les.assignment, "cells": cells, "mutants": mutants, "timeout": args.timeout,
                      "tmp": tmp, "log": os.path.join(tmp, f"{les.assignment}.log")})
    tasks.sort(key=lambda t: -sum(len(v) for v in t["mutants"].values()))  # the longest first

    context = multiprocessing.get_context("fork")
    with context.Pool(max(1, args.jobs), maxtasksperchild=1) as pool:
        done = {r["assignment"]: r for r in pool.imap_unordered(run_lesson, tasks)}

    rows, report = [], {}
    print(HEADER)
    for les in chosen:
        outcome = done[les.assignment]
        for note in outcome["notes"]:
            print(f"  note, {les.assignment}: {note}")
        for gid in les.exercises:
            if (les.assignment, gid) not in plans:
                continue
            auto, cat = plans[(les.assignment, gid)]
            ran = outcome["results"].get(gid, {"baseline": {"outcome": "missing"}, "outcomes": []})
            lost = {"outcome": "timeout", "message": "no verdict: the lesson's process stopped before this mutant"}
            outcomes = ran["outcomes"] + [lost] * (len(auto) + len(cat) - len(ran["outcomes"]))
            for m, result in zip(auto + cat, outcomes, strict=True):
                m.result = dict(result)
                m.result["verdict"] = verdict(result)
                if m.kind == "catalogue":
                    m.result["named_right"] = m.result["verdict"] != "survived" and m.words in m.result.get("message", "")
            summary = summarise(auto, cat)
            baseline = ran["baseline"]
            summary["baseline"] = baseline.get("outcome")
            name = f"{les.assignment[:2]} {gid}"
            rows.append(summary)
            report[f"{les.assignment}/{gid}"] = summary
            print(_row(name, summary))
            if baseline.get("outcome") != "survived":
                print(f"  !! the unchanged solution does not pass: {_one_line(baseline.get('message', baseline), 300)}")
            if args.show:
                for m in auto + cat:
                    tag = m.result["verdict"] + (" right" if m.result.get("named_right") else "")
                    print(f"    [{tag}] {m.kind} {m.label}{' (' + m.words + ')' if m.words else ''}: {_one_line(m.diff, 300)}")
                    if m.result.get("message"):
                        print(f"        -> {m.result.get('step', '')}: {_one_line(m.result['message'], 400)}")
    total = _total(rows)
    print(_row("TOTAL", total))
    print(
        "mut: automatic mutants; surv: passed every test; caught: % of mutants; named/gener/raw: % of the caught; "
        "tout: timeouts; cat: catalogue mistakes, caught %, and % whose message has the catalogue's words"
    )
    print(f"{time.perf_counter() - started:.0f} s")
    print(json.dumps({"exercises": report, "total": total}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
