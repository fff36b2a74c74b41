"""Facts about the student's code read from its text alone, shown when a check fails.

A wrong output says *that* something is wrong; some causes are plain in the code itself and need
no guessing: a new tensor computed and thrown away, a method named and never called, an exception
built and never raised, a ``return`` that ends a loop in its first pass, arguments handed over in
another parameter's place, an inner loop that takes the outer loop's name, a container of the notebook's
changed by a function, a layer with weights built inside ``forward``, a name of the notebook read where
the function's own is meant (``code_notes_names``), and Python's own semantics (``code_notes_python``). Helpers the student wrote in the same cell are read too. Each note states what
the line does (a fact of the code, true whatever the check found) and asks whether it was meant;
it never claims to be the cause. ``code_notes`` reads a function, or every method a class defines,
and never raises: code it cannot read has no notes.

Every rule is silent on the course's own solutions (``tests/test_code_notes.py`` reads them all).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import types

from helpers.checks.diagnose import code_notes_calls as calls
from helpers.checks.diagnose import code_notes_flow as flow
from helpers.checks.diagnose import code_notes_python as python
from helpers.checks.diagnose.code_notes_names import arguments_overwritten, notebook_names
from helpers.checks.diagnose.code_reading import Where, called_name

#: tensor (and str) methods that return a new value and leave their object as it was: a line that
#: calls one and keeps nothing has done nothing. (``sort`` is left out: a list's sorts in place.)
OUT_OF_PLACE_METHODS = frozenset("""
    add sub mul div true_divide floor_divide pow neg abs exp log log2 log10 sqrt rsqrt sigmoid tanh relu
    softmax log_softmax clamp clip masked_fill masked_scatter index_fill scatter scatter_add gather where
    unsqueeze squeeze transpose permute view reshape flatten contiguous expand expand_as repeat
    repeat_interleave float double half long int bool to detach clone tril triu flip roll cumsum sum
    mean std var max min argmax argmin topk matmul mm bmm type_as narrow chunk split
    replace strip lower upper
""".split()) - {"to", "float", "double", "half"}  # an nn.Module's .to() and .float() work in place
#: functions of torch and torch.nn.functional with no effect but their result
PURE_TORCH_FUNCTIONS = frozenset("""
    cat stack where softmax log_softmax tril triu masked_fill clamp exp log sqrt matmul arange zeros ones
    full argmax topk sort cumsum gelu relu layer_norm scaled_dot_product_attention cross_entropy one_hot
    pad embedding linear repeat_interleave cos sin outer einsum
""".split())
#: functions whose result is (values, indices), in that order
READERS = frozenset("""
    size dim item tolist numel values indices keys items get format join startswith endswith split count index
    encode decode any all isinstance new_zeros new_ones new_full new_tensor sort
""".split())
PURE_BUILTINS = frozenset("""
    len range min max sum abs int float str bool list tuple dict set frozenset zip enumerate sorted reversed
    isinstance map filter round divmod any all chr ord repr
""".split())
MAX_NOTES = 3
#: methods called for what they do (a bare ``model.train`` on its own line does nothing)
METHODS_CALLED_FOR_EFFECT = frozenset("""
    train eval zero_grad step backward append extend clear update requires_grad_ detach_ close flush
""".split())


def code_notes(obj) -> list[str]:
    """The notes for a student's function or class (its own methods), at most ``MAX_NOTES``."""
    try:
        found = []
        for fn in _functions(obj):
            found += sorted(_function_notes(fn), key=_line_number)
        return list(dict.fromkeys(found))[:MAX_NOTES]
    except Exception:  # noqa: BLE001 - a note is a bonus: code that cannot be read has none
        return []


def _line_number(note: str) -> int:
    digits = note.removeprefix("line ").split(" ", 1)[0].rstrip(":,")
    return int(digits) if digits.isdigit() else 0


def _functions(obj) -> list[types.FunctionType]:
    """The functions to read: ``obj`` itself, or a class's own methods; a decorated one (``@torch.no_grad()``)
    as the student wrote it, so that the names it calls are looked up where the student defined them."""
    found = [obj] if callable(obj) and not isinstance(obj, type) else list(vars(obj).values()) if isinstance(obj, type) else []
    found = [inspect.unwrap(f) if callable(f) and hasattr(f, "__wrapped__") else f for f in found]
    found = [f for f in found if isinstance(f, types.FunctionType)]
    return found + [h for h in _helpers_of(found) if h not in found]


def _helpers_of(functions: list[types.FunctionType]) -> list[types.FunctionType]:
    """The functions that ``functions`` call by name and that were written in the same cell: a helper
    the student added beside the answer (the course's own functions come from other cells or modules)."""
    found = []
    for fn in functions:
        for name in fn.__code__.co_names:
            helper = fn.__globals__.get(name)
            if isinstance(helper, types.FunctionType) and helper is not fn and helper not in found \
                    and helper.__code__.co_filename == fn.__code__.co_filename:
                found.append(helper)
    return found


def _function_notes(fn: types.FunctionType) -> list[str]:
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return []
    tree = ast.parse(textwrap.dedent("".join(lines)))
    source = textwrap.dedent("".join(lines))
    where = Where(fn.__name__, first, source)
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    notes: list[str] = flow.kept_between_calls(tree, fn, where) + flow.built_in_forward(tree, fn, where)
    notes += python.alias_written_through(tree, _parameters(fn), where) + python.iterator_read_twice(tree, where)
    notes += python.late_bound_functions(tree, where) + python.identity_with_literal(tree, where)
    notes += python.invert_on_bool(tree, _bool_arguments(fn), where) + python.data_read(tree, where)
    notes += python.repeated_inner_list(tree, where) + python.written_while_read(tree, where)
    notes += python.bare_squeeze(tree, where) + python.copied_outside_autograd(tree, _parameters(fn), where)
    notes += python.linspace_with_its_end(tree, where)
    notes += notebook_names(tree, fn, where)
    notes += arguments_overwritten(tree, fn, where)
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr):
            notes += _dropped(node, fn, where, stored)
        elif isinstance(node, (ast.For, ast.While)):
            notes += flow.loop_ends_at_once(node, where) + flow.shadowed_loop_names(node, where)
            notes += flow.enumerate_order(node, where) + flow.set_iteration(node, where) if isinstance(node, ast.For) else []
        elif isinstance(node, ast.Call):
            notes += calls.arguments_by_name(node, fn, where) + calls.attn_mask_meaning(node, tree, where)
        elif isinstance(node, ast.Assign):
            notes += calls.values_indices_order(node, where) + calls.same_twice(node, where) + flow.data_assigned(node, where)
        elif isinstance(node, ast.Subscript):
            notes += calls.indices_taken(node, where)
    return notes


def _bool_arguments(fn: types.FunctionType) -> set[str]:
    """The arguments of ``fn`` whose default is True or False."""
    code, defaults = fn.__code__, fn.__defaults__ or ()
    positional = code.co_varnames[:code.co_argcount]
    found = {name for name, value in zip(positional[len(positional) - len(defaults):], defaults, strict=True)
             if isinstance(value, bool)}
    return found | {name for name, value in (fn.__kwdefaults__ or {}).items() if isinstance(value, bool)}


def _dropped(node: ast.Expr, fn, where: Where, stored: set[str]) -> list[str]:
    value = node.value
    if isinstance(value, ast.Attribute):
        if value.attr in METHODS_CALLED_FOR_EFFECT:
            return [f"{where.line(node)}, `{where.text(value)}`, names the method without calling it: with no "
                    "parentheses nothing runs. Was the call `" + where.text(value) + "()` meant?"]
        return []
    if not isinstance(value, ast.Call):
        return []
    owner, name = called_name(value)
    if name is None:
        return []
    if owner is None and _is_exception_class(name, fn):
        return [f"{where.line(node)} builds a {name} and throws it away: without `raise` nothing is raised. "
                f"Was `raise {where.text(value)}` meant?"]
    if owner in ("torch", "F", "torch.nn.functional") and name in PURE_TORCH_FUNCTIONS:
        return [_dropped_words(where, node, value, f"{owner}.{name} returns a new tensor")]
    if owner is not None and owner not in ("torch", "F", "torch.nn.functional") and name in OUT_OF_PLACE_METHODS \
            and not isinstance(fn.__globals__.get(owner.split(".")[0]), types.ModuleType) \
            and (name != "add" or (owner in _parameters(fn) and owner not in stored)):  # a set's add works in place
        in_place = f" (the in-place form is .{name}_)" if name not in ("replace", "strip", "lower", "upper", "to",
                                                                      "view", "reshape", "expand") else ""
        return [_dropped_words(where, node, value, f".{name} returns a new value and leaves {owner} as it was{in_place}")]
    if owner is None:
        target = fn.__globals__.get(name)
        if isinstance(target, types.FunctionType) and _returns_value_only(target):
            return [_dropped_words(where, node, value, f"{name} returns its result and changes none of its arguments")]
    return []


def _parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def _dropped_words(where: Where, node, call, why: str) -> str:
    return (f"{where.line(node)}, `{where.text(call)}`, keeps nothing: {why}, and the line does not store it. "
            "Was its result meant to be assigned?")


def _is_exception_class(name: str, fn) -> bool:
    value = fn.__globals__.get(name, getattr(builtins, name, None))
    return isinstance(value, type) and issubclass(value, BaseException)


def _returns_value_only(fn: types.FunctionType, depth: int = 0) -> bool:
    """A notebook function that returns a value and, as far as its text shows, does nothing else: it
    changes none of its arguments, writes nothing and calls only what is known to do the same."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    if depth > 2 or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        return False
    params = {a.arg for a in tree.body[0].args.args}
    local = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - params
    returns = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id in params:
            return False  # hands back what it was given: a check called for the error it may raise
        if isinstance(node, ast.Return) and node.value is not None:
            returns = True
        if isinstance(node, (ast.Global, ast.Nonlocal, ast.Delete)):
            return False
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, (ast.Subscript, ast.Attribute)) and _root(target) not in local:
                    return False
        if isinstance(node, ast.Call) and not _harmless_call(node, fn, local, depth):
            return False
    return returns


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _harmless_call(call: ast.Call, fn, local: set[str], depth: int) -> bool:
    owner, name = called_name(call)
    if name is None:
        return False
    if owner is not None:
        if owner in ("torch", "F", "torch.nn.functional", "math"):
            return not name.endswith("_") and name not in ("save", "load", "manual_seed", "set_num_threads")
        if name in ("append", "extend", "insert", "pop", "update", "setdefault", "add", "sort", "reverse"):
            return _root(call.func) in local  # a list or dict of its own, built up
        return name in OUT_OF_PLACE_METHODS or name in READERS
    value = fn.__globals__.get(name, getattr(builtins, name, None))
    if name in PURE_BUILTINS or (isinstance(value, type) and issubclass(value, BaseException)):
        return True
    return isinstance(value, types.FunctionType) and value is not fn and _returns_value_only(value, depth + 1)


