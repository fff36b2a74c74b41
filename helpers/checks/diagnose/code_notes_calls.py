"""Notes on a student's calls (``code_notes``): arguments handed over in each other's places, a pair of
(values, indices) read the other way round, the indices taken for the values, one expression given
to two names, scaled_dot_product_attention's boolean mask."""

from __future__ import annotations

import ast
import inspect
import re
import types

from helpers.checks.diagnose.code_reading import Where, called_name

VALUES_INDICES = frozenset({"sort", "topk", "max", "min", "kthvalue", "median", "mode", "cummax", "cummin"})
INDEX_WORDS = ("idx", "ind", "order", "arg", "pos", "rank")
VALUE_WORDS = ("val", "prob", "score", "logit", "sorted", "top")
#: methods that read their object and return something new


def arguments_by_name(call: ast.Call, fn, where: Where) -> list[str]:
    owner, name = called_name(call)
    target = fn.__globals__.get(name) if owner is None and name else None
    if not isinstance(target, types.FunctionType):
        return []
    params = list(inspect.signature(target).parameters)
    given = [arg.id if isinstance(arg, ast.Name) else None for arg in call.args[: len(params)]]
    # two arguments named after each other's parameters: each in the other's place
    misplaced = [(i, name, params.index(name)) for i, name in enumerate(given)
                 if name in params and params.index(name) != i and params.index(name) < len(given)
                 and given[params.index(name)] == params[i]]
    if not misplaced:
        return []
    said = "; ".join(f"`{given}` goes in as {name}'s parameter `{params[i]}` (its own place is number {j + 1})"
                     for i, given, j in misplaced)
    return [f"{where.line(call)}, `{where.text(call)}`: {said}. {name} takes ({', '.join(params)}) in that order. "
            "Were the arguments meant in their own places (or passed by name)?"]


def attn_mask_meaning(call: ast.Call, tree: ast.AST, where: Where) -> list[str]:
    """A mask built True on the future (triu above the diagonal, ~tril) passed to scaled_dot_product_attention,
    whose boolean attn_mask is True where a query may attend."""
    _, name = called_name(call)
    given = next((k.value for k in call.keywords if k.arg == "attn_mask"), None)
    if name != "scaled_dot_product_attention" or given is None:
        return []
    texts = [ast.unparse(given)]
    if isinstance(given, ast.Name):  # what the name was made of, in this function
        texts += [ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == given.id for t in n.targets)]
    future = any(re.search(r"triu\(.*diagonal\s*=\s*1|^~.*tril\(|tril\(.*\)\s*==\s*0", t) for t in texts)
    if not future:
        return []
    return [f"{where.line(call)} passes scaled_dot_product_attention an attn_mask built True on the future (above "
            "the diagonal): a boolean attn_mask is True where a query MAY attend, the opposite of the mask that "
            "masked_fill fills. Was the mask meant inverted (~mask), or is_causal=True?"]


def values_indices_order(node: ast.Assign, where: Where) -> list[str]:
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Tuple) or not isinstance(node.value, ast.Call):
        return []
    names = [e.id if isinstance(e, ast.Name) else "" for e in node.targets[0].elts]
    _, called = called_name(node.value)
    if called not in VALUES_INDICES or len(names) != 2 or (called in ("max", "min") and not _has_dim(node.value)):
        return []
    first, second = (n.lower() for n in names)
    if any(w in first for w in INDEX_WORDS) or any(w in second for w in VALUE_WORDS):
        return [f"{where.line(node)}: {called}(...) returns (values, indices) in that order, so `{names[0]}` "
                f"receives the values and `{names[1]}` the indices. Were the two names meant the other way round?"]
    return []


def _has_dim(call: ast.Call) -> bool:
    return len(call.args) >= (1 if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) != "torch"
                              else 2) or any(k.arg == "dim" for k in call.keywords)


def indices_taken(node: ast.Subscript, where: Where) -> list[str]:
    call = node.value
    if not isinstance(call, ast.Call) or not (isinstance(node.slice, ast.Constant) and node.slice.value == 1):
        return []
    _, called = called_name(call)
    if called in ("max", "min") and _has_dim(call):
        return [f"{where.line(node)}: `{where.text(node)}` takes item 1 of ({called} values, indices): the indices "
                f"(the arg{called}), not the {called}ima themselves (`.values` or [0]). Were the values meant?"]
    return []


def same_twice(node: ast.Assign, where: Where) -> list[str]:
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Tuple) or not isinstance(node.value, ast.Tuple):
        return []
    names = [ast.unparse(e) for e in node.targets[0].elts]
    values = [ast.unparse(e) for e in node.value.elts]
    if len(names) != len(values) or len(set(names)) != len(names):
        return []
    for i in range(len(values)):
        for j in range(i + 1, len(values)):
            if values[i] == values[j] and isinstance(node.value.elts[i], ast.Call):
                return [f"{where.line(node)}: `{names[i]}` and `{names[j]}` get the same expression, "
                        f"`{where.text(node.value.elts[i])}`. Was the second meant to read something else?"]
    return []
