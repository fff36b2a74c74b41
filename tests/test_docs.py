"""README shows the whole course, as it is: its lesson table, its map of the files and the
commands of ``transformer-course`` are checked against the tree, so neither can drift.

The contract README must meet:

* the lesson table (header ``| lesson | you build | exercises | your time |``) has one row per folder of
  ``solutions/``, in order; a row's first cell is ``NN title``, where ``NN`` is the folder's number
  (and the notebook's ``course.lesson``) and ``title`` is, ignoring case and punctuation, the
  folder's name in words (``attention modules``), the notebook's ``course.title``, or that title's
  first words (at least two: ``the transformer layer`` for "The transformer layer: LayerNorm and
  residual connections"); its last cell is the total of the lesson's first cell's "Your time"
  sentence (``autograder/lesson_time.py``), and the sentence under the table gives the course's sum;
* the file map (the fenced block under the heading "The files") lists only paths that exist,
  names every top-level folder of the checkout, and every module and sub-package of ``helpers/``
  and ``autograder/``. In the map a folder line ends with ``/`` and the lines indented under it
  are inside it; a line starts with one name, or several separated by ``, ``, then two or more
  spaces and the description; ``;  name  description`` in a description adds one more entry;
* every subcommand of ``transformer-course`` appears as ``transformer-course NAME``.
"""

import argparse
import json
import re
import subprocess
from pathlib import Path

import pytest

from autograder import lesson_time

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TABLE_HEADER = re.compile(r"^\|\s*lesson\s*\|\s*you build\s*\|\s*exercises\s*\|\s*your time\s*\|\s*$", re.I)
FILES_HEADING = re.compile(r"^#{1,6}\s+(the\s+)?files\b", re.I)
#: a name in the file map: a path of plain characters with a "/" or a "." (a folder or a file)
MAP_NAME = re.compile(r"[\w.\-]+(/[\w.\-]+)*/?")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def words(text: str) -> list[str]:
    """Lower-case words, punctuation and hyphens dropped: "Self-attention, step" -> [self, attention, step]."""
    return re.findall(r"[a-z0-9]+", text.lower())


# ---------------------------------------------------------------------------------------------
# the lesson table


def lesson_folders() -> list[Path]:
    return sorted(p for p in (ROOT / "solutions").iterdir() if p.is_dir() and re.match(r"\d\d-", p.name))


def course_meta(folder: Path) -> dict:
    notebooks = sorted(folder.glob("*.ipynb"))
    assert len(notebooks) == 1, f"{folder.name}: one notebook, found {[p.name for p in notebooks]}"
    return json.loads(notebooks[0].read_text(encoding="utf-8")).get("metadata", {}).get("course", {})


def lesson_table(text: str) -> list[list[str]]:
    """The cells of each row of README's lesson table."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if TABLE_HEADER.match(line.strip())]
    assert len(starts) == 1, f"README has {len(starts)} tables headed | lesson | you build | exercises | your time |"
    rows = []
    for line in lines[starts[0] + 2:]:  # the header, then the |---| line
        if not line.strip().startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def lesson_rows(text: str) -> list[str]:
    """The first cell of each row of README's lesson table."""
    return [row[0] for row in lesson_table(text)]


def title_matches(title: str, folder: Path, meta: dict) -> bool:
    shown = words(title)
    folder_words = words(folder.name.split("-", 1)[1])
    full = words(str(meta.get("title", "")))
    return shown in (folder_words, full) or (len(shown) >= 2 and shown == full[: len(shown)])


def test_readme_lesson_table_has_every_lesson_once_in_order():
    folders = lesson_folders()
    rows = lesson_rows(readme())
    numbers = [row.split()[0] if row.split() else "" for row in rows]
    assert numbers == [f.name[:2] for f in folders], (
        f"README's lesson table has rows {numbers}; solutions/ has {[f.name for f in folders]}: "
        "one row per lesson, in order"
    )
    wrong = []
    for row, folder in zip(rows, folders, strict=True):
        meta = course_meta(folder)
        if meta.get("lesson") is not None:
            assert int(meta["lesson"]) == int(folder.name[:2]), f"{folder.name}: course.lesson is {meta['lesson']}"
        title = row.split(maxsplit=1)[1] if len(row.split()) > 1 else ""
        if not title_matches(title, folder, meta):
            wrong.append(f"{row!r} should read '{folder.name[:2]} {meta.get('title', '')}' or "
                         f"'{folder.name[:2]} {folder.name[3:].replace('-', ' ')}'")
    assert not wrong, "README's lesson titles do not match the lessons:\n" + "\n".join(wrong)


def test_readme_states_each_lessons_time_as_its_first_cell_does():
    stated = {folder.name[:2]: lesson_time.stated(json.loads(next(folder.glob("*.ipynb")).read_text(encoding="utf-8")))
              for folder in lesson_folders()}
    rows = {row[0].split()[0]: row for row in lesson_table(readme())}
    wrong = [f"{number}: README says {rows[number][-1]!r}, the first cell "
             f"{lesson_time.duration(said.total) if said else 'states none'}"
             for number, said in stated.items()
             if said is None or len(rows[number]) != 4 or lesson_time.parse_duration(rows[number][-1]) != said.total]
    assert not wrong, "README's 'your time' column and the lessons' first cells disagree:\n" + "\n".join(wrong)
    total = sum(said.total for said in stated.values())
    match = re.search(r"about (\d+) hours for the whole course", readme())
    assert match and int(match[1]) == round(total / 60), (
        f"the sentence under the lesson table should say 'about {round(total / 60)} hours for the whole course' "
        f"(the lessons' totals add up to {total} min)")


# ---------------------------------------------------------------------------------------------
# the map of the files


def file_map(text: str) -> list[str]:
    """The paths README's file map lists, folders ending in "/"."""
    lines = text.splitlines()
    heading = next((i for i, line in enumerate(lines) if FILES_HEADING.match(line)), None)
    assert heading is not None, "README has a section headed 'The files'"
    fences = [i for i in range(heading + 1, len(lines)) if lines[i].strip().startswith("```")][:2]
    assert len(fences) == 2, "the files section holds a fenced block: the map"
    paths, folders = [], []  # folders: (indent, path) of the folders the next lines may sit in
    for line in lines[fences[0] + 1:fences[1]]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        while folders and folders[-1][0] >= indent:
            folders.pop()
        prefix = folders[-1][1] if folders else ""
        first = None
        for segment in re.split(r";\s{2,}", line.strip()):
            names = re.split(r"\s{2,}", segment, maxsplit=1)[0]
            for name in (n.strip() for n in names.split(",")):
                if MAP_NAME.fullmatch(name) and ("/" in name or "." in name):
                    paths.append(prefix + name)
                    first = first or name
        if first and first.endswith("/"):
            folders.append((indent, prefix + first))
    return paths


def checkout_files() -> list[str]:
    """The checkout's files (tracked, or new and not ignored), relative to the root."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("git is not available: the checkout's files are unknown")
    return [line for line in out.splitlines() if line and (ROOT / line).exists()]


def test_readme_file_map_lists_what_exists():
    paths = file_map(readme())
    assert paths, "the file map lists paths"
    missing = [p for p in paths if not (ROOT / p.rstrip("/")).exists() or (p.endswith("/") and not (ROOT / p).is_dir())]
    assert not missing, f"README's file map lists paths that do not exist: {missing}"


def test_readme_file_map_lists_every_folder_and_module():
    listed = set(file_map(readme()))

    def is_listed(path: str) -> bool:  # a folder counts as listed when a path inside it is
        return path in listed or any(p.startswith(path) for p in listed if path.endswith("/"))

    files = checkout_files()
    top = sorted({f.split("/", 1)[0] + "/" for f in files if "/" in f})
    modules = set()
    for package in ("helpers", "autograder"):
        for f in files:
            parts = f.split("/")
            if parts[0] != package or len(parts) < 2:
                continue
            if len(parts) == 2 and parts[1].endswith(".py") and parts[1] != "__init__.py":
                modules.add(f)
            elif len(parts) > 2:
                modules.add(f"{package}/{parts[1]}/")  # a sub-package or data folder
    unlisted = [p for p in top + sorted(modules) if not is_listed(p)]
    assert not unlisted, f"README's file map does not list: {unlisted}"


# ---------------------------------------------------------------------------------------------
# the command


def cli_subcommands(monkeypatch, capsys) -> list[str]:
    """The subcommands ``transformer-course`` registers (read from the parser it builds)."""
    from autograder import cli

    names = []
    original = argparse._SubParsersAction.add_parser

    def recording(self, name, **kwargs):
        names.append(name)
        return original(self, name, **kwargs)

    monkeypatch.setattr(argparse._SubParsersAction, "add_parser", recording)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    capsys.readouterr()
    assert exit_info.value.code in (0, None)
    return names


def test_readme_mentions_every_subcommand(monkeypatch, capsys):
    commands = cli_subcommands(monkeypatch, capsys)
    assert {"release", "grade", "check"} <= set(commands), commands
    text = readme()
    absent = [name for name in commands if not re.search(rf"transformer-course\s+{re.escape(name)}\b", text)]
    assert not absent, f"README never shows `transformer-course NAME` for: {absent}"


# ---------------------------------------------------------------------------------------------
# the instructor's section: nbgrader's exchange, the round trip, the Dask pool

ROUNDTRIP_TEST = ROOT / "tests" / "test_roundtrip.py"


def readme_section(heading: str) -> str:
    """README's text from the heading that contains ``heading`` to the next heading of its level or above."""
    lines = readme().splitlines()
    fenced, headings = False, {}  # line number -> level, outside fenced blocks (where "#" starts a comment)
    for i, line in enumerate(lines):
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#+\s", line):
            headings[i] = len(line) - len(line.lstrip("#"))
    start = next((i for i in headings if heading in lines[i]), None)
    assert start is not None, f"README has a heading with {heading!r}"
    end = next((i for i in headings if i > start and headings[i] <= headings[start]), len(lines))
    return "\n".join(lines[start:end])


def shell_commands(text: str) -> list[str]:
    """The command lines of the fenced blocks in ``text``: continuations joined, comments dropped."""
    commands, fenced, pending = [], False, ""
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            continue
        line = pending + re.sub(r"(^|\s)#.*$", "", line).strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        commands += [part.strip() for part in line.split("&&") if part.strip()]
    return commands


def program_and_options(words: list[str]) -> tuple[str, set[str]]:
    """``("nbgrader collect", {"--update", ...})`` for the words of one command (after the program)."""
    sub = next((w for w in words if not w.startswith("-")), "")
    return sub, {w.split("=", 1)[0] for w in words if w.startswith("--")}


def readme_runs(text: str) -> list[tuple[str, str, set[str]]]:
    """(program, subcommand, options) of each `nbgrader` and `transformer-course` command in ``text``."""
    runs = []
    for command in shell_commands(text):
        words = command.split()
        if words and words[0] in ("nbgrader", "transformer-course"):
            runs.append((words[0], *program_and_options(words[1:])))
    return runs


def roundtrip_test_runs() -> list[tuple[str, str, set[str]]]:
    """(program, subcommand, options) of each command tests/test_roundtrip.py runs: calls of its
    ``nbgrader(...)`` helper (which adds ``--Exchange.root``) and ``[sys.executable, "-m", ...]`` lists."""
    import ast

    def text_of(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            return node.values[0].value + "X"  # an f-string's fixed start is enough for an option's name
        return None

    runs = []
    for node in ast.walk(ast.parse(ROUNDTRIP_TEST.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "nbgrader":
            words = [w for w in map(text_of, node.args) if w is not None]
            sub, options = program_and_options(words)
            if sub:
                runs.append(("nbgrader", sub, options | {"--Exchange.root"}))
        elif isinstance(node, ast.List):
            words = [text_of(e) or "" for e in node.elts]
            for module, program in (("nbgrader", "nbgrader"), ("autograder.cli", "transformer-course")):
                if "-m" in words and module in words and words.index(module) == words.index("-m") + 1:
                    sub, options = program_and_options(words[words.index(module) + 1:])
                    if sub:  # not the helper's own list, whose subcommand is its argument
                        runs.append((program, sub, options))
    return runs


def test_readme_names_nbgraders_own_default_exchange():
    from nbgrader.exchange.default.exchange import Exchange

    default = Exchange.root.default_value
    text = readme()
    said = [m.group(1) for m in re.finditer(r"`(/[\w./-]+)`", text)
            if "exchange" in m.group(1) and "default" in text[max(0, m.start() - 60):m.start()]]
    assert said and set(said) == {default}, f"README calls {said} nbgrader's default exchange; nbgrader 0.9's is {default}"


def test_readme_jupyterhub_recipe_sets_the_exchange_it_mounts():
    recipe = next(p for p in readme_section("Several machines").split("\n- ") if "JupyterHub with a shared volume" in p)
    mounted = re.search(r"Mount one volume at `([^`]+)`", recipe)
    assert mounted, recipe
    assert f'c.Exchange.root = "{mounted.group(1)}"' in recipe, "nbgrader looks elsewhere unless told: set c.Exchange.root"


def test_readme_round_trip_is_the_one_its_test_runs():
    """Every command of README's round trip is run by tests/test_roundtrip.py, with at least the
    options README gives it."""
    tested = roundtrip_test_runs()
    assert ("nbgrader", "collect", {"--update", "--Exchange.root"}) in tested
    untested = []
    for program, sub, options in readme_runs(readme_section("nbgrader's round trip")):
        if program == "transformer-course" and sub == "release":
            continue  # run by test_notebooks.py's `release --check`
        if not any(p == program and s == sub and options <= o for p, s, o in tested):
            untested.append(f"{program} {sub} {sorted(options)}")
    assert not untested, f"README's round trip has commands tests/test_roundtrip.py does not run: {untested}"


def test_readme_collects_with_update_and_says_who_submits():
    """``nbgrader collect`` keeps a student's earlier submission unless given ``--update``; a
    shared account's students name themselves to ``submit`` with ``--student``."""
    collects = [r for r in readme_runs(readme()) if r[:2] == ("nbgrader", "collect")]
    assert collects and all("--update" in options for _, _, options in collects), collects
    roundtrip = readme_section("nbgrader's round trip")
    assert "own account" in roundtrip and "--student" in roundtrip


def test_readme_dask_pool_commands_exist_and_name_what_workers_need():
    pytest.importorskip("distributed")
    import sys

    text = readme_section("Grading past one machine")
    part = text[text.index("--executor dask://"):]
    commands = [c.split() for c in shell_commands(part) if re.match(r"(\w+=\S+\s+)*dask\s", c)]
    commands = [words[next(i for i, w in enumerate(words) if w == "dask"):] for words in commands]
    assert {words[1] for words in commands} >= {"scheduler", "worker"}, commands
    dask = Path(sys.executable).parent / "dask"
    for words in commands:
        helped = subprocess.run([str(dask), words[1], "--help"], capture_output=True, text=True, timeout=120).stdout
        unknown = [w.split("=")[0] for w in words[2:] if w.startswith("--") and w.split("=")[0] not in helped]
        assert not unknown, f"`dask {words[1]}` has no option {unknown}"
    assert any(w[1] == "worker" and "--nthreads" in w for w in commands)
    assert "TRANSFORMER_COURSE_DATA" in part, "a worker without the internet needs the data's path"
    # the grading secret stays on the grading machine: each task carries the salt drawn from it
    from autograder.protocol import Limits

    assert "salt" in Limits.__dataclass_fields__
    assert '"limits": dataclasses.asdict(limits_for(' in (ROOT / "autograder" / "dask_executor.py").read_text()
    assert "secret" in part


def test_readme_says_the_childs_whole_environment():
    """The threat model lists every variable a graded notebook's process sees: the child's own."""
    from autograder.child import KEEP_ENV

    text = " ".join(readme().split())
    model = text[text.index("### Threat model"):]
    stated = model[: model.index("A notebook that loops forever")]
    child = (ROOT / "autograder" / "child.py").read_text(encoding="utf-8")
    set_there = set(KEEP_ENV) | set(re.findall(r"\b([A-Z][A-Z_]+)=", child.split("os.environ.clear()", 1)[1][:400]))
    set_there |= set(re.findall(r'os\.environ\["([A-Z_]+)"\]', child))
    for name in set_there:
        assert f"`{name}" in stated, f"README's threat model does not name {name}, which the child sets"


def test_readme_lists_every_status_grading_gives_and_no_other():
    """The statuses README explains for grades.csv are exactly grading's, and grading's own table
    explains each of them too (a status added in one place and not the other fails here)."""
    from autograder import grading
    from autograder.reports import NOT_GRADED

    text = " ".join(readme().split())
    bullet = text[text.index("`grades.csv`: one row per"):]
    bullet = bullet[: bullet.index("`totals.csv`")]
    named = set(re.findall(r"`([a-z][a-z ]*)`", bullet))  # every status is a plain word in backticks there
    named |= {"tampered"} if "Statuses also include `tampered`" in text else set()  # told in its own paragraph
    assert named == {*grading.STATUSES, NOT_GRADED}, named ^ {*grading.STATUSES, NOT_GRADED}
    table = grading.__doc__.split("========")
    for status in grading.STATUSES:
        assert re.search(rf"^{status}\s", "\n".join(table), re.M), f"grading's table does not explain {status}"
