"""Import every lesson's check module, so that ``helpers.checks.REGISTRY`` knows every check."""

import importlib
import pkgutil

import helpers.checks

MODULES = [
    importlib.import_module(f"helpers.checks.{info.name}")
    for info in pkgutil.iter_modules(helpers.checks.__path__)
    if info.name != "core"
]
