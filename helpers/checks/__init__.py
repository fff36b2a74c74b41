"""The checks behind every exercise's tests, with their diagnoses.

A module per exercise or pair of exercises (``LESSON_CHECKS`` says which lesson imports which),
and the modules they share: ``core`` (a check's probe and judge, the data that crosses between
processes), ``evidence`` (a returned value and a tensor's first difference in words),
``diagnose`` (what a wrong output or an error establishes about its cause), ``errors`` (the
student's error as data), ``invariants`` (what every exercise of a kind must satisfy),
``functions`` (the engine of a check of a function: cases called, outputs judged, a mistake named
only when it explains every output), ``verdict`` (a module's output run, judged and located),
``looping`` (a loop that never ends made a clear failure), and the ``*_known``, ``*_format`` and
``*_mistakes`` modules that hold a lesson's known-good helpers and classic mistakes.
"""

from helpers.checks.core import REGISTRY, Check, CheckFailed, recording

__all__ = ["LESSON_CHECKS", "REGISTRY", "Check", "CheckFailed", "recording"]

#: each lesson's exercise check modules, as its notebook imports them (``tests/test_kit.py`` compares)
LESSON_CHECKS: dict[str, tuple[str, ...]] = {
    "01-tokens-and-embeddings": ("next_token", "parameter_count", "tokens"),
    "02-language-models": ("cross_entropy", "mlp", "tied_lm"),
    "03-self-attention": ("attention",),
    "04-attention-modules": ("multihead",),
    "05-transformer-layer": ("layer_norm", "transformer_block"),
    "06-transformer-lm": ("position_embeddings", "transformer_lm"),
    "07-training": ("training_batches", "training_eval", "training_groups", "training_schedule", "training_step"),
    "08-generation": ("sample_next", "sampling_filters"),
    "09-fast-generation": ("batch_mask", "cached_generation", "kv_cache", "rope"),
    "10-gpt2": ("bpe", "bpe_text", "gpt2"),
    "11-modern-block": ("llama", "modern_block", "modern_options"),
    "12-fine-tuning": ("lora", "lora_wrap", "speaker_head"),
}
