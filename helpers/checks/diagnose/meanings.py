"""What PyTorch's (or Python's) error message means, in the course's words: one branch per kind of
message, in order. A branch whose words name a likely cause (a broadcasting clash's hint, a
weight that fits transposed, a dim counted from the front) says so in its Finding's ``cause``."""

from __future__ import annotations

import math
import re

import torch

from helpers.checks.diagnose.clashes import Clash, _ids_into_linear, _operation, broadcast_hints
from helpers.checks.diagnose.finding import NOTHING, Finding
from helpers.checks.diagnose.words import _letter


def _meaning(exc: BaseException, sizes, values=(), source: str = "", guesses: bool = True) -> Finding:
    """What PyTorch's (or Python's) message says should have matched, in the course's words;
    ``values``: (name, value) of what the failing line names; ``source``: that line; ``guesses``:
    False when the cause is established already (the broadcasting clash's hints are left out)."""
    text = str(exc)

    def n(size) -> str:
        letter = _letter(int(size), sizes)
        return f"{size} ({letter})" if letter else str(size)

    m = re.search(r"Expected parameter probs .*? of distribution (\w+)", text, re.S)
    if m:
        positional = re.search(rf"{m.group(1)}\(\s*(?!probs\s*=|logits\s*=)([A-Za-z_][\w.\[\]:, -]*?)\s*\)", source)
        named = f" `{positional.group(1)}`" if positional else ""
        return Finding(
            f"torch.distributions.{m.group(1)} read its argument{named} as probabilities (probs, its first parameter): "
            "each row must be a distribution (no negative entry), and these are not. "
            + (f"Are{named} logits? Then pass them by name, {m.group(1)}(logits=...), which takes their softmax."
               if positional else "Logits are passed by name, logits=..."),
            "logits passed as probs" if positional else None)
    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", text)
    if m:
        a, b, c, d = m.groups()
        linear = any(isinstance(v, torch.nn.Linear) for _, v in values)
        flipped = next((name for name, v in values if isinstance(v, torch.Tensor) and v.dim() == 2
                        and tuple(v.shape) == (int(c), int(d))), None) if b == d and c != d else None
        fits = bool(flipped and not linear)
        owners = {name for name, v in values if isinstance(v, torch.nn.Linear)}
        if flipped and flipped.endswith(".weight") and flipped.removesuffix(".weight") in owners:
            layer = flipped.removesuffix(".weight")  # the line multiplies by a Linear's weight itself
            return Finding(
                f"A matrix product (@, torch.matmul) needs the left factor's last axis to equal the right factor's "
                f"first: here the left factor (flattened to {a}x{b}) ends in {n(b)}, and the right one is "
                f"{flipped}, ({c}, {d}): an nn.Linear keeps its weight as (out_features, in_features) and computes "
                f"x @ weight.T, so {flipped} itself is the transpose of the matrix that maps {n(d)} to {n(c)}. Was "
                f"{layer}(...) (or @ {flipped}.T) meant?", "a Linear's weight used untransposed")
        return Finding(
            f"A matrix product (@, torch.matmul or an nn.Linear) needs the left factor's last axis to equal "
            f"the right factor's first: here the left factor (flattened to {a}x{b}) ends in {n(b)}, the "
            f"right one ({c}x{d}) starts with {n(c)}. "
            + (f"{flipped} ({c}, {d}) would fit transposed: {flipped}.T is ({d}, {c}), the layout x @ W.T that "
               "nn.Linear computes with its (out_features, in_features) weight." if fits else
               f"For an nn.Linear, the right factor is the weight transposed: the layer expects inputs whose "
               f"last axis has size {n(c)}, and got {n(b)}.")
            + _ids_into_linear(values, linear), "a matrix that needs .T" if fits else None
        )
    m = re.search(
        r"Expected size for first two dimensions of batch2 tensor to be: \[(\d+), (\d+)\] but got: \[(\d+), (\d+)\]", text
    )
    if m:
        b1, k1, b2, k2 = m.groups()
        if k1 != k2:
            return Finding(
                f"In a batched matrix product a @ b, b's second-to-last axis must have the size of a's last "
                f"axis: a ends in {n(k1)}, b's second-to-last axis has {n(k2)}."
            )
        return Finding(f"In a batched matrix product a @ b, the batch sizes differ: {n(b1)} and {n(b2)}.")
    m = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)", text)
    if m:
        a, b, k = m.groups()
        return Finding(
            f"{_operation(source, values)}: at dimension {k} of the broadcast shape one has size {n(a)}, the other "
            f"{n(b)}; they must be equal, or one of them 1."
        ) + (broadcast_hints(Clash(list(values), source, sizes, int(a), int(b), int(k))) if guesses else NOTHING)
    m = re.search(r"expected scalar type (\w+) but found (\w+)", text) or re.search(
        r"expected (?:m1 and m2|mat1 and mat2|both vectors|self and \w+) to have the same dtype, but got:? (\w+) != (\w+)", text
    ) or re.search(r"[Ff]ound dtype (\w+) but expected (\w+)", text) or re.search(
        r"must have the same dtype, but got (\w+) and (\w+)", text
    )
    if m:
        a, b = m.groups()
        ids = _ids_into_linear(values, any(isinstance(v, torch.nn.Linear) for _, v in values))
        if ids or not guesses:  # the ids, or the cast that made one of them, are said already
            return Finding(f"Two tensors of different dtypes ({a} and {b}) met in one operation.{ids}")
        return Finding(
            f"Two tensors of different dtypes ({a} and {b}) met in one operation. A tensor created without "
            "dtype= is float32 (torch.ones, torch.zeros, torch.tensor, torch.arange of floats) or int64 "
            "(of whole numbers); create new tensors with dtype=x.dtype so that they match the input."
        )
    m = re.search(r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)", text)
    if m:
        lo, hi, got = (int(v) for v in m.groups())
        ndim = hi + 1
        return Finding(
            f"dim={got} does not exist: the tensor has only {ndim} ax{'is' if ndim == 1 else 'es'} (valid "
            f"dims {lo} to {hi}). The tensor has fewer axes than the code assumes (an unbatched input, "
            "or an axis summed away earlier)."
            + (" Count the axes from the end (dim=-1 for the last, -2 for the one before it): the same line "
               "then serves a single input and a batch." if got > hi else ""),
            "an axis counted from the front" if got > hi else None
        )
    m = re.search(r"shape '\[([-\d, ]*)\]' is invalid for input of size (\d+)", text)
    if m:
        dims, total = m.groups()
        return Finding(
            f"A view/reshape to [{dims}] cannot hold the {total} entries the tensor has: the sizes asked for "
            "must multiply to the tensor's number of entries (check which sizes you split or merged)."
            + _one_size_other([int(d) for d in dims.split(",") if d.strip()], int(total), sizes)
        )
    if "view size is not compatible with input tensor's size and stride" in text:
        return Finding(
            "After a transpose/permute the tensor's entries are no longer in row order in memory, and "
            ".view cannot re-cut it: use .reshape(...), or call .contiguous() before .view(...)."
        )
    if "Expected all tensors to be on the same device" in text:
        return Finding(
            "Two tensors on different devices met in one operation: create new tensors with "
            "device=x.device (and move modules with .to(device))."
        )
    m = re.search(r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)", text)
    if m:
        index, dim, size = m.groups()
        cause = ("the index equals the axis's size, one past its last entry: a count or a length used as a position "
                 "(the last of n positions is n - 1), or an index computed from another axis's size."
                 if int(index) == int(size) else
                 "was it computed from another axis's size, are the tensor's axes in another order than the code "
                 "assumes, or is the axis sized by a number fixed in the code while the values used as indices grow "
                 "past it?")
        return Finding(
            f"An index {index} was used on an axis of size {n(size)} (dimension {dim} of the tensor indexed), "
            f"whose valid indices are 0 … {int(size) - 1}: {cause}"
            + (" An index counted from the front lands on another axis when the input has more axes (a batch): "
               "index from the end, x[..., i, j]." if _letter(int(size), sizes) in ("B", "nh") else "")
        )
    m = re.search(r"too many indices for tensor of dimension (\d+)", text)
    if m:
        d = int(m.group(1))
        return Finding(f"The subscript reads more axes than the tensor has ({d}): x[:, a:b] reads two axes, and a single "
                       "sequence (T,) has one. Index from the end with an Ellipsis, x[..., a:b], which works for (T,) and "
                       "(B, T) alike.")
    if "only supports boolean masks" in text:
        return Finding("masked_fill needs a boolean mask, True where the value is replaced: create the mask with "
                       "dtype=torch.bool (torch.ones(T, T) alone is float).")
    if "slice indices must be integers" in text and "/" in source.split("#")[0]:
        return Finding("In Python / always gives a float (12 / 12 is 1.0): use * or // to compute a slice bound.")
    if "must be tuple of ints,but got float" in text:
        return Finding("A size given to view/reshape is a float (a / division makes one): sizes are ints, use //.")
    if "'indices' to have one of the following scalar types" in text:
        return Finding("An embedding looks its rows up by integer index, and the indices given to it are not integers"
                       + (": torch.arange(T) makes int64 positions; a dtype= of a float type makes them floats."
                          if guesses else "."))
    if "index out of range in self" in text:
        vocab = f" (V = {sizes['V']})" if sizes and "V" in sizes else ""
        seen = []
        for name, value in values:
            if isinstance(value, torch.Tensor) and not value.dtype.is_floating_point and value.numel():
                seen.append(f"the largest index in {name} is {int(value.max())}")
            elif isinstance(value, torch.nn.Embedding):
                seen.append(f"{name} has {value.num_embeddings} rows")
        found = f" Here {', '.join(seen)}." if seen else ""
        return Finding(
            "An embedding lookup (or index_select) got an index at least as large as its number of rows: "
            f"token ids must lie in 0 … V - 1{vocab}, and positions in 0 … (context length) - 1.{found}"
        )
    m = re.search(r"argument '(\w+)' \(position \d+\) must be Tensor, not (\w+)", text)
    if m:
        arg, kind = m.groups()
        return Finding(
            f"A torch function got a Python {kind} where it needs a tensor (its argument {arg!r}): "
            "torch.sqrt, torch.exp, torch.log … take tensors only. For a plain number use math.sqrt, "
            "math.exp …, or put the number inside the tensor expression (torch.sqrt(var + eps))."
        )
    if "received an invalid combination of arguments" in text:
        called = re.search(r"^(\S+?)\(\) received", text)
        fn = called.group(1) if called else "the function"
        if re.search(r"\b(axis|keepdims)=", text) or re.search(r"\bnp\.\w+\(", source.split("#")[0]):
            return Finding(f"{fn} got numpy's keyword names (axis=, keepdims=): a numpy function given a tensor (np.max, "
                           "np.sum …) calls the tensor's own method with numpy's words, which PyTorch does not take. "
                           "Use the tensor's methods with PyTorch's names: x.max(dim=-1, keepdim=True).values, "
                           "x.sum(dim=-1, keepdim=True).")
        got = re.search(r"got \(([^)]*)\)", text)
        if got and re.search(r"\bfloat\b", got.group(1)) and re.search(r"\bint \w+", text):
            return Finding(
                f"{fn} got a Python float where it takes an int (a count, a size, a dim; PyTorch lists the forms it "
                "accepts below). A division with / gives a float even when it divides evenly (6 / 2 = 3.0): // keeps "
                "an int (6 // 2 = 3)."
            )
        return Finding(
            f"{fn} was called with arguments it does not take together (PyTorch lists the forms it accepts "
            "below): for instance keepdim=True needs a dim= too, and a dim must be an int or a tuple of ints."
        )
    if re.search(r"'(int|float|bool)' object is not iterable", text) and ".squeeze()" in source.split("#")[0]:
        return Finding("squeeze() without a dim removes every axis of size 1: one id (T = 1) becomes a 0-d tensor, whose "
                       ".tolist() is a plain number, not a list. Squeeze only the axis you mean (squeeze(0)), or none.")
    m = re.search(r"Sizes of tensors must match except in dimension (-?\d+)\. Expected size (\d+) but got size (\d+)", text)
    if m:
        d, want, got = m.groups()
        code = source.split("#")[0].replace(" ", "")
        unsq = re.search(r"\.unsqueeze\((-?\d+)\)", code)
        row = re.search(r"\.(reshape|view)\(1,-1\)", code)
        return Finding(f"torch.cat joins tensors along dim {d}: every other axis must have the same size in all of them, and "
                       f"one tensor has {n(got)} where the first has {n(want)}."
                + (f" .unsqueeze({unsq.group(1)}) put the new size-1 axis at position {unsq.group(1)}: to join a (B,) "
                   f"tensor to a (B, T) one along dim 1, make it (B, 1) with unsqueeze(1) (or [:, None])."
                   if unsq else
                   f" .{row.group(1)}(1, -1) makes a row, (1, N): to join a (B,) tensor to a (B, T) one along dim 1, "
                   f"make it a column, (B, 1), with {row.group(1)}(-1, 1) or unsqueeze(1)."
                   if row and d in ("1", "-1") else ""))
    m = re.search(r"value cannot be converted to type (u?int\d+) without overflow", text)
    if m:
        info = torch.iinfo(getattr(torch, m.group(1)))
        return Finding(f"{m.group(1)} holds the integers {info.min} ... {info.max} only, and a value given to it lies outside "
                       f"that range{' (a byte is 0 ... 255: torch.uint8 holds it, int8 does not)' if m.group(1) == 'int8' else ''}.")
    fn = re.search(r"\bmath\.(\w+)\(", source.split("#")[0])
    if fn and ("only one element tensors can be converted to Python scalars" in text
               or "must be real number, not Tensor" in text):
        return Finding(f"math.{fn.group(1)} takes one Python number, not a tensor: with a tensor of several entries "
                       f"it cannot convert it. torch.{fn.group(1)} does the same on every entry of a tensor.")
    if "stack expects each tensor to be equal size" in text:
        return Finding("torch.stack puts tensors side by side along a NEW axis, so they must all have the same shape; "
                       "to join tensors along an axis they already have (time, say), torch.cat is the one.")
    m = re.search(r"The expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\) at "
                  r"non-singleton dimension (\d+)", text)
    if m:
        want, have, d = m.groups()
        return Finding(f"expand only stretches axes of size 1 (a view, nothing copied): axis {d} has {n(have)}, not 1, "
                       f"so it cannot become {n(want)}. To repeat each slice of that axis, give it an axis of size 1 "
                       "next to it (unsqueeze), expand that one, then reshape; or repeat_interleave.")
    if "before Module.__init__() call" in text:
        return Finding("The layer's __init__ assigned a sub-module, a parameter or a buffer before nn.Module set itself up: "
                       "call super().__init__() as the first line of __init__.")
    m = re.search(r"missing (\d+) required positional arguments?: (.+)$", text, re.M)
    if m:
        return Finding(
            f"The call left out {m.group(2)}: PyTorch cannot guess it. For softmax, say along which axis "
            "the probabilities must sum to 1 (dim=-1: over the last axis)."
            if '"dim"' in m.group(2) or "'dim'" in m.group(2) else f"The call left out {m.group(2)}."
        )
    m = re.search(r"'(\w+)' object has no attribute '(\w+)'", text)
    module_kind = m and (isinstance(getattr(torch.nn, m.group(1), None), type) or any(
        type(v).__name__ == m.group(1) for _, v in values if isinstance(v, torch.nn.Module)))
    if m and isinstance(exc, AttributeError) and module_kind:  # a layer of a model, not the one meant
        kind, attr = m.groups()
        modules = [f"{name} is {type(v).__name__}" for name, v in values if isinstance(v, torch.nn.Module)][:3]
        seen = f" On that line {', '.join(modules)}." if modules else ""
        return Finding(f"The object reached here is a {kind}, which has no {attr}: the code picked another part than it "
                       f"meant (a wrong index or name into a model, say).{seen} print(model) lists every sub-module "
                       "with its index.")
    if re.search(r"'[<>]=?' not supported between instances of '\w+' and '\w+'", text) and "NoneType" in text:
        if ".get" in source.split("#")[0]:
            return Finding("A None was compared with < or >: dict.get returns None for a key that is not in the dict, and "
                           "min, max and sorted compare what their key= returns. Give get a default of the right kind, "
                           "d.get(key, default) (for a min, one that sorts after every real value, such as math.inf).")
        return Finding("A None was compared with < or >: a function without a return statement gives None, and so does "
                       "a lookup that found nothing (dict.get).")
    m = re.search(r"unsupported operand type\(s\) for ([^:]+): '(\w+)' and '(\w+)'", text)
    if m and "NoneType" in m.groups()[1:]:
        nones = [name for name, v in values if v is None and "." in name][:2]
        if nones:
            return _none_attribute(nones, f"takes no part in {m.group(1).strip()}", "before the arithmetic")
    m = re.search(r"'NoneType' object has no attribute '(\w+)'", text)
    if m and isinstance(exc, AttributeError):
        nones = [name for name, v in values if v is None and "." in name and f"{name}.{m.group(1)}" in source][:1]
        if nones:
            return _none_attribute(nones, f"has no .{m.group(1)}", "first")
    m = re.search(r"For 1D input, 1D target must have size 1|Expected input batch_size \((\d+)\) to match target "
                  r"batch_size \((\d+)\)", text)
    if m:
        return Finding("F.cross_entropy takes logits of shape (N, V), one row of V scores per prediction, and targets of "
                       "shape (N,), one class id per row (a 1-D input is read as the scores of a single prediction). "
                       "Flatten both the same way and keep the vocabulary axis: logits.reshape(-1, V) and "
                       "targets.reshape(-1); .view(-1) on the logits merges V into the rest.")
    m = re.search(r"not enough values to unpack \(expected (\d+), got (\d+)\)", text) or re.search(
        r"too many values to unpack \(expected (\d+)(?:, got (\d+))?\)", text
    )
    if m:
        want, got = m.groups()
        said = f"The line unpacks {want} values from something that has {got or 'more'}"
        split = re.search(r"(\w[\w.]*)\.r?split\(", source.split("#")[0])
        text_split = split and isinstance(dict(values).get(split.group(1)), str)
        if text_split:
            return Finding(f"{said}: {split.group(1)}.{'r' if '.rsplit(' in source else ''}split(...) gave {got or 'more'} "
                           "part(s) of the text, here "
                           f"{dict(values)[split.group(1)]!r}: a text without the separator is one part. "
                           "str.rpartition('.') always gives three: ('', '', text) when there is no dot.")
        if ".shape" not in source and not any(isinstance(v, torch.Tensor) for _, v in values):
            return Finding(f"{said}: the names on the left and the items on the right must be as many.")
        return Finding(
            f"{said}: for `B, T, C = x.shape`, "
            "the tensor has a different number of axes than the names on the left (an unbatched input "
            "(T, C) has 2). Use x.shape[-1], x.shape[-2], … to read sizes from the end."
        )
    return NOTHING


def _one_size_other(asked: list[int], total: int, sizes) -> str:
    """Where every size asked but one is the tensor's, and the entries left for that one are another size
    of the case: the tensor holds that size there ([B, T, nh, hs] asked of a tensor of B·T·n_kv·hs)."""
    if not sizes or -1 in asked:
        return ""
    found = []
    for i, size in enumerate(asked):
        rest = math.prod(asked[:i] + asked[i + 1:])
        if rest and total % rest == 0 and total // rest != size:
            held, asked_letter = _letter(total // rest, sizes), _letter(size, sizes)
            if held and asked_letter and held != asked_letter:
                found.append(f" Its {total} entries are the other sizes asked times {total // rest} = {held}: where "
                             f"{asked_letter} = {size} was asked, the tensor holds {held} = {total // rest}.")
    return found[0] if len(found) == 1 else ""  # two readings: neither is said


def _none_attribute(nones: list[str], what: str, when: str) -> Finding:
    """Attributes the failing line shows as None: a layer's ``.bias`` (built with bias=False), or another
    optional part the object does not have."""
    bias = any(name.endswith(".bias") for name in nones)
    return Finding(f"{' and '.join(nones)} {'are' if len(nones) > 1 else 'is'} None here, and None {what}. "
                   + ("A layer built with bias=False has no bias: its .bias is None. Handle that case (if layer.bias is "
                      "not None: ...), or go over the parameters the layer has (for p in layer.parameters(): ...), or "
                      "call the layer itself, which does." if bias else
                      f"Is it an optional part that this object does not have? Handle the None case {when}."),
                   "a layer without a bias" if bias else "an attribute that is None")
