"""The course book (``transformer-course book``): every lesson executed, with its figures, its
solutions folded, its hidden tests and self-check gone, and working navigation; built offline."""

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from lesson_runs import NO_NETWORK

from autograder.book import build_book
from autograder.book_pages import book_notebook
from autograder.book_source import write_source
from autograder.course import HIDDEN_BEGIN, CourseError, cell_source, lessons, nbgrader_meta
from autograder.course import RELEASE_BLOCKS as BLOCKS
from autograder.course import SOLUTION_MARKER as MARKER
from autograder.release import TRIVIAL

ROOT = Path(__file__).resolve().parents[1]
LESSONS = lessons(ROOT)
IDS = [lesson.assignment for lesson in LESSONS]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MARKERS = [marker for pair in BLOCKS for marker in pair]


def missing(why: str):
    """Fail in CI (the book must be checked there), skip on a machine without the book's tools."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{why}; CI must build the book: pip install sphinx myst-nb sphinx-book-theme sphinx-design",
                    pytrace=False)
    pytest.skip(why)


def block_lines(text: str, begin: str, end: str) -> list[str]:
    return [line for block in re.findall(re.escape(begin) + r"(.*?)" + re.escape(end), text, re.S)
            for line in block.splitlines()]


def open_lines(lesson) -> set[str]:
    text = "\n".join(cell_source(c) for c in lesson.notebook["cells"])
    for begin, end in BLOCKS:
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), "", text, flags=re.S)
    return {line.strip() for line in text.splitlines()}


def secret_lines(lesson, begin: str, end: str) -> list[str]:
    """The lines between ``begin`` and ``end`` that would give something away (as release.py's
    leak search picks them: long enough, not trivial, not also in the open part)."""
    shown = open_lines(lesson)
    lines = {line.strip() for c in lesson.notebook["cells"] for line in block_lines(cell_source(c), begin, end)}
    return sorted(line for line in lines if len(line) >= 16 and not TRIVIAL.match(line) and line not in shown)


def solution_cells(lesson) -> list[dict]:
    return [c for c in lesson.notebook["cells"] if c["cell_type"] == "code" and nbgrader_meta(c).get("solution")]


def page_of(book: Path, lesson) -> Path:
    return book / lesson.assignment / f"{lesson.name}.html"


def soup_of(path: Path):
    from bs4 import BeautifulSoup

    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def closed_details(node):
    """The nearest <details> around ``node`` if it is closed, else None."""
    details = node.find_parent("details")
    return details if details is not None and not details.has_attr("open") else None


def visible_text(path: Path) -> str:
    """The page's text without what sits in closed <details> (what a reader sees unclicked)."""
    soup = soup_of(path)
    for details in soup.find_all("details"):
        if not details.decomposed and not details.has_attr("open"):
            details.decompose()
    return soup.get_text()


def resolve(page: Path, href: str) -> Path:
    return (page.parent / urlsplit(href).path).resolve()


# ---------------------------------------------------------------------------------------------
# the transformation alone: quick, no Sphinx needed


@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_book_notebook_hides_what_it_must(lesson):
    nb = book_notebook(lesson.notebook)
    text = "\n".join(cell_source(c) for c in nb["cells"])
    for marker in MARKERS:
        assert marker not in text
    for line in secret_lines(lesson, *BLOCKS[1]):
        assert line not in text, f"hidden test line kept: {line}"
    assert "check_notebook(" not in text, "the self-check cell is removed"
    kept = {c.get("id"): c for c in nb["cells"]}
    for cell in solution_cells(lesson):
        folded = kept[cell["id"]]
        assert "hide-input" in folded["metadata"]["tags"]
        expected = "\n".join(line for line in cell_source(cell).splitlines() if not MARKER.match(line))
        assert cell_source(folded).strip() == expected.strip()
    for cell in lesson.notebook["cells"]:  # the open part of hidden-test cells stays
        if HIDDEN_BEGIN in cell_source(cell):
            assert cell_source(kept[cell["id"]]).strip(), f"{cell['id']}: its visible part is kept"
    assert any(MARKER.match(line) for c in solution_cells(lesson) for line in cell_source(c).splitlines()), \
        "the lesson's own notebook is left alone"


# ---------------------------------------------------------------------------------------------
# the built book


def book_tools():
    for module in ("sphinx", "myst_nb", "sphinx_book_theme", "sphinx_design", "bs4"):
        try:
            __import__(module)
        except ImportError:
            missing(f"{module} is not installed")


@pytest.fixture(scope="module")
def book(tmp_path_factory, lesson_runs) -> Path:
    """The whole book, built offline from the lessons' runs that tests/test_notebooks.py checks
    (each lesson runs once in the test run, in its quick setting)."""
    book_tools()
    executed = lesson_runs.all_of(LESSONS)
    out = tmp_path_factory.mktemp("book") / "html"
    with pytest.MonkeyPatch.context() as mp:
        for name, value in NO_NETWORK.items():
            mp.setenv(name, value)
        index = build_book(ROOT, out, executed=executed, jobs=2, quick=True)  # the runs are quick ones
    assert index == out / "index.html" and index.exists()
    return out


@pytest.mark.slow
def test_the_build_runs_a_lesson_itself_when_given_no_run(tmp_path, monkeypatch):
    """`transformer-course book` executes the pages during the build (myst-nb): one short lesson."""
    book_tools()
    for name, value in NO_NETWORK.items():
        monkeypatch.setenv(name, value)
    lesson = LESSONS[2]
    index = build_book(ROOT, tmp_path / "html", only=[lesson.assignment], execute=True, quick=True)
    soup = soup_of(page_of(index.parent, lesson))
    assert soup.select("div.cell_output img"), "executed: the page has its figures"
    assert not soup.select(".output.traceback, .output.error"), "no cell failed"


def test_a_run_with_an_error_is_refused(tmp_path):
    lesson = LESSONS[0]
    page = book_notebook(lesson.notebook)
    code = next(cell for cell in page["cells"] if cell["cell_type"] == "code")
    code["outputs"] = [{"output_type": "error", "ename": "ValueError", "evalue": "boom", "traceback": []}]
    with pytest.raises(CourseError, match="ValueError: boom"):
        write_source(ROOT, tmp_path, [lesson], execute=True, executed={lesson.assignment: page})
    with pytest.raises(CourseError, match="no executed page"):
        write_source(ROOT, tmp_path / "other", [lesson], execute=True, executed={})


def test_the_book_source_takes_no_catalogue(tmp_path):
    """The catalogues quote the solutions' lines; the book folds the solutions, it does not ship them raw.
    The lesson folder's other files are copied into the book's source: the catalogue must not be."""
    write_source(ROOT, tmp_path, LESSONS[:1], execute=False)
    assert (LESSONS[0].path.parent / "catalogue.toml").exists()
    assert (tmp_path / LESSONS[0].assignment / LESSONS[0].filename).exists()
    assert not list(tmp_path.rglob("catalogue.toml"))


@pytest.mark.slow
def test_one_page_per_lesson_and_an_index_in_order(book):
    pages = sorted(p.relative_to(book) for p in book.glob("*/*.html") if not p.parent.name.startswith("_"))
    assert pages == sorted(page_of(book, lesson).relative_to(book) for lesson in LESSONS)
    index = book / "index.html"
    article = soup_of(index).find("article")
    linked = [resolve(index, a["href"]) for a in article.find_all("a", href=True)]
    linked = [p for p in linked if p.suffix == ".html" and p != index.resolve()]
    assert linked == [page_of(book, lesson).resolve() for lesson in LESSONS], "one line per lesson, in order"


@pytest.mark.slow
def test_previous_and_next_links(book):
    chain = [book / "index.html"] + [page_of(book, lesson) for lesson in LESSONS]
    for i, page in enumerate(chain):
        soup = soup_of(page)
        nxt, prev = soup.select_one("a.right-next"), soup.select_one("a.left-prev")
        if i + 1 < len(chain):
            assert nxt is not None and resolve(page, nxt["href"]) == chain[i + 1].resolve(), f"{page.name}: next"
        else:
            assert nxt is None
        if i > 0:
            assert prev is not None and resolve(page, prev["href"]) == chain[i - 1].resolve(), f"{page.name}: previous"


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_every_page_was_executed_and_has_its_figures_as_png_files(book, lesson):
    page = page_of(book, lesson)
    soup = soup_of(page)
    outputs = soup.select("div.cell_output")
    assert outputs, "the notebook was executed: its cells have outputs"
    images = [img for out in outputs for img in out.find_all("img")]
    assert images, "at least one figure"
    if lesson.assignment == "03-self-attention":
        assert len(images) >= 4, "lesson 03 draws products, weights, the mask and the masked weights"
    for img in images:
        assert not img["src"].startswith(("data:", "http:", "https:")), "figures are files next to the page"
        path = resolve(page, img["src"])
        assert path.is_file() and path.read_bytes()[:8] == PNG_SIGNATURE, img["src"]
        assert img.get("alt", "").startswith("Figure"), "every figure has alt text"
    assert not soup.select(".output.traceback, .output.error"), "no cell failed"


@pytest.mark.slow
def test_no_hidden_test_solution_marker_or_self_check_anywhere(book):
    hidden = {line for lesson in LESSONS for line in secret_lines(lesson, *BLOCKS[1])}
    hidden_names = {name for line in hidden for name in re.findall(r"\bcheck_\w+", line)}
    shown = set().union(*(open_lines(lesson) for lesson in LESSONS))
    hidden_names = {n for n in hidden_names if not any(n in line for line in shown)}
    assert hidden_names or not hidden, "the hidden checks' names are what must not appear"
    if any(lesson.assignment == "03-self-attention" for lesson in LESSONS):
        assert "check_causal_mask_hidden" in hidden_names
    files = [p for p in book.rglob("*") if p.is_file()]
    for path in files:
        raw = path.read_bytes()
        if raw.startswith(PNG_SIGNATURE):
            continue
        text = raw.decode("utf-8", errors="replace")
        for secret in MARKERS + sorted(hidden_names):
            assert secret not in text, f"{secret!r} in {path.relative_to(book)}"
        if path.suffix == ".html":
            page_text = soup_of(path).get_text()
            for line in hidden:
                assert line not in page_text, f"hidden test line {line!r} in {path.relative_to(book)}"
            assert "check_notebook(" not in page_text, "the self-check cell is gone"


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_solutions_are_only_inside_closed_details(book, lesson):
    page = page_of(book, lesson)
    soup = soup_of(page)
    cells = solution_cells(lesson)
    assert cells
    blocks = soup.find_all("pre")
    for cell in cells:
        expected = "\n".join(line.rstrip() for line in cell_source(cell).splitlines() if not MARKER.match(line)).strip()
        found = [pre for pre in blocks if "\n".join(x.rstrip() for x in pre.get_text().splitlines()).strip() == expected]
        assert len(found) == 1, f"{cell['id']}: its code is on the page once"
        details = closed_details(found[0])
        assert details is not None, f"{cell['id']}: the code sits in a closed <details>"
        summary = details.find("summary")
        assert summary is not None and "Show solution" in summary.get_text(), "the toggle says what it hides"
    shown = visible_text(page)
    for line in secret_lines(lesson, *BLOCKS[0]):
        assert line not in shown, f"solution line visible without a click: {line}"
    if lesson.assignment == "03-self-attention":
        definition = [pre for pre in blocks if "def apply_causal_mask" in pre.get_text()]
        assert definition and all(closed_details(pre) is not None for pre in definition)
        assert "def apply_causal_mask" not in shown


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_hints_are_folded(book, lesson):
    source = "\n".join(cell_source(c) for c in lesson.notebook["cells"] if c["cell_type"] == "markdown")
    n_hints = len(re.findall(r"<summary>\s*Hint", source))
    soup = soup_of(page_of(book, lesson))
    hints = [s.parent for s in soup.find_all("summary") if s.get_text().strip().startswith("Hint")]
    assert len(hints) == n_hints
    for details in hints:
        assert details.name == "details" and not details.has_attr("open")
        body = details.get_text().replace(details.summary.get_text(), "").strip()
        assert len(body) > 20, f"{details.summary.get_text()!r}: its text sits inside the <details>"


#: attributes through which a page loads something (an <a href> is a link a reader may follow)
LOADING_ATTRIBUTES = ("src", "href", "srcset", "data", "poster", "action", "formaction")
REMOTE_IN_CSS = re.compile(r"""(url\(\s*['"]?|@import\s+['"])\s*(https?:)?//""", re.I)


def remote(url: str | None) -> bool:
    """True when ``url`` points to another host (``https://…``, ``http://…`` or ``//host/…``)."""
    if not url:
        return False
    parts = urlsplit(url.strip())
    return parts.scheme in ("http", "https") or (not parts.scheme and url.strip().startswith("//"))


def loaded_urls(soup) -> list[str]:
    """Every URL a page would load: all src/href/srcset/... attributes except plain hyperlinks."""
    urls = []
    for tag in soup.find_all(True):
        for attribute in LOADING_ATTRIBUTES:
            if tag.name == "a" and attribute == "href":
                continue
            value = tag.get(attribute)
            if value is None:
                continue
            if attribute == "srcset":
                urls += [item.strip().split()[0] for item in value.split(",") if item.strip()]
            else:
                urls.append(value if isinstance(value, str) else " ".join(value))
    return urls


@pytest.mark.slow
def test_pages_load_nothing_from_the_network(book):
    """No page loads anything from another site, MathJax included (it is served from the book)."""
    pages = [book / "index.html"] + [page_of(book, lesson) for lesson in LESSONS]
    for page in pages:
        soup = soup_of(page)
        urls = loaded_urls(soup)
        far = [url for url in urls if remote(url)]
        assert not far, f"{page.name} loads {far}"
        for style in soup.find_all("style"):
            assert not REMOTE_IN_CSS.search(style.get_text()), f"{page.name}: an inline style loads a remote URL"
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme or url.startswith("#") or not parts.path:
                continue
            assert resolve(page, url).exists(), f"{page.name}: {url} is missing"
    for css in book.rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        assert not REMOTE_IN_CSS.search(text), f"{css.relative_to(book)} loads a remote URL"


@pytest.mark.slow
def test_math_is_typeset_by_the_books_own_mathjax(book):
    """Every page with math loads MathJax from the book's _static/ (no CDN), and that file is there."""
    with_math = []
    for lesson in LESSONS:
        page = page_of(book, lesson)
        soup = soup_of(page)
        if not soup.select(".math"):
            continue
        with_math.append(lesson.assignment)
        scripts = [s["src"] for s in soup.find_all("script", src=True) if "mathjax" in s["src"].lower()]
        assert scripts, f"{page.name} has math but loads no MathJax"
        for src in scripts:
            assert not remote(src), src
            path = resolve(page, src)
            assert path.is_file() and path.stat().st_size > 100_000, f"{src}: the MathJax bundle is in the book"
            assert path.parent == (book / "_static" / "mathjax").resolve()
    assert any(a.startswith("02-") for a in with_math), f"lesson 02 has math (the softmax); pages with math: {with_math}"
    fonts = list((book / "_static" / "mathjax" / "output" / "chtml" / "fonts").rglob("*.woff"))
    assert fonts, "MathJax's fonts are in the book"


# ---------------------------------------------------------------------------------------------
# README's commands, a quick book, the builder's folders


def test_a_plain_setup_leaves_the_book_tools_out_and_readme_names_the_one_step(monkeypatch):
    """README's book command works from a fresh checkout: a plain ./setup.sh installs no Sphinx, so
    README's command is `./setup.sh --book && ... book`, setup.sh's --book installs the `book` extra,
    that extra holds every module the build needs (and --dev's extra all of them too), and a build
    without them stops with one message that names the same step."""
    import tomllib

    from autograder import book

    setup = (ROOT / "setup.sh").read_text(encoding="utf-8")
    assert re.search(r'"--book" \]\] && extras="\[book\]"', setup), "setup.sh --book installs the book extra"
    assert 'extras=""' in setup, "a plain ./setup.sh installs no extra"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]

    def names(requirements):
        return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}

    needed = {m.replace("_", "-") for m in book.BOOK_MODULES} | {book.MATHJAX_PACKAGE}
    assert needed <= names(extras["book"]), needed - names(extras["book"])
    assert names(extras["book"]) <= names(extras["dev"]), "./setup.sh --dev builds the book too"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Reading the course as a book"):]
    section = section[: section.index("\n## ")]
    commands = [line for line in section.splitlines() if "transformer-course book" in line and line.startswith("./")]
    assert commands and all(line.startswith("./setup.sh --book && ") for line in commands), commands
    assert "./setup.sh --book" in book.INSTALL_HINT
    monkeypatch.setattr(book.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(CourseError, match=r"sphinx.*plain \./setup\.sh.*\./setup\.sh --book"):
        build_book(ROOT, ROOT.parent / "book-never-built")


def test_a_quick_book_says_so_on_its_index_page(tmp_path):
    from autograder.book_source import QUICK_NOTE

    write_source(ROOT, tmp_path / "quick", LESSONS[:1], execute=False, quick=True)
    write_source(ROOT, tmp_path / "full", LESSONS[:1], execute=False)
    quick = (tmp_path / "quick" / "index.md").read_text(encoding="utf-8")
    assert QUICK_NOTE in quick and quick.index(QUICK_NOTE) < quick.index("- [")
    assert "--quick" not in (tmp_path / "full" / "index.md").read_text(encoding="utf-8")


def test_the_builders_home_and_cache_folders_are_written_as_a_tilde(tmp_path, monkeypatch):
    from autograder.book import builder_paths, hide_builder_paths

    home = tmp_path / "home" / "builder"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    html = tmp_path / "html"
    (html / "08-generation").mkdir(parents=True)
    page = html / "08-generation" / "08-generation.html"
    page.write_text(f"<pre>There is no trained model at {home}/.cache/transformer-course/shakespeare-char.pt</pre>"
                    f"<p>{home}x stays: another folder</p>", encoding="utf-8")
    (html / "_static").mkdir()
    (html / "_static" / "x.js").write_text(str(home), encoding="utf-8")
    assert ("~" in dict((shown, path) for path, shown in builder_paths()))
    assert hide_builder_paths(html) == 1
    text = page.read_text(encoding="utf-8")
    assert "at ~/.cache/transformer-course/shakespeare-char.pt" in text and f"{home}/" not in text
    assert f"{home}x stays" in text
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    page.write_text(f"model at {tmp_path}/elsewhere/transformer-course/m.pt", encoding="utf-8")
    hide_builder_paths(html)
    assert page.read_text(encoding="utf-8") == "model at $XDG_CACHE_HOME/transformer-course/m.pt"


@pytest.mark.slow
def test_the_quick_book_index_says_it_is_quick(book):
    assert "A quick build" in soup_of(book / "index.html").get_text()


@pytest.mark.slow
def test_no_page_shows_the_builders_home_or_cache_folder(book):
    from helpers.data import default_cache_dir

    shown = [str(default_cache_dir()), str(Path.home()) + "/"]
    pages = [p for p in book.rglob("*") if p.is_file() and p.suffix in (".html", ".js", ".txt")]
    assert any("~/.cache/transformer-course" in p.read_text(encoding="utf-8", errors="replace") for p in pages), \
        "lessons 08 and 09 say where they look for lesson 07's model"
    for path in pages:
        text = path.read_text(encoding="utf-8", errors="replace")
        for folder in shown:
            assert folder not in text, f"{path.relative_to(book)} shows {folder}"
