"""Checks that diagnose mistakes, one module per lesson; the shared machinery is in ``core``."""

from helpers.checks.core import REGISTRY, Check, CheckFailed, recording

__all__ = ["REGISTRY", "Check", "CheckFailed", "recording"]
