"""Notes on a student's control flow and state (``code_notes``): a loop that ends in its first pass, an
inner loop that takes the outer one's name, enumerate's pair read the other way round, values kept
between calls (on the function, in a mutable default, in a global, or in a list, dict or set of the notebook's
that the function changes), a layer built anew in every forward pass."""

from __future__ import annotations

import ast

from helpers.checks.diagnose.code_reading import Where


def kept_between_calls(tree: ast.AST, fn, where: Where) -> list[str]:
    """State that outlives a call: attributes of the function itself, a mutable default, a global written."""
    notes = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == fn.__name__:
            notes.append(f"{where.line(node)}: `{where.text(node)}` keeps values on the function {fn.__name__} "
                         "itself, so they outlive the call: a later call with other arguments (another size, base or "
                         "table) can get what an earlier call stored. Is every value it reuses still right?")
            break
    given = (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values())
    defaults = [d for d in given if isinstance(d, (list, dict, set))]
    if defaults:
        notes.append(f"{where.line(tree.body[0])}: a default argument of {fn.__name__} is a {type(defaults[0]).__name__}, "
                     "made once when the function is defined and shared by every call that does not pass it: what "
                     "one call puts in it, the next finds there. Is that meant?")
    shared = _module_containers_changed(tree, fn)
    if shared:
        name, node = shared
        notes.append(f"{where.line(node)}: `{where.text(node)}` changes {name}, a {type(fn.__globals__[name]).__name__} "
                     f"that {fn.__name__} does not make: it belongs to the notebook, made once when its cell ran, so what "
                     "one call puts in it the next call finds there. Is it meant to start empty at every call?")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            notes.append(f"{where.line(node)}: `global {', '.join(node.names)}`: {fn.__name__} writes to the "
                         "notebook's own variables, which outlive the call. Is every value it reads there still right?")
    return notes


def loop_ends_at_once(loop: ast.For | ast.While, where: Where) -> list[str]:
    if any(isinstance(n, ast.Continue) for n in ast.walk(ast.Module(body=loop.body, type_ignores=[]))):
        return []  # a pass that continues never reaches the return: the loop looks for something
    for statement in loop.body:
        if isinstance(statement, (ast.Return, ast.Break)):
            kind = "return" if isinstance(statement, ast.Return) else "break"
            return [f"{where.line(statement)}: `{where.text(statement)}` stands directly in the body of the loop of "
                    f"{where.line(loop).split(' of ')[0]}, under no condition, so the loop ends during its first "
                    f"pass. Was it meant after the loop (one indent less)?"] if kind == "return" or _not_infinite(loop) else []
    return []


def _not_infinite(loop) -> bool:
    return not (isinstance(loop, ast.While) and isinstance(loop.test, ast.Constant) and loop.test.value is True)


def _loop_names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def shadowed_loop_names(loop: ast.For | ast.While, where: Where) -> list[str]:
    if not isinstance(loop, ast.For):
        return []
    outer = _loop_names(loop.target)
    notes = []
    for inner in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
        if isinstance(inner, ast.For):
            for name in sorted(outer & _loop_names(inner.target)):
                notes.append(f"{where.line(inner)}: the inner loop takes the name `{name}`, which the loop of "
                             f"{where.line(loop).split(' of ')[0]} already counts with: inside and after the inner "
                             f"loop, `{name}` no longer holds the outer loop's value. Was another name meant?")
    return notes


ITEM_WORDS = ("ch", "char", "token", "tok", "word", "item", "piece")


def enumerate_order(loop: ast.For, where: Where) -> list[str]:
    """``for ch, i in enumerate(text)``: the names read the pair the other way round."""
    call = loop.iter
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "enumerate"
            and isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == 2
            and all(isinstance(e, ast.Name) for e in loop.target.elts)):
        return []
    first, second = (e.id for e in loop.target.elts)
    if first.lower().rstrip("s") in ITEM_WORDS or any(w in second.lower() for w in ("idx", "index", "pos", "count")):
        return [f"{where.line(loop)}: enumerate yields (index, item) in that order, so `{first}` receives the index "
                f"(0, 1, ...) and `{second}` the item. Were the two names meant the other way round?"]
    return []


def set_iteration(loop: ast.For, where: Where) -> list[str]:
    """``for pair in set(...)``: each distinct item once, in the set's own order."""
    call = loop.iter
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "set":
        return [f"{where.line(loop)}: the loop runs over set({where.text(call.args[0]) if call.args else ''}): each "
                "distinct item once, however often it occurs, and in the set's own order, not the order of the "
                "original. Was every occurrence, in order, meant?"]
    return []


def _module_attribute(node: ast.AST) -> bool:
    """``b.weight`` or ``self.emb.weight.data``: a chain of attributes on a name (what another module
    holds), not a tensor read from a dict or made by a call (``sd[k]``, ``w.T``, ``torch.randn(...)``)."""
    if not isinstance(node, ast.Attribute) or node.attr == "T":
        return False
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def data_assigned(node: ast.Assign, where: Where) -> list[str]:
    """``a.weight.data = b.weight.data``: two Parameters sharing numbers, not one Parameter."""
    if (len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) and node.targets[0].attr == "data"
            and _module_attribute(node.value)):  # another module's tensor (b.weight), not a loaded one (sd[k])
        return [f"{where.line(node)}: `{where.text(node.targets[0])} = ...` replaces the numbers inside a Parameter and "
                "keeps the Parameter itself: the two modules still hold two Parameter objects (counted twice, and no "
                "longer sharing once either is given new numbers). Was the Parameter meant to be shared itself, "
                "`a.weight = b.weight`?"]
    return []


#: PyTorch layers that hold weights of their own: one built inside forward is a new, untrained one at
#: every call (containers are left out: nn.Sequential(*self.layers) only wraps layers already registered)
WEIGHTED_LAYERS = frozenset("""
    Linear Bilinear Embedding EmbeddingBag LayerNorm RMSNorm GroupNorm BatchNorm1d Conv1d Conv2d
    MultiheadAttention Parameter
""".split())


def built_in_forward(tree: ast.AST, fn, where: Where) -> list[str]:
    """A layer with weights (``nn.Linear(...)``, ``nn.Parameter(...)``) constructed inside ``forward``."""
    if fn.__name__ != "forward":
        return []
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if (isinstance(func, ast.Attribute) and func.attr in WEIGHTED_LAYERS
                and ast.unparse(func.value) in ("nn", "torch.nn")):
            return [f"{where.line(node)}: `{where.text(node)}` builds a new {func.attr} at every call of forward: its "
                    "weights are fresh random numbers each time, and the ones the module registered (if any) are never "
                    "used, so nothing it learns is kept. Build it once in __init__ (self.name = ...) and call that in "
                    "forward."]
    return []


#: methods that change a list, dict or set in place
CHANGING_METHODS = frozenset("append extend insert update setdefault add pop clear remove discard".split())


def _module_containers_changed(tree: ast.AST, fn) -> tuple[str, ast.AST] | None:
    """The first list, dict or set of the notebook's own (a module-level name, not an argument, never
    assigned in the function) that the function changes in place, and the node that does."""
    args = fn.__code__.co_varnames[:fn.__code__.co_argcount + fn.__code__.co_kwonlyargcount]
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}

    def outside(node) -> str | None:
        if isinstance(node, ast.Name) and node.id not in args and node.id not in assigned and isinstance(
                fn.__globals__.get(node.id), (list, dict, set)):
            return node.id
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CHANGING_METHODS:
            name = outside(node.func.value)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            name = next((outside(t.value) for t in targets if isinstance(t, ast.Subscript) and outside(t.value)), None)
        else:
            name = None
        if name:
            return name, node
    return None
