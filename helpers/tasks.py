"""Lesson 12's two fine-tuning tasks, built from what is already on the machine.

* **A second text**: the docstrings of Python's own standard library, read from the source files
  every Python installation ships (``docstring_text``), in the character vocabulary of the model
  being adapted (``docstring_dataset``). Nothing is downloaded; the text depends on the Python
  version, so its size and the losses on it differ a little from one installation to another.
* **Who speaks this line?**: the speeches of Tiny Shakespeare, each under its speaker's name (the
  labels are in the text: a line ``NAME:`` opens each speech), for the most frequent speakers
  (``speeches``, ``speaker_dataset``).

Shape legend: N examples, T the window (the model's context), K classes (speakers).
"""

from __future__ import annotations

import ast
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from helpers.data import CharDataset, CharVocab, train_val_split

__all__ = ["DOCSTRINGS", "SpeakerData", "docstring_dataset", "docstring_text", "speaker_dataset", "speeches"]

#: the name of the second text, as ``CharDataset.corpus`` carries it
DOCSTRINGS = "Python's docstrings"
_SPEAKER = re.compile(r"([A-Z][A-Za-z' ]*):\n")


def _standard_library() -> Path:
    return Path(os.__file__).resolve().parent


def docstring_text(vocab: CharVocab | None = None, folder: str | os.PathLike[str] | None = None,
                   max_files: int | None = None) -> str:
    """Every docstring of the top-level ``.py`` files of Python's standard library, in file order.

    Modules, classes and functions, each docstring once, separated by a blank line. With ``vocab``,
    each character it does not have becomes a space (Tiny Shakespeare has no digits, brackets,
    ``_`` or ``=``: about 4 % of this text). ``folder``: another folder of ``.py`` files; ``max_files``:
    only the first files, in name order (a quick run). Files that Python cannot parse are skipped.
    """
    docs = []
    for path in sorted(Path(folder or _standard_library()).glob("*.py"))[:max_files]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    docs.append(doc.strip())
    text = "\n\n".join(docs) + "\n"
    if vocab is not None:
        known = set(vocab.chars)
        text = "".join(ch if ch in known else " " for ch in text)
    return text


def docstring_dataset(vocab: CharVocab, train_fraction: float = 0.9, folder=None,
                      max_files: int | None = None) -> CharDataset:
    """``docstring_text`` in ``vocab``'s ids, split like Tiny Shakespeare (the first 90 % to train on)."""
    text = docstring_text(vocab, folder, max_files)
    train, val = train_val_split(vocab.encode(text), train_fraction)
    return CharDataset(vocab=vocab, train=train, val=val, corpus=DOCSTRINGS)


def speeches(text: str) -> list[tuple[str, str]]:
    """Tiny Shakespeare's speeches as ``(speaker, speech)``: each blank-line-separated block that
    opens with a line ``NAME:``; the speech is the rest of the block."""
    found = []
    for block in text.split("\n\n"):
        match = _SPEAKER.match(block.strip("\n"))
        if match:
            found.append((match[1], block.strip("\n")[match.end():]))
    return found


@dataclass(frozen=True)
class SpeakerData:
    """The classification task: windows of ids, their lengths and labels, split in two."""

    names: list[str]  # the K speakers, most frequent first; label k is names[k]
    train_ids: torch.Tensor  # (N_train, T) long: windows of T characters of the speeches, the last of each padded
    train_lengths: torch.Tensor  # (N_train,) long: how many of the T are the speech's, 1 ... T
    train_labels: torch.Tensor  # (N_train,) long, in 0 ... K-1
    val_ids: torch.Tensor  # (N_val, T)
    val_lengths: torch.Tensor  # (N_val,)
    val_labels: torch.Tensor  # (N_val,)


def speaker_dataset(text: str, vocab: CharVocab, n_speakers: int = 4, window: int = 64, val_fraction: float = 0.2,
                    seed: int = 0, pad_id: int = 0, max_windows: int | None = None) -> SpeakerData:
    """The speeches of the ``n_speakers`` most frequent speakers, each cut into windows of ``window``
    characters, the last one padded on the right with ``pad_id`` (a causal model's position t never
    sees what follows it, so the padding changes nothing up to the speech's last character). A random
    ``val_fraction`` of each speaker's speeches, whole, is held out (a generator seeded with ``seed``);
    each split's windows come in a random order, and ``max_windows`` keeps only the first of each
    (a quick run)."""
    found = [(name, speech) for name, speech in speeches(text) if speech.strip()]
    counts = Counter(name for name, _ in found)
    names = [name for name, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n_speakers]]
    generator = torch.Generator().manual_seed(seed)
    parts: dict[str, list] = {"train": [], "val": []}
    for label, name in enumerate(names):
        own = [speech for speaker, speech in found if speaker == name]
        order = torch.randperm(len(own), generator=generator).tolist()
        n_val = max(1, round(val_fraction * len(own)))
        for i, k in enumerate(order):
            for start in range(0, len(own[k]), window):
                parts["val" if i < n_val else "train"].append((own[k][start:start + window], label))
    for name, rows in parts.items():
        order = torch.randperm(len(rows), generator=generator).tolist()
        parts[name] = [rows[k] for k in order][:max_windows]

    def tensors(rows):
        ids = torch.full((len(rows), window), pad_id, dtype=torch.long)  # (N, T)
        lengths = torch.tensor([len(speech) for speech, _ in rows], dtype=torch.long)  # (N,)
        for i, (speech, _) in enumerate(rows):
            ids[i, : len(speech)] = vocab.encode(speech)
        return ids, lengths, torch.tensor([label for _, label in rows], dtype=torch.long)

    train_ids, train_lengths, train_labels = tensors(parts["train"])
    val_ids, val_lengths, val_labels = tensors(parts["val"])
    return SpeakerData(names, train_ids, train_lengths, train_labels, val_ids, val_lengths, val_labels)
