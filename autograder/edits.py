"""One-edit variants of an answer cell's source, for ``autograder.repair``.

Each variant changes one thing a student's slip can get wrong: a condition read the other way, a
comparison strict where it should not be (or the reverse), ``and`` for ``or``, ``is`` for ``==``,
``//`` for ``/``, sum for mean, a ``return`` inside a loop, an accumulator reset inside its loop, two
neighbouring statements in each other's place, a statement too many, one of the cell's own names or
attributes in place of a sibling, the notebook's global for the function's own, two arguments or an
unpacking's names in each other's place, an axis, ``keepdim``, a row where a column was meant, a
result thrown away, a bound off by one. The variants are text for the child to run; nothing here
runs them. The kinds are tried in ``KINDS``' order, changes on the student's own lines first
(``edits``), at most ``Limits.edits`` of them.
"""

from __future__ import annotations

import ast
import builtins
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from autograder.protocol import Limits

MAX_EDITS = Limits.edits  # variants tried per answer by default, the likeliest first
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "logsumexp", "norm", "var", "std", "prod", "all", "any"}
AXIS_CALLS = REDUCTIONS | {"softmax", "log_softmax", "cumsum", "cat", "stack", "argmax", "argmin", "flip", "unsqueeze",
                           "squeeze", "topk", "sort", "argsort", "gather", "split", "chunk", "size", "cummax"}
OUT_OF_PLACE = {"masked_fill", "add", "sub", "mul", "div", "clamp", "clamp_min", "clamp_max", "fill", "zero",
                "copy", "unsqueeze", "squeeze", "transpose", "t", "requires_grad", "normal", "uniform", "sort"}
AXES = (-1, -2, 0, 1, 2)
EMPTY = (ast.List, ast.Dict, ast.Set, ast.Tuple)


@dataclass(frozen=True)
class Edit:
    """``source``: the whole cell with the one change; ``line``: its line in the student's cell;
    ``before``/``after``: the changed piece of code, as written and as changed."""

    source: str
    line: int
    before: str
    after: str
    moved: str = ""  # for a statement moved or left out: what became of it ("moved before its loop", "left out")

    def describe(self) -> str:
        if self.moved:
            return f"`{self.before}` (line {self.line}) {self.moved}"
        return f"`{self.before}` (line {self.line}) as `{self.after}`"


def _segment(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(source, node) or ast.unparse(node)
    return " ".join(text.split())


def _nodes(tree: ast.AST) -> list[ast.AST]:
    return list(ast.walk(tree))


# Each kind of edit yields (node index in ast.walk order, change): change(copied node, copied tree)
# alters the copy in place and returns the node whose code is shown as the edit's "after".
Change = Callable[[ast.AST, ast.AST], ast.AST]


def _negations(nodes: list[ast.AST]) -> Iterator[tuple[int, Change]]:
    for i, node in enumerate(nodes):
        test = getattr(node, "test", None)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in TWINS:
            continue  # `is` / `==` / `in` read the other way: the comparison's own twin says it (is not, !=, not in)
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            def change(n, tree):
                test = n.test
                n.test = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else \
                    ast.UnaryOp(ast.Not(), test)
                return n.test
            yield nodes.index(node.test), _on_parent(i, "test", change)


def _on_parent(parent_index: int, _field: str, change) -> Change:
    """A change made through the parent node at ``parent_index`` (shown: its new ``_field``)."""
    def apply(_node, tree):
        return change(_nodes(tree)[parent_index], tree)
    return apply


SWAPPED_COMPARISONS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                       ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


TWINS = {ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot}


def _comparisons(nodes):
    for i, node in enumerate(nodes):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAPPED_COMPARISONS:
            def change(n, tree):
                n.ops = [SWAPPED_COMPARISONS[type(n.ops[0])]()]
                return n
            yield i, change
        if isinstance(node, ast.BoolOp):
            def change(n, tree):
                n.op = ast.Or() if isinstance(n.op, ast.And) else ast.And()
                return n
            yield i, change


def _loops(nodes):
    """A return or break that ends a loop's body unconditionally: after the loop instead; a name set to
    an empty or zero value inside a loop and added to in it: set before the loop instead."""
    for i, node in enumerate(nodes):
        if not isinstance(node, (ast.For, ast.While)) or not node.body:
            continue
        last = node.body[-1]
        if isinstance(last, ast.Return) and len(node.body) > 1:
            yield nodes.index(last), _move_after_loop(i)
        for stmt in node.body[:-1]:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and _is_start_value(stmt.value) and _grows(node.body, stmt.targets[0].id)):
                yield nodes.index(stmt), _move_before_loop(i, node.body.index(stmt))


def _is_start_value(value: ast.AST) -> bool:
    if isinstance(value, ast.Constant):
        return value.value in (0, 0.0, "", b"", None) and not isinstance(value.value, bool)
    if isinstance(value, EMPTY):
        return not getattr(value, "elts", None) and not getattr(value, "keys", None)
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in {
        "list", "dict", "set", "str", "bytearray"} and not value.args


def _grows(body: list[ast.stmt], name: str) -> bool:
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == name:
                return True
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                    and n.func.value.id == name and n.func.attr in {"append", "extend", "add", "update", "insert"}):
                return True
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name) \
                    and n.value.id == name:
                return True
    return False


def _container_of(tree: ast.AST, target: ast.AST) -> tuple[list, int] | None:
    for parent in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and target in block:
                return block, block.index(target)
    return None


def _move_after_loop(loop_index: int) -> Change:
    def change(_node, tree):  # noqa: ARG001
        loop = _nodes(tree)[loop_index]
        last = loop.body.pop()
        block, at = _container_of(tree, loop)
        block.insert(at + 1, last)
        return last
    change.moved = "moved after its loop (one indent less)"
    return change


def _move_before_loop(loop_index: int, stmt_index: int) -> Change:
    def change(_node, tree):
        loop = _nodes(tree)[loop_index]
        stmt = loop.body.pop(stmt_index)
        block, at = _container_of(tree, loop)
        block.insert(at, stmt)
        return stmt
    change.moved = "moved before its loop"
    return change


def _orders(nodes):
    """Two neighbouring statements of one block in each other's place (a value used before it is updated,
    or updated before it is read)."""
    for parent in nodes:
        for field in ("body", "orelse"):
            block = getattr(parent, field, None)
            if not isinstance(block, list):
                continue
            for k in range(len(block) - 1):
                a, b = block[k], block[k + 1]
                if isinstance(a, STRUCTURE) or isinstance(b, STRUCTURE) or ast.dump(a) == ast.dump(b):
                    continue
                yield nodes.index(b), _swap_statements(nodes.index(parent), field, k)


STRUCTURE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Return, ast.Expr)


def _swap_statements(parent_index: int, field: str, k: int) -> Change:
    def change(_node, tree):
        block = getattr(_nodes(tree)[parent_index], field)
        block[k], block[k + 1] = block[k + 1], block[k]
        return block[k]
    change.moved = "moved one statement earlier, before the line above it"
    return change


def _omissions(nodes):
    """A statement left out (a step too many: the mean subtracted in an RMS norm, a second scaling): an
    assignment or a call of its own, in a block that keeps another statement."""
    for parent in nodes:
        for field in ("body", "orelse"):
            block = getattr(parent, field, None)
            if not isinstance(block, list) or len(block) < 2:
                continue
            for k, stmt in enumerate(block):
                if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or (
                        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
                    yield nodes.index(stmt), _leave_out(nodes.index(parent), field, k)


def _leave_out(parent_index: int, field: str, k: int) -> Change:
    def change(_node, tree):
        return getattr(_nodes(tree)[parent_index], field).pop(k)
    change.moved = "left out"
    return change


SWAPPED_OPERATORS = {ast.FloorDiv: ast.Div, ast.Div: ast.FloorDiv}
SWAPPED_CALLS = {"sum": "mean", "mean": "sum", "amax": "amin", "amin": "amax", "argmax": "argmin", "argmin": "argmax"}


def _operators(nodes):
    """``//`` for ``/`` (or the reverse), sum for mean, max for min, ``is`` for ``==``, and the names an
    assignment unpacks into in each other's place."""
    for i, node in enumerate(nodes):
        if isinstance(node, ast.BinOp) and type(node.op) in SWAPPED_OPERATORS:
            def change(n, tree):
                n.op = SWAPPED_OPERATORS[type(n.op)]()
                return n
            yield i, change
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SWAPPED_CALLS:
            def change(n, tree):
                n.func.attr = SWAPPED_CALLS[n.func.attr]
                return n
            yield i, change
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in (ast.Is, ast.IsNot):
            def change(n, tree):
                n.ops = [ast.Eq() if isinstance(n.ops[0], ast.Is) else ast.NotEq()]
                return n
            yield i, change
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) and len(node.targets[0].elts) >= 2:
            for k in range(len(node.targets[0].elts) - 1):
                def change(n, tree, k=k):
                    elts = n.targets[0].elts
                    elts[k], elts[k + 1] = elts[k + 1], elts[k]
                    return n.targets[0]
                yield nodes.index(node.targets[0]), _on_parent(i, "targets", change)


def _identities(nodes):
    """Every ``is`` of one line as ``==`` (``is not`` as ``!=``) at once: the same slip written twice, as in
    ``ids[i] is a and ids[i + 1] is b``."""
    lines: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in (ast.Is, ast.IsNot) \
                and not _is_none(node.comparators[0]):
            lines.setdefault(node.lineno, []).append(i)
    for line, found in lines.items():
        if len(found) < 2:
            continue
        owner = next((i for i, n in enumerate(nodes) if isinstance(n, (ast.If, ast.While, ast.Assign, ast.Return, ast.Expr))
                      and n.lineno == line), None)
        if owner is None:
            continue
        shown = nodes[owner].test if isinstance(nodes[owner], (ast.If, ast.While)) else nodes[owner]
        at = nodes.index(shown)

        def change(_node, tree, found=found, at=at):
            for i in found:
                n = _nodes(tree)[i]
                n.ops = [ast.Eq() if isinstance(n.ops[0], ast.Is) else ast.NotEq()]
            return _nodes(tree)[at]
        yield nodes.index(shown), change


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _argument_swaps(nodes):
    for i, node in enumerate(nodes):
        if isinstance(node, ast.Call) and len(node.args) >= 2:
            for k in range(len(node.args) - 1):
                a, b = node.args[k], node.args[k + 1]
                if isinstance(a, ast.Starred) or isinstance(b, ast.Starred) or ast.dump(a) == ast.dump(b):
                    continue

                def change(n, tree, k=k):
                    n.args[k], n.args[k + 1] = n.args[k + 1], n.args[k]
                    return n
                yield i, change


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _keepdims(nodes):
    for i, node in enumerate(nodes):
        if isinstance(node, ast.Call) and _call_name(node) in REDUCTIONS and \
                not any(k.arg == "keepdim" for k in node.keywords):
            has_dim = any(k.arg in ("dim", "axis") for k in node.keywords) or (
                node.args and isinstance(node.func, ast.Attribute) and not _is_torch(node.func.value)) or len(node.args) >= 2
            if has_dim:
                def change(n, tree):
                    n.keywords.append(ast.keyword("keepdim", ast.Constant(True)))
                    return n
                yield i, change


def _is_torch(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in {"torch", "F"}


def _int_of(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, int):
        return -node.operand.value
    return None


def _constant(value: int) -> ast.AST:
    return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


def _axes(nodes):
    """An axis given as a number (``dim=``, a reduction's or softmax's first argument, ``.shape[k]``,
    ``transpose``'s two): each other axis of ``AXES`` in its place (the whole call shown)."""
    for i, node in enumerate(nodes):
        sites = []
        if isinstance(node, ast.Call) and _call_name(node) in AXIS_CALLS | {"transpose", "swapaxes"}:
            sites += [k.value for k in node.keywords if k.arg in ("dim", "dim0", "dim1", "axis")]
            positional = node.args[1:] if _is_torch(getattr(node.func, "value", None)) else node.args
            if _call_name(node) in {"transpose", "swapaxes"}:
                sites += positional[:2]
            elif positional and _call_name(node) not in {"topk", "split", "chunk", "gather"}:
                sites.append(positional[0])
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            sites.append(node.slice)
        for site in sites:
            value = _int_of(site)
            for other in () if value is None else AXES:
                if other != value:
                    yield i, _put(nodes.index(site), _constant(other), shown=i)


def _put(index: int, new: ast.AST, shown: int | None = None) -> Change:
    """A change that puts ``new`` at ``index``; shows the node at ``shown`` (default: ``new``)."""
    def change(_node, tree):
        _replace(tree, index, copy.deepcopy(new))
        return _nodes(tree)[shown] if shown is not None else _nodes(tree)[index]
    return change


def _replace(tree: ast.AST, index: int, new: ast.AST) -> ast.AST:
    """Put ``new`` where the node at ``index`` (ast.walk order) is; returns ``new``."""
    old = _nodes(tree)[index]
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return new
            if isinstance(value, list) and any(v is old for v in value):
                value[[id(v) for v in value].index(id(old))] = new
                return new
    raise ValueError("node not found")


def _bounds(nodes):
    """An integer bound of range() or of a slice one off, or its ``- 1``/``+ 1`` dropped."""
    for i, node in enumerate(nodes):
        places = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            places = list(node.args)
        elif isinstance(node, ast.Slice):
            places = [p for p in (node.lower, node.upper) if p is not None]
        for place in places:
            value = _int_of(place)
            if value is not None:
                for new in (value - 1, value + 1):
                    yield i, _put(nodes.index(place), _constant(new), shown=i)
            elif isinstance(place, ast.BinOp) and isinstance(place.op, (ast.Add, ast.Sub)) and _int_of(place.right) == 1:
                yield i, _put(nodes.index(place), place.left, shown=i)


def _discarded(nodes):
    """A method that returns a new tensor, called as a statement: its result kept (the in-place form)."""
    for i, node in enumerate(nodes):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) \
                and node.value.func.attr in OUT_OF_PLACE:
            def change(n, tree):
                n.value.func.attr += "_"
                return n.value
            yield nodes.index(node.value), _on_parent(i, "value", change)


def _siblings(nodes):
    """An attribute of an object read in place of another of the same object's (self.query for self.key,
    config.n_vocab for config.max_len), or a name in place of one set in parallel with it."""
    seen: dict[str, list[str]] = {}
    methods = _tensor_names()
    for node in nodes:
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) not in MODULES and node.attr not in methods:
            owner = ast.unparse(node.value)
            if node.attr not in seen.setdefault(owner, []):
                seen[owner].append(node.attr)
    for i, node in enumerate(nodes):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr not in methods:
            for other in seen.get(ast.unparse(node.value), []):
                if other != node.attr and not other.startswith("__"):
                    def change(n, tree, other=other):
                        n.attr = other
                        return n
                    yield i, change
    # names: parameters of one function, and names assigned in one statement or in neighbouring ones
    for func in (n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        params = [a.arg for a in func.args.args + func.args.kwonlyargs if a.arg not in ("self", "cls")]
        stored = [n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        local = set(params) | set(stored)
        for i, node in enumerate(nodes):
            if not isinstance(node, ast.Name) or not _inside(func, node):
                continue
            if isinstance(node.ctx, ast.Load):  # read: another of the function's names (self too: base for self)
                others = local - {node.id} if node.id in local or node.id == "self" else set()
            elif isinstance(node.ctx, ast.Store) and node.id in stored and stored.count(node.id) == 1:
                others = {name for name in local - {node.id} if name in stored or name in params}  # the result kept under a new name
            else:
                continue
            for other in sorted(others):
                def change(n, tree, other=other):
                    n.id = other
                    return n
                yield i, change


def _columns(nodes):
    """A one-axis operand of a comparison or an arithmetic operation made a column (``[:, None]``): a (B,)
    against a (T,) pairs entry i with entry i where every pair was meant."""
    for i, node in enumerate(nodes):
        operands = []
        if isinstance(node, ast.Compare) and len(node.comparators) == 1:
            operands = [node.left, node.comparators[0]]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.BitAnd, ast.BitOr)):
            operands = [node.left, node.right]
        for operand in operands:
            if isinstance(operand, (ast.Name, ast.Attribute, ast.Call)) and not isinstance(operand, ast.Constant):
                column = ast.Subscript(copy.deepcopy(operand), ast.Tuple([ast.Slice(), ast.Constant(None)], ast.Load()),
                                       ast.Load())
                yield i, _put(nodes.index(operand), column, shown=i)


MODULES = {"torch", "F", "nn", "math", "np", "torch.nn", "torch.nn.functional", "re", "json", "collections"}


def _is_known(node: ast.AST, lines: list[str], known: set[str]) -> bool:
    """Every line of ``node`` is a line of the reference, as written (trailing spaces aside)."""
    first, end = getattr(node, "lineno", 0), getattr(node, "end_lineno", 0) or getattr(node, "lineno", 0)
    return bool(first) and all(lines[k - 1].rstrip() in known for k in range(first, end + 1) if k <= len(lines))


def _tensor_names() -> set[str]:
    """What a tensor or a module has of its own (view, shape, forward, parameters...): never a sibling."""
    import torch

    return set(dir(torch.Tensor)) | set(dir(torch.nn.Module))


def _globals(nodes):
    """A name a function reads from the notebook (not its own, not a builtin) where its own is meant: one of
    its parameters, or an attribute of the same name that the cell reads or sets (self.head_dim for head_dim)."""
    chains: dict[str, list[str]] = {}
    for node in nodes:
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) not in MODULES:
            text = ast.unparse(node)
            if text not in chains.setdefault(node.attr, []):
                chains[node.attr].append(text)
    for func in (n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        params = [a.arg for a in func.args.args + func.args.kwonlyargs]
        local = set(params) | {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for i, node in enumerate(nodes):
            if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)) or node.id in local \
                    or node.id in MODULES or hasattr(builtins, node.id) or not _inside(func, node):
                continue
            own = [p for p in params if p not in ("self", "cls")] + chains.get(node.id, [])
            if "self" in params and f"self.{node.id}" not in own:
                own.append(f"self.{node.id}")
            for other in own:
                yield i, _put(i, ast.parse(other, mode="eval").body)


def _targets(stmt):
    return stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]


def _inside(func: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(func))


# the likeliest first; a sibling name or attribute has the most variants, so it comes last
KINDS = (_negations, _comparisons, _loops, _discarded, _keepdims, _operators, _identities, _columns, _argument_swaps,
         _bounds, _globals, _orders, _omissions, _axes, _siblings)


def edits(source: str, reference: str | None = None, limit: int = MAX_EDITS) -> list[Edit]:
    """Up to ``limit`` one-change variants of ``source`` (none when it does not parse). Changes on lines
    that ``reference`` (the course's answer) does not have, as written, come first: a slip makes a line
    of its own; the rest follow while the limit allows."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    nodes = _nodes(tree)
    known = {line.rstrip() for line in (reference or "").splitlines()}  # indentation kept: a return inside a loop is a line of its own
    lines = source.splitlines()
    candidates = [(index, change) for kind in KINDS for index, change in kind(nodes)]
    candidates.sort(key=lambda c: _is_known(nodes[c[0]], lines, known))  # stable: kinds keep their order
    found: list[Edit] = []
    sources = {ast.unparse(tree)}
    for index, change in candidates:
        if len(found) >= limit:
            break
        node = nodes[index]
        line = getattr(node, "lineno", None)
        twin = copy.deepcopy(tree)
        try:
            shown = change(_nodes(twin)[index], twin)
            ast.fix_missing_locations(twin)
            text = ast.unparse(twin)
            compile(text, "<edit>", "exec")
        except (ValueError, TypeError, AttributeError, SyntaxError, IndexError, RecursionError):
            continue
        if line is None or text in sources:
            continue
        sources.add(text)
        after = ", ".join(map(ast.unparse, shown.elts)) if isinstance(shown, ast.Tuple) else ast.unparse(shown)
        after = " ".join(after.split())
        found.append(Edit(text, line, _segment(source, node), after, getattr(change, "moved", "")))
    return found
