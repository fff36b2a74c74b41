"""Notes on Python's own semantics in a student's code (``code_notes``): a second name taken for a copy
and then written through, an iterator read twice, a function made in a loop that reads the loop's name
when it is called, ``is`` with a literal, ``~`` on a bool, one inner list repeated for every row, an
in-place method on a name its own statement also uses; and on a few PyTorch calls whose meaning is
plain from the line: a ``.data`` read, ``squeeze()`` with no axis, ``torch.tensor`` of an argument,
``linspace(0, n, n)``. Each says what the line does and asks. (The truth value of a tensor is read off the
error it raises: ``exceptions._truth_of_a_tensor``.)"""

from __future__ import annotations

import ast

from helpers.checks.diagnose.code_reading import Where

#: builtins whose result is an iterator, used up by the first pass over it
ITERATOR_MAKERS = frozenset("map zip filter iter reversed enumerate".split())
#: in-place tensor methods that write into their object (the common ones a student writes)
WRITING_METHODS = frozenset("""
    add_ sub_ mul_ div_ masked_fill_ fill_ zero_ copy_ clamp_ index_fill_ scatter_ exp_ neg_ pow_ tril_ triu_
""".split())


def _names(node: ast.AST) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name)]


def _statements(tree: ast.AST) -> list[ast.stmt]:
    """Every statement of the function, in the order of their lines."""
    return sorted((n for n in ast.walk(tree) if isinstance(n, ast.stmt)), key=lambda n: (n.lineno, n.col_offset))


def _named_assignments(statements: list[ast.stmt]):
    """``(index, statement, name, value)`` for each ``name = value`` of one plain name."""
    for i, statement in enumerate(statements):
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            yield i, statement, statement.targets[0].id, statement.value


def _written_through(statement: ast.stmt, name: str) -> ast.AST | None:
    """The node of ``statement`` that writes into the object ``name`` holds: ``name += ...``,
    ``name[...] = ...``, ``name.add_(...)``."""
    if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name) and statement.target.id == name:
        return statement
    if isinstance(statement, (ast.Assign, ast.AugAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        for t in targets:
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name:
                return statement
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        if isinstance(func, ast.Attribute) and func.attr in WRITING_METHODS and isinstance(func.value, ast.Name) \
                and func.value.id == name:
            return statement
    return None


def alias_written_through(tree: ast.AST, parameters: set[str], where: Where) -> list[str]:
    """``out = x`` (or ``out = x[:]``) for an argument ``x``, then ``out += ...``: written into the
    caller's own object. Silent when ``out`` is bound to something else in between."""
    statements = _statements(tree)
    for i, statement, alias, value in _named_assignments(statements):
        full_slice = (isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Slice)
                      and value.slice.lower is value.slice.upper is value.slice.step is None)
        source = value.value if full_slice else value
        if not (isinstance(source, ast.Name) and source.id in parameters and source.id != alias):
            continue
        for later in statements[i + 1:]:
            written = _written_through(later, alias)
            if written is not None:
                how = (f"for a tensor, `{where.text(value)}` is a view that shares {source.id}'s memory (not a copy, "
                       "as it is for a list)") if full_slice else f"it makes {alias} a second name for {source.id}, not a copy"
                return [f"{where.line(statement)}: `{where.text(statement)}`: {how}, so `{where.text(written)}` "
                        f"({where.line(written).split(' of ')[0]}) writes into the {source.id} the caller passed. Was "
                        f"a copy (`{source.id}.clone()`) or a new tensor (`{alias} = {source.id} + ...`) meant?"]
            if any(isinstance(t, ast.Name) and t.id == alias for t in _stores(later)):
                break
    return []


def _stores(statement: ast.stmt) -> list[ast.AST]:
    """What a statement binds: an assignment's targets, a for loop's."""
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target] if isinstance(
        statement, ast.For) else []
    return [n for t in targets for n in ast.walk(t)]


def iterator_read_twice(tree: ast.AST, where: Where) -> list[str]:
    """``pairs = zip(...)`` (or map, filter, a generator expression), then two passes over ``pairs``:
    the second finds it empty."""
    statements = _statements(tree)
    for i, statement, name, value in _named_assignments(statements):
        made = isinstance(value, ast.GeneratorExp) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ITERATOR_MAKERS)
        if not made:
            continue
        reads: list[ast.stmt] = []
        for later in statements[i + 1:]:
            if any(isinstance(t, ast.Name) and t.id == name for t in _stores(later)):
                break
            if _reads_name(later, name):
                reads.append(later)
        stepped = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "next"
                      and any(isinstance(a, ast.Name) and a.id == name for a in n.args) for r in reads for n in ast.walk(r))
        if len(reads) >= 2 and not stepped:  # next(it) takes one item on purpose: the rest is left for later
            first, second = reads[0], reads[1]
            kind = "a generator" if isinstance(value, ast.GeneratorExp) else f"{value.func.id}(...)"
            return [f"{where.line(statement)}: `{name}` is {kind}, an iterator: the first pass over it "
                    f"({where.line(first).split(' of ')[0]}, `{_head(first, where)}`) uses it up, and the next "
                    f"({where.line(second).split(' of ')[0]}) finds it empty. Was a list (`list(...)`) meant?"]
    return []


def _head(statement: ast.stmt, where: Where) -> str:
    """A statement's own text, a block's first line only (``for p in pairs:``)."""
    if isinstance(statement, ast.For):
        return f"for {where.text(statement.target)} in {where.text(statement.iter)}:"
    if isinstance(statement, (ast.If, ast.While)):
        return f"{'if' if isinstance(statement, ast.If) else 'while'} {where.text(statement.test)}:"
    return where.text(statement)


def _reads_name(statement: ast.stmt, name: str) -> bool:
    """Whether the statement itself (not a nested block's statements) reads ``name``."""
    parts: list[ast.AST]
    if isinstance(statement, (ast.For, ast.While, ast.If, ast.With)):
        parts = [statement.iter] if isinstance(statement, ast.For) else (
            [statement.test] if isinstance(statement, (ast.While, ast.If)) else [i.context_expr for i in statement.items])
    elif isinstance(statement, (ast.FunctionDef, ast.ClassDef, ast.Try)):
        return False
    else:
        parts = [statement]
    return any(n.id == name and isinstance(n.ctx, ast.Load) for p in parts for n in _names(p))


def late_bound_functions(tree: ast.AST, where: Where) -> list[str]:
    """A lambda made in a loop or comprehension and kept (in a container, or appended), which reads the
    loop's name: it looks the name up when it is called, after the loop, and every one sees the last value."""
    for loop in ast.walk(tree):
        if isinstance(loop, ast.For):
            names, body = {n.id for n in _names(loop.target)}, loop.body
            kept = [v for s in body for v in _kept_lambdas(s)]
        elif isinstance(loop, (ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp)):
            names = {n.id for g in loop.generators for n in _names(g.target)}
            elements = [loop.key, loop.value] if isinstance(loop, ast.DictComp) else [loop.elt]
            kept = [e for e in elements if isinstance(e, ast.Lambda)]
        else:
            continue
        for made in kept:
            own = {a.arg for a in made.args.args + made.args.kwonlyargs}
            read = sorted({n.id for n in _names(made.body) if n.id in names and n.id not in own})
            if read:
                return [f"{where.line(made)}: the lambda `{where.text(made)}` reads {', '.join(f'`{r}`' for r in read)} "
                        "when it is called, not when it is made: called after the loop, every one of them sees the "
                        f"loop's last value. Was `lambda {read[0]}={read[0]}: ...` (a default, bound at once) or a "
                        "direct call meant?"]
    return []


def _kept_lambdas(statement: ast.stmt) -> list[ast.Lambda]:
    """Lambdas a statement stores: ``d[k] = lambda ...``, ``fs.append(lambda ...)``."""
    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Lambda) \
            and any(isinstance(t, ast.Subscript) for t in statement.targets):
        return [statement.value]
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("append", "insert", "add"):
            return [a for a in call.args if isinstance(a, ast.Lambda)]
    return []


def identity_with_literal(tree: ast.AST, where: Where) -> list[str]:
    """``x is "rms"`` (or ``is not``, a number, a tuple): identity, not equality. It holds only when both
    sides are one object, as two equal literals often are in one program, not a value read from a file,
    joined or computed at run time (Python itself warns: "is" with a literal)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for op, right in zip(node.ops, node.comparators, strict=True):
            literal = isinstance(right, (ast.Constant, ast.Tuple, ast.List)) and not (
                isinstance(right, ast.Constant) and (right.value is None or isinstance(right.value, bool)
                                                      or right.value is Ellipsis))
            if isinstance(op, (ast.Is, ast.IsNot)) and literal:
                word = "==" if isinstance(op, ast.Is) else "!="
                return [f"{where.line(node)}, `{where.text(node)}`, compares with `{'is' if word == '==' else 'is not'}`, "
                        "which asks whether both sides are the same object, not whether they are equal: an equal "
                        f"value made at run time (read from a file, joined, computed) is another object. Was `{word}` meant?"]
    return []


def invert_on_bool(tree: ast.AST, bools: set[str], where: Where) -> list[str]:
    """``~flag`` where ``flag`` is an argument whose default is True or False: ``~`` is the bitwise
    inversion of an integer (a mask's negation on a tensor), and on a Python bool ~True is -2 and
    ~False is -1, both true."""
    for node in ast.walk(tree):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert) and isinstance(node.operand, ast.Name) \
                and node.operand.id in bools:
            name = node.operand.id
            return [f"{where.line(node)}, `{where.text(node)}`: `{name}` is a Python bool (its default is), and `~` on a "
                    f"bool is the integer's bitwise inversion, ~True = -2 and ~False = -1, both true. Was `not {name}` "
                    "meant? (`~` negates a tensor of booleans, not a bool.)"]
    return []


def data_read(tree: ast.AST, where: Where) -> list[str]:
    """A value read through ``.data`` (not written to it): the tensor's values outside autograd, so
    nothing computed from it carries a gradient back."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load):
            return [f"{where.line(node)} reads `{where.text(node)}`: `.data` is the tensor's values outside autograd, "
                    "so no gradient flows back through anything computed from it."]
    return []


def _holds_a_list(node: ast.AST) -> bool:
    """``[[0] * n]``, ``[[]]``, ``[[0, 0]]``: a list literal whose element is itself a list."""
    return isinstance(node, ast.List) and len(node.elts) == 1 and (
        isinstance(node.elts[0], (ast.List, ast.ListComp))
        or isinstance(node.elts[0], ast.BinOp) and isinstance(node.elts[0].op, ast.Mult)
        and isinstance(node.elts[0].left, ast.List))


def repeated_inner_list(tree: ast.AST, where: Where) -> list[str]:
    """``[[0] * n] * m``: ``*`` repeats the one inner list m times, so the m rows are one object and a
    write into any row is seen in all of them."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and (_holds_a_list(node.left) or _holds_a_list(node.right)):
            return [f"{where.line(node)}, `{where.text(node)}`: `*` repeats one inner list, so every row is the same list "
                    "object and a write into one row is seen in all of them. Rows of their own come from a "
                    "comprehension, `[[0] * n for _ in range(m)]`."]
    return []


def written_while_read(tree: ast.AST, where: Where) -> list[str]:
    """``g * g.sigmoid_()``: an in-place method changes an object that the same expression also reads;
    both reads see the changed object (the product is sigmoid(g) * sigmoid(g))."""
    for statement in _statements(tree):
        if isinstance(statement, (ast.FunctionDef, ast.ClassDef, ast.For, ast.While, ast.If, ast.With, ast.Try)):
            continue
        for call in ast.walk(statement):
            func = getattr(call, "func", None)
            if not (isinstance(call, ast.Call) and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.attr.endswith("_") and not func.attr.startswith("_")):
                continue
            name = func.value.id
            inside = {id(n) for n in ast.walk(call)}  # the call's own arguments are read before it writes
            others = [n for n in _names(statement) if n.id == name and id(n) not in inside and isinstance(n.ctx, ast.Load)]
            if others:
                return [f"{where.line(call)}, `{where.text(statement).strip()}`: `{where.text(call)}` changes `{name}` in "
                        f"place while the same statement also uses `{name}`: it is one object, so every use sees the "
                        f"changed values, one written before the call too. Was the out-of-place `{func.attr[:-1]}` meant?"]
    return []


def bare_squeeze(tree: ast.AST, where: Where) -> list[str]:
    """``x.squeeze()`` with no axis: it drops every axis of size 1, so an input whose batch (or time)
    happens to be 1 loses that axis too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "squeeze" \
                and not node.args and not node.keywords:
            return [f"{where.line(node)}, `{where.text(node)}`: squeeze() with no axis drops every axis of size 1, so a "
                    "batch of one (or a single position) loses its axis too. Was one axis meant, squeeze(-1)?"]
    return []


def copied_outside_autograd(tree: ast.AST, parameters: set[str], where: Where) -> list[str]:
    """``torch.tensor(x)`` of an argument: a new tensor with x's values, outside autograd, so no gradient
    reaches x through it (``x.clone()`` copies and keeps the graph)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("tensor", "as_tensor") \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and node.args \
                and isinstance(node.args[0], ast.Name) and node.args[0].id in parameters and node.func.attr == "tensor":
            name = node.args[0].id
            return [f"{where.line(node)}, `{where.text(node)}`: torch.tensor of a tensor copies its values into a new tensor "
                    f"outside autograd, so nothing computed from it carries a gradient back to `{name}`. To copy and keep "
                    f"the graph: `{name}.clone()`."]
    return []


def linspace_with_its_end(tree: ast.AST, where: Where) -> list[str]:
    """``torch.linspace(0, n, n)``: n values from 0 to n, both ends included, spaced n / (n - 1) apart,
    not 0, 1, ..., n - 1."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "linspace" \
                and len(node.args) >= 3 and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0 \
                and ast.dump(node.args[1]) == ast.dump(node.args[2]):
            n = where.text(node.args[1])
            return [f"{where.line(node)}, `{where.text(node)}`: linspace includes its end, so these are {n} values from 0 to "
                    f"{n} itself, spaced {n} / ({n} - 1) apart, not 0, 1, ..., {n} - 1 (that is torch.arange({n}))."]
    return []
