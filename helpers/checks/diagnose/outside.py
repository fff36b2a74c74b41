"""Modules with weights that forward calls but that are not part of the module (a layer built
inside forward): found while the student's code runs, told in words."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from helpers.checks.diagnose.student_code import _describe_value


def _module_text(module: torch.nn.Module) -> str:
    text = _describe_value("m", module, None)
    return text.removeprefix("m: ") if text else f"a {type(module).__name__}"


@contextmanager
def outside_modules(*roots):
    """Probe side: while active, the modules with weights (or a dropout in training mode) called that
    are not part of ``roots`` (a layer built inside forward, or kept outside the module) are listed in
    the list yielded, at most three; an error raised inside carries them too (``explain_parts``
    tells them). A parameter-free layer built in forward (nn.GELU()(x)) is harmless: not listed."""
    known = {id(m) for root in roots if isinstance(root, torch.nn.Module) for m in root.modules()}
    found: list[str] = []
    seen: set[int] = set()

    def before(module, args):
        weighty = any(True for _ in module.parameters()) or (isinstance(module, torch.nn.Dropout) and module.training)
        if weighty and id(module) not in known and id(module) not in seen and len(found) < 3:
            seen.update(id(m) for m in module.modules())  # its own children are part of it
            found.append(_module_text(module))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(before) if known else None
    try:
        yield found
    except Exception as exc:
        try:
            if found and getattr(exc, "course_outside", None) is None:
                exc.course_outside = list(found)
        except Exception:  # noqa: BLE001 - exceptions that refuse attributes just go without
            pass
        raise
    finally:
        if handle is not None:
            handle.remove()


def outside_told(found) -> str:
    """``outside_modules``' list in words, or ""."""
    if not isinstance(found, list) or not found:
        return ""
    return (f"forward called {', '.join(map(str, found[:3]))}, which {'is' if len(found) == 1 else 'are'} not part of "
            "the module: a layer built inside forward (or kept outside the module) gets new random weights at every "
            "call, is not one of the module's parameters and is never trained. Create it once in __init__ "
            "(self.name = nn.Linear(...)) and call that.")
