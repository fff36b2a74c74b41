"""GPT-2's real tokenizer files, read by lesson 10's BPETokenizer and by Hugging Face's GPT2Tokenizer:
the same ids on real text (Shakespeare, code, other scripts, emoji, numbers, runs of whitespace,
contractions), and the round trip back to the text.

The files are GPT-2 small's published vocab.json and merges.txt (50,257 tokens, 50,000 merges), taken
from the folder named by TRANSFORMER_COURSE_GPT2_TOKENIZER, else from ../shared/data/gpt2-tokenizer
beside the checkout, and checked against their SHA-256 checksums (helpers.data.gpt2_tokenizer_files).
Without them, or without transformers (a test-only dependency: pip install -e '.[dev]'), the tests
that need them skip and say why. Nothing here uses the network.
"""

import json
import os
from pathlib import Path

import pytest

import helpers.data as data
from helpers.data import (
    GPT2_ENV_VAR,
    GPT2_TOKENIZER_ENV_VAR,
    DataUnavailableError,
    gpt2_tokenizer_files,
)
from helpers.reference.gpt2 import BPETokenizer

ROOT = Path(__file__).resolve().parents[1]
FOLDER = Path(os.environ.get(GPT2_TOKENIZER_ENV_VAR) or ROOT / ".." / "shared" / "data" / "gpt2-tokenizer")
HAVE_FILES = (FOLDER / "vocab.json").is_file() and (FOLDER / "merges.txt").is_file()
needs_files = pytest.mark.skipif(
    not HAVE_FILES, reason=f"GPT-2's vocab.json and merges.txt are not in {FOLDER}: set {GPT2_TOKENIZER_ENV_VAR} to a "
                           "folder that holds them")

#: real text of every kind the pre-split and the byte table must get right, by group
TEXTS = {
    "shakespeare": [
        "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
        "ROMEO: But, soft! what light through yonder window breaks?",
        "To be, or not to be: that is the question:\nWhether 'tis nobler in the mind to suffer",
        "KING RICHARD III:\nNow is the winter of our discontent\nMade glorious summer by this sun of York;",
        "O Romeo, Romeo! wherefore art thou Romeo?\nDeny thy father and refuse thy name;",
        "Thou art a boil, a plague-sore, an embossed carbuncle, in my corrupted blood.",
    ],
    "code": [
        "def count_pairs(ids):\n    counts = {}\n    for pair in zip(ids, ids[1:]):\n        counts[pair] = counts.get(pair, 0) + 1\n    return counts\n",
        "if (x != null && y >= 0) { return arr[i++] * 2; } // done\n\tconst re = /^\\s+$/g;",
        "SELECT name, COUNT(*) FROM users WHERE id IN (1, 2, 3) GROUP BY name;",
        "<div class=\"note\">&nbsp;</div> https://example.org/a?b=1&c=%20#top",
    ],
    "unicode": [
        "naïve café, crème brûlée, Zürich, São Paulo, Łódź",
        "日本語のテキストと漢字、カタカナ。中文文本。한국어 텍스트",
        "Ελληνικά κείμενα, русский текст, עברית, العربية, हिन्दी, ไทย",
        "e\u0301 (a combining accent), \ufb01 (a ligature), \u00a0no-break space, \u3000ideographic space",
        "zero\u200bwidth, soft\u00adhyphen, dashes \u2013 \u2014, quotes \u201cso\u201d \u2018so\u2019",
    ],
    "emoji": [
        "😀😀 👍🏽 👨\u200d👩\u200d👧\u200d👦 🇫🇷 ❤️ 🤖🎉",
        "I love it 😍!!! #blessed @friend ✨✨✨",
    ],
    "numbers": [
        "12345678901234567890 and 3.14159, 1,000,000.00, -42, +7, 1e-9, 0x1F, 2024-12-06 23:59",
        "½ ¾ ² ³ Ⅻ ٣ ४ 10% 5€ $3.50 £7 ¥100",
    ],
    "whitespace": [
        "   leading spaces", "trailing spaces   ", "a  b   c    d", "\n\n\nthree newlines", "\t\ttabs\t",
        "windows\r\nline ends\r\n", " \n \n ", "mixed \t \n  runs\n\n  of  white \t space  ", " ", "  ", "\n", "",
    ],
    "contractions": [
        "don't we'll they've I'm you'd she's it'll",
        "DON'T I'M WE'LL (capitals are not contractions to the pattern)",
        "don’t (a curly apostrophe), rock 'n' roll, the '90s, o'clock, y'all'd've",
    ],
}


def differences(ours: BPETokenizer, theirs, texts: list[str]) -> list[str]:
    """For every text on which the two tokenizers give other ids, where the ids first differ."""
    found = []
    for text in texts:
        a, b = ours.encode(text), theirs.encode(text)
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            found.append(f"{text[:40]!r}: first difference at token {at}: ours {a[at:at + 4]}, GPT2Tokenizer's "
                         f"{b[at:at + 4]} ({len(a)} and {len(b)} tokens)")
    return found


@pytest.fixture(scope="module")
def files():
    if not HAVE_FILES:
        pytest.skip(f"GPT-2's vocab.json and merges.txt are not in {FOLDER}")
    return gpt2_tokenizer_files(FOLDER)  # checked against GPT-2's published checksums


@pytest.fixture(scope="module")
def ours(files):
    return BPETokenizer.from_files(files.vocab, files.merges)


@pytest.fixture(scope="module")
def theirs(files):
    transformers = pytest.importorskip("transformers", reason="transformers is a test-only dependency: "
                                                             "pip install -e '.[dev]'")
    return transformers.GPT2Tokenizer.from_pretrained(files.vocab.parent)


@needs_files
def test_the_files_are_gpt2s_and_read_as_gpt2_reads_them(ours):
    assert len(ours.vocab) == 50_257 and len(ours.merges) == 50_000
    assert ours.encode("Hello world") == [15496, 995]  # GPT-2's ids, as published with its examples
    assert ours.encode(" the") == [262] and ours.vocab[50_256] == b"<|endoftext|>"


@needs_files
@pytest.mark.parametrize("group", list(TEXTS))
def test_ids_match_gpt2tokenizer_and_decode_back(ours, theirs, group):
    texts = TEXTS[group]
    assert not differences(ours, theirs, texts), "\n".join(differences(ours, theirs, texts))
    for text in texts:
        ids = ours.encode(text)
        assert ours.decode(ids) == text == theirs.decode(ids, clean_up_tokenization_spaces=False)


@needs_files
def test_a_long_stretch_of_the_course_text_matches(ours, theirs):
    try:
        text = data.load_tiny_shakespeare(download=False, registry=False)
    except DataUnavailableError as error:
        pytest.skip(f"the course's text is not on this machine ({str(error).splitlines()[0]})")
    stretch = text[500_000:530_000]  # 30,000 characters from the middle, speakers, line ends and all
    ids = ours.encode(stretch)
    assert ids == theirs.encode(stretch)
    assert ours.decode(ids) == stretch
    assert 3 < len(stretch) / len(ids) < 5, "GPT-2 gives English text three to five characters per token"


#: the ways to change GPT-2's files a little: a merge moved to an earlier rank (its parts are bytes, so
#: the file stays consistent), or two tokens' ids swapped
PERTURBATIONS = {
    "'t h' moved from rank 144 to rank 0": ("t h", 0),
    "'e r' moved from rank 7 to rank 2, before 'h e'": ("e r", 2),
    "' the' and ' and' swap ids": ("Ġthe", "Ġand"),
}


def perturbed(folder: Path, tmp_path: Path, how: str) -> Path:
    """A copy of GPT-2's two files in tmp_path with one thing changed (PERTURBATIONS)."""
    ids = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()  # "#version: 0.2", then rank 0, 1, ...
    first, second = PERTURBATIONS[how]
    if isinstance(second, int):  # a merge moved to the rank `second`
        lines.remove(first)
        lines.insert(1 + second, first)
    else:  # two tokens swap ids
        ids[first], ids[second] = ids[second], ids[first]
    (tmp_path / "vocab.json").write_text(json.dumps(ids, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


@needs_files
@pytest.mark.parametrize("how", list(PERTURBATIONS))
def test_the_comparison_fails_when_one_merge_or_id_is_changed(files, theirs, tmp_path, how):
    """The tests above can fail: a tokenizer that reads slightly different files gives other ids."""
    folder = perturbed(files.vocab.parent, tmp_path, how)
    changed = BPETokenizer.from_files(folder / "vocab.json", folder / "merges.txt")
    texts = [text for group in TEXTS.values() for text in group]
    assert differences(changed, theirs, texts), f"{how}: no text noticed it"


# ---------------------------------------------------------------------------------------------
# finding the files: a folder, the cache, a download (here from a file:// address), checksums


@pytest.fixture
def no_folders(monkeypatch):
    monkeypatch.delenv(GPT2_TOKENIZER_ENV_VAR, raising=False)
    monkeypatch.delenv(GPT2_ENV_VAR, raising=False)


@needs_files
def test_the_files_are_fetched_into_the_cache_with_their_checksums_then_found_there(files, tmp_path, monkeypatch,
                                                                                    no_folders):
    monkeypatch.setattr(data, "GPT2_URL", files.vocab.parent.resolve().as_uri() + "/{name}")  # a mirror on disk
    fetched = gpt2_tokenizer_files(cache_dir=tmp_path, progress=False)
    assert fetched.vocab == tmp_path / "gpt2" / "vocab.json" and fetched.merges.read_bytes() == files.merges.read_bytes()
    monkeypatch.setattr(data, "GPT2_URL", (tmp_path / "nowhere").as_uri() + "/{name}")
    assert gpt2_tokenizer_files(cache_dir=tmp_path) == fetched  # from the cache: nothing downloaded
    fetched.merges.write_text("#version: 0.2\nĠ t\n", encoding="utf-8")  # damaged
    with pytest.raises(DataUnavailableError, match="merges.txt missing or damaged"):
        gpt2_tokenizer_files(cache_dir=tmp_path, progress=False)
    assert not (tmp_path / "gpt2" / "model.safetensors").exists(), "the tokenizer never fetches the weights"


def test_without_the_files_one_clear_error_says_how_to_supply_them(tmp_path, monkeypatch, no_folders):
    with pytest.raises(DataUnavailableError, match=GPT2_TOKENIZER_ENV_VAR) as error:
        gpt2_tokenizer_files(cache_dir=tmp_path, download=False)
    assert "downloading was not tried" in str(error.value)
    monkeypatch.setenv(GPT2_TOKENIZER_ENV_VAR, str(tmp_path))
    with pytest.raises(DataUnavailableError, match="has no vocab.json, merges.txt"):
        gpt2_tokenizer_files()
    (tmp_path / "vocab.json").write_text("{}", encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    with pytest.raises(DataUnavailableError, match="checksum"):
        gpt2_tokenizer_files()
    assert gpt2_tokenizer_files(sha256=False).vocab == tmp_path / "vocab.json"
    monkeypatch.delenv(GPT2_TOKENIZER_ENV_VAR)
    monkeypatch.setenv(GPT2_ENV_VAR, str(tmp_path))  # the folder of all of GPT-2's files serves too
    assert gpt2_tokenizer_files(sha256=False).merges == tmp_path / "merges.txt"
