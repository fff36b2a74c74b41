"""Tests for helpers.data: finding/downloading the text, the vocabulary, splitting, batching.

Downloads are tested against a local HTTP server; nothing here touches the internet.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import pathlib
import socket
import threading

import pytest
import torch

from helpers import data
from helpers.data import (
    DATA_ENV_VAR,
    FILENAME,
    TINY_SHAKESPEARE_CHARS,
    CharDataset,
    CharVocab,
    DataUnavailableError,
    default_cache_dir,
    get_batch,
    load_tiny_shakespeare,
    shakespeare_dataset,
    tiny_shakespeare_path,
    train_val_split,
)

# Read before the autouse fixture below removes it, so the real-corpus tests can still use it.
_REAL_DATA_ENV = os.environ.get(DATA_ENV_VAR)
_LOCAL_COPY = pathlib.Path("/work/shared/data") / FILENAME

SMALL_TEXT = "".join(f"Line {i}: To be, or not to be, that is the question.\n" for i in range(400))
SMALL_BYTES = SMALL_TEXT.encode("utf-8")
SMALL_SHA = hashlib.sha256(SMALL_BYTES).hexdigest()


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test sees the real data variable or the user's cache unless it sets them itself."""
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


# --------------------------------------------------------------------------------------------
# A local HTTP server standing in for the internet
# --------------------------------------------------------------------------------------------


class _Server:
    def __init__(self) -> None:
        self.requests: list[str] = []
        self.files: dict[str, bytes] = {"/input.txt": SMALL_BYTES}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the name http.server wants)
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args) -> None:  # noqa: A002 (keep pytest output clean)
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def url(self, name: str = "/input.txt") -> str:
        return f"http://127.0.0.1:{self.port}{name}"


@pytest.fixture
def server():
    srv = _Server()
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
        srv.thread.join(timeout=5)


@pytest.fixture
def closed_port_url():
    """A URL on a port nothing listens on: connecting is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/input.txt"


def _fetch(cache_dir, url, sha256=SMALL_SHA, **kwargs):
    return tiny_shakespeare_path(
        cache_dir=cache_dir, url=url, sha256=sha256, progress=False, **kwargs
    )


def _assert_helpful(message: str, url: str, cache_dir: pathlib.Path) -> None:
    assert url in message
    assert str(cache_dir / FILENAME) in message
    assert DATA_ENV_VAR in message
    assert f"export {DATA_ENV_VAR}=" in message


# --------------------------------------------------------------------------------------------
# Downloading and caching
# --------------------------------------------------------------------------------------------


def test_download_writes_verified_file_into_cache(server, tmp_path):
    got = _fetch(tmp_path, server.url())
    assert got == tmp_path / FILENAME
    assert got.read_bytes() == SMALL_BYTES
    assert server.requests == ["/input.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILENAME]  # no temporary left


def test_second_call_uses_cache_without_network(server, tmp_path):
    first = _fetch(tmp_path, server.url())
    second = _fetch(tmp_path, server.url())
    assert first == second
    assert len(server.requests) == 1
    # download=False also finds the cached copy
    assert _fetch(tmp_path, server.url(), download=False) == first
    assert len(server.requests) == 1


def test_load_returns_downloaded_text(server, tmp_path):
    text = load_tiny_shakespeare(
        cache_dir=tmp_path, url=server.url(), sha256=SMALL_SHA, progress=False
    )
    assert text == SMALL_TEXT


def test_wrong_checksum_raises_and_leaves_nothing(server, tmp_path):
    cache = tmp_path / "cache"
    wrong = "0" * 64
    with pytest.raises(DataUnavailableError) as info:
        _fetch(cache, server.url(), sha256=wrong)
    message = str(info.value)
    assert wrong in message and SMALL_SHA in message  # expected vs got
    assert list(cache.iterdir()) == []  # neither partial nor final file


def test_corrupt_cached_file_is_replaced(server, tmp_path):
    (tmp_path / FILENAME).write_text("not shakespeare at all", encoding="utf-8")
    got = _fetch(tmp_path, server.url())
    assert got.read_bytes() == SMALL_BYTES
    assert server.requests == ["/input.txt"]


def test_corrupt_cached_file_without_download_is_an_error(tmp_path):
    (tmp_path / FILENAME).write_text("not shakespeare at all", encoding="utf-8")
    with pytest.raises(DataUnavailableError, match="wrong checksum"):
        _fetch(tmp_path, "http://127.0.0.1:9/input.txt", download=False)


def test_http_404_gives_clear_error(server, tmp_path):
    url = server.url("/missing.txt")
    with pytest.raises(DataUnavailableError) as info:
        _fetch(tmp_path, url)
    _assert_helpful(str(info.value), url, tmp_path)
    assert "404" in str(info.value)
    assert server.requests == ["/missing.txt"]
    assert list(tmp_path.iterdir()) == []


def test_unreachable_server_gives_clear_error(closed_port_url, tmp_path):
    with pytest.raises(DataUnavailableError) as info:
        _fetch(tmp_path, closed_port_url, timeout=5)
    _assert_helpful(str(info.value), closed_port_url, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_download_false_with_no_copy_gives_clear_error(server, tmp_path):
    with pytest.raises(DataUnavailableError) as info:
        _fetch(tmp_path, server.url(), download=False)
    _assert_helpful(str(info.value), server.url(), tmp_path)
    assert "download=False" in str(info.value)
    assert server.requests == []


def test_sha256_none_skips_verification(server, tmp_path):
    (tmp_path / FILENAME).write_text("anything", encoding="utf-8")
    assert _fetch(tmp_path, server.url(), sha256=None).read_text(encoding="utf-8") == "anything"
    assert server.requests == []


def test_default_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "transformer-course"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == pathlib.Path.home() / ".cache" / "transformer-course"


def test_default_cache_dir_is_used_when_none_given(server, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    got = tiny_shakespeare_path(url=server.url(), sha256=SMALL_SHA, progress=False)
    assert got == tmp_path / "xdg" / "transformer-course" / FILENAME
    assert got.read_bytes() == SMALL_BYTES


# --------------------------------------------------------------------------------------------
# Explicit path and environment variable
# --------------------------------------------------------------------------------------------


@pytest.fixture
def other_copy(tmp_path):
    """A valid text in its own folder, different from what the cache and server hold."""
    text = "A different play.\n" * 50
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / FILENAME).write_text(text, encoding="utf-8")
    return folder, text, _sha(text.encode("utf-8"))


@pytest.fixture
def filled_cache(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / FILENAME).write_bytes(SMALL_BYTES)
    return cache


@pytest.mark.parametrize("form", ["file", "directory"])
def test_env_var_wins_over_cache(form, other_copy, filled_cache, monkeypatch, server):
    folder, text, sha = other_copy
    monkeypatch.setenv(DATA_ENV_VAR, str(folder / FILENAME if form == "file" else folder))
    got = _fetch(filled_cache, server.url(), sha256=sha)
    assert got == folder / FILENAME
    assert load_tiny_shakespeare(cache_dir=filled_cache, sha256=sha) == text
    assert server.requests == []


@pytest.mark.parametrize("form", ["file", "directory"])
def test_explicit_path_wins_over_env_and_cache(
    form, other_copy, filled_cache, monkeypatch, tmp_path
):
    folder, text, sha = other_copy
    monkeypatch.setenv(DATA_ENV_VAR, str(filled_cache))
    given = folder / FILENAME if form == "file" else folder
    assert tiny_shakespeare_path(given, cache_dir=filled_cache, sha256=sha) == folder / FILENAME
    assert load_tiny_shakespeare(str(given), sha256=sha) == text


def test_missing_explicit_path_is_an_error_naming_it(server, tmp_path):
    missing = tmp_path / "no-such-dir" / "shakespeare.txt"
    with pytest.raises(DataUnavailableError) as info:
        _fetch(tmp_path / "cache", server.url(), path=missing)
    assert str(missing) in str(info.value)
    assert server.requests == []  # no fall-through to a download


def test_missing_env_var_path_is_an_error_naming_it(server, monkeypatch, tmp_path):
    missing = tmp_path / "nowhere"
    monkeypatch.setenv(DATA_ENV_VAR, str(missing))
    with pytest.raises(DataUnavailableError) as info:
        _fetch(tmp_path / "cache", server.url())
    assert str(missing) in str(info.value) and DATA_ENV_VAR in str(info.value)
    assert server.requests == []


def test_env_var_file_checksum_is_verified(other_copy, monkeypatch, tmp_path):
    folder, _, sha = other_copy
    monkeypatch.setenv(DATA_ENV_VAR, str(folder))
    with pytest.raises(DataUnavailableError) as info:
        tiny_shakespeare_path(cache_dir=tmp_path / "cache", sha256=SMALL_SHA, download=False)
    message = str(info.value)
    assert str(folder / FILENAME) in message
    assert SMALL_SHA in message and sha in message
    # ...and skipped with sha256=None
    assert tiny_shakespeare_path(sha256=None) == folder / FILENAME


def test_explicit_path_checksum_is_verified(other_copy):
    folder, _, sha = other_copy
    with pytest.raises(DataUnavailableError, match="wrong SHA-256") as info:
        tiny_shakespeare_path(folder, sha256=SMALL_SHA)
    assert sha in str(info.value)


# --------------------------------------------------------------------------------------------
# The real corpus (when a copy is available)
# --------------------------------------------------------------------------------------------


def _real_copy() -> pathlib.Path | None:
    if _REAL_DATA_ENV:
        return pathlib.Path(_REAL_DATA_ENV)
    if _LOCAL_COPY.is_file():
        return _LOCAL_COPY
    return None


needs_real_corpus = pytest.mark.skipif(
    _real_copy() is None,
    reason=f"Tiny Shakespeare not available: set {DATA_ENV_VAR} to the file or its folder",
)


@needs_real_corpus
def test_real_corpus_is_tiny_shakespeare():
    text = load_tiny_shakespeare(_real_copy())  # checksum-verified with the default sha256
    assert len(text) == TINY_SHAKESPEARE_CHARS
    assert len(set(text)) == 65
    assert text.startswith("First Citizen:\n")


@needs_real_corpus
def test_real_dataset_split_is_90_10():
    ds = shakespeare_dataset(_real_copy())
    assert isinstance(ds, CharDataset)
    assert len(ds.vocab) == 65
    assert len(ds.train) + len(ds.val) == TINY_SHAKESPEARE_CHARS
    assert len(ds.train) == int(0.9 * TINY_SHAKESPEARE_CHARS)
    assert ds.train.dtype == torch.long and ds.train.dim() == 1
    assert ds.vocab.decode(ds.train[:15]) == "First Citizen:\n"


# --------------------------------------------------------------------------------------------
# CharVocab
# --------------------------------------------------------------------------------------------


def test_vocab_is_sorted_unique_chars():
    vocab = CharVocab.from_text("hello world")
    assert vocab.chars == [" ", "d", "e", "h", "l", "o", "r", "w"]
    assert len(vocab) == 8
    assert vocab.stoi["h"] == 3 and vocab.itos[3] == "h"
    assert all(vocab.itos[vocab.stoi[c]] == c for c in vocab.chars)


def test_vocab_round_trip():
    text = "To be, or not to be:\nthat is the question."
    vocab = CharVocab.from_text(text)
    ids = vocab.encode(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert ids.tolist() == [vocab.chars.index(c) for c in text]
    assert vocab.decode(ids) == text
    assert vocab.decode(ids.tolist()) == text
    assert vocab.encode("").shape == (0,)


def test_encode_unknown_character_names_it():
    vocab = CharVocab.from_text("abc")
    with pytest.raises(ValueError, match=r"'z'.*position 2"):
        vocab.encode("abzcq")


def test_a_long_text_is_encoded_at_once_with_the_same_ids_and_errors():
    """A corpus is looked up as one tensor: the ids are the character loop's, a character outside
    the vocabulary (past every code point, or between two of them) is still named with its position."""
    text = ("To be, or not to be: that is the question. " * 200) + "Zounds!\n" + "\u00e9tude " * 50
    vocab = CharVocab.from_text(text)
    ids = vocab.encode(text)
    assert ids.dtype == torch.long and ids.tolist() == [vocab.stoi[c] for c in text]
    with pytest.raises(ValueError, match=r"'\u2603' at position 8800"):
        vocab.encode(text[:8800] + "\u2603" + text)  # past the vocabulary's largest code point
    with pytest.raises(ValueError, match=r"'j' at position 5000"):
        vocab.encode(text[:5000] + "j" + text)  # between two of its code points
    with pytest.raises(ValueError, match=r"position 6000"):
        vocab.encode(text[:6000] + "\ud800" + text)  # a lone surrogate: no UTF-32 for it


def test_decode_out_of_range_raises():
    vocab = CharVocab.from_text("abc")
    with pytest.raises(ValueError, match="out of range"):
        vocab.decode([0, 3])
    with pytest.raises(ValueError, match="out of range"):
        vocab.decode(torch.tensor([-1]))
    with pytest.raises(ValueError, match="1-D"):
        vocab.decode(torch.zeros(2, 2, dtype=torch.long))


def test_vocab_dict_is_json_safe_and_round_trips():
    vocab = CharVocab.from_text("Hark!\n Who's there?")
    restored = CharVocab.from_dict(json.loads(json.dumps(vocab.to_dict())))
    assert restored == vocab
    assert restored.chars == vocab.chars
    assert restored.encode("Hark!").tolist() == vocab.encode("Hark!").tolist()


# --------------------------------------------------------------------------------------------
# Splitting and batching
# --------------------------------------------------------------------------------------------


def test_train_val_split_sizes_and_order():
    ids = torch.arange(1000)
    train, val = train_val_split(ids)
    assert len(train) == 900 and len(val) == 100
    assert torch.equal(torch.cat([train, val]), ids)  # not shuffled
    train, val = train_val_split(ids, 0.75)
    assert len(train) == 750 and len(val) == 250


@pytest.mark.parametrize("fraction", [0, 1, -0.1, 1.5])
def test_train_val_split_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match="train_fraction"):
        train_val_split(torch.arange(100), fraction)


def test_train_val_split_rejects_2d():
    with pytest.raises(ValueError, match="1-D"):
        train_val_split(torch.zeros(10, 10, dtype=torch.long))


def test_get_batch_shapes_and_shift():
    ids = torch.randint(0, 50, (500,), generator=torch.Generator().manual_seed(1))
    x, y = get_batch(ids, batch_size=8, block_size=16, generator=torch.Generator().manual_seed(0))
    assert x.shape == (8, 16) and y.shape == (8, 16)
    assert x.dtype == torch.long and y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_get_batch_windows_come_from_the_source():
    # ids[i] == i, so each row's first value is its start offset
    ids = torch.arange(1000)
    batch_size, block_size = 32, 10
    x, y = get_batch(ids, batch_size, block_size, generator=torch.Generator().manual_seed(3))
    starts = x[:, 0]
    assert int(starts.min()) >= 0 and int(starts.max()) + block_size < len(ids)
    for b, s in enumerate(starts.tolist()):
        assert torch.equal(x[b], ids[s : s + block_size])
        assert torch.equal(y[b], ids[s + 1 : s + block_size + 1])
    # the starts follow torch.randint with that generator
    expected = torch.randint(
        len(ids) - block_size, (batch_size,), generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(starts, expected)


def test_get_batch_with_the_shortest_allowed_text():
    ids = torch.arange(6)
    x, y = get_batch(ids, batch_size=200, block_size=5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, ids[:5].expand(200, 5))  # only one window fits
    assert torch.equal(y, ids[1:].expand(200, 5))


def test_get_batch_is_deterministic_per_seed():
    ids = torch.arange(10_000)
    a = get_batch(ids, 16, 32, generator=torch.Generator().manual_seed(123))
    b = get_batch(ids, 16, 32, generator=torch.Generator().manual_seed(123))
    c = get_batch(ids, 16, 32, generator=torch.Generator().manual_seed(124))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_get_batch_rejects_too_short_text():
    with pytest.raises(ValueError, match="block_size"):
        get_batch(torch.arange(8), batch_size=2, block_size=8)
    get_batch(torch.arange(9), batch_size=2, block_size=8)  # exactly block_size + 1 is enough


def test_shakespeare_dataset_from_small_copy(tmp_path):
    (tmp_path / FILENAME).write_bytes(SMALL_BYTES)
    ds = shakespeare_dataset(tmp_path, sha256=SMALL_SHA)
    assert ds.vocab == CharVocab.from_text(SMALL_TEXT)
    assert len(ds.train) == int(0.9 * len(SMALL_TEXT))
    assert ds.vocab.decode(torch.cat([ds.train, ds.val])) == SMALL_TEXT
    with pytest.raises(AttributeError):
        ds.train = ds.val  # frozen


def test_module_constants():
    assert data.TINY_SHAKESPEARE_CHARS == 1_115_394
    assert data.DATA_ENV_VAR == "TRANSFORMER_COURSE_DATA"
    assert data.FILENAME == "tinyshakespeare.txt"
    assert data.TINY_SHAKESPEARE_URL.startswith("https://")
    assert len(data.TINY_SHAKESPEARE_SHA256) == 64
