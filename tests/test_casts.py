"""Sentences an error's explanation reads off the student's code (helpers/checks/diagnose/casts.py,
and the sizes written as numbers in exceptions.py): said when the code and the values show them,
silent otherwise."""

import linecache

import torch

from helpers.checks.diagnose.exceptions import explain_error


def _raised(source: str, name: str, *args):
    """The explanation's lines of what ``name(*args)``, defined by ``source`` in a cell, raised."""
    filename = f"<cell {abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"torch": torch}
    exec(compile(source, filename, "exec"), namespace)
    try:
        namespace[name](*args)
    except Exception as exc:  # noqa: BLE001
        return "\n".join(explain_error(exc, {"B": 2, "T": 5, "C": 3}).lines)
    raise AssertionError("it did not raise")


def test_the_line_that_cast_a_tensor_is_named_with_what_the_cast_does():
    said = _raised("def f(x, v):\n    w = torch.softmax(x, dim=-1).float()\n    return w @ v\n", "f",
                   torch.randn(5, 5, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64))
    assert "w is float32 because line 2 cast it with `.float()`" in said
    assert "created without dtype=" not in said, "the generic guess gives way to what the code shows"


def test_to_a_tensor_is_said_to_take_its_dtype_as_well_as_its_device():
    table = torch.nn.Embedding(8, 3).double()
    said = _raised("def f(x, table):\n    pos = torch.arange(x.shape[0]).to(x)\n    return x + table(pos)\n", "f",
                   torch.randn(5, 3, dtype=torch.float64), table)
    assert "pos is float64 because line 2 made it with `.to(x)`" in said and "`.to(x.device)`" in said


def test_no_cast_sentence_where_the_dtype_came_from_elsewhere():
    said = _raised("def f(x, v):\n    w = torch.softmax(x, dim=-1)\n    return w @ v\n", "f",
                   torch.randn(5, 5, dtype=torch.float32), torch.randn(5, 3, dtype=torch.float64))
    assert "because line" not in said and "different dtypes" in said


def test_sizes_written_as_numbers_in_a_view_are_named_against_the_batch():
    said = _raised("def f(ids, new):\n    return torch.cat([ids, new.view(1, 1)], dim=1)\n", "f",
                   torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    assert "`.view(1, 1)` writes every size as a number" in said and "(B = 2)" in said
    quiet = _raised("def f(ids, new):\n    return torch.cat([ids, new.view(new.shape[0], 2)], dim=1)\n", "f",
                    torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    assert "writes every size as a number" not in quiet
