"""nbgrader's exchange of the student's lab (``transformer-course lab``, see ``autograder.lab``):
the one nbgrader's config names where it exists (the Assignments list fetches, submits and fetches
feedback there); where none does (a reader working alone), an empty one of the workspace's, so the
list is empty, not an error."""

from __future__ import annotations

import ast
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from autograder.lab_workspace import CONFIG, LOCAL_EXCHANGE


def course_id() -> str:
    """The course id of ``nbgrader_settings`` (the one releases and the gradebook use)."""
    from traitlets.config import Config

    from autograder.nbgrader_settings import configure

    config = Config()
    configure(config)
    return config.CourseDirectory.course_id


@functools.cache
def nbgrader_default_exchange() -> Path:
    """nbgrader's own default ``Exchange.root`` (``/usr/local/share/nbgrader/exchange`` in 0.9.6).

    Read from the text of nbgrader's exchange module, without importing it: that import (nbgrader,
    nbformat, jsonschema and the grammars jsonschema builds) takes seconds, and every grading process
    asks. Where the text does not say it plainly, nbgrader itself is asked."""
    spec = importlib.util.find_spec("nbgrader")  # a top-level name: found, not imported
    if spec is not None and spec.origin:
        module = Path(spec.origin).parent / "exchange" / "default" / "exchange.py"
        try:
            tree = ast.parse(module.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            tree = None
        found = _class_default(tree, "Exchange", "root") if tree is not None else None
        if found is not None:
            return Path(found)
    from nbgrader.exchange.default.exchange import Exchange as NbgraderExchange

    return Path(NbgraderExchange.root.default_value)


def _class_default(tree: ast.AST, class_name: str, attribute: str) -> str | None:
    """``attribute = Unicode("value", ...)...`` in class ``class_name``: the literal "value"."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for statement in node.body:
                if isinstance(statement, ast.Assign) and [ast.unparse(t) for t in statement.targets] == [attribute]:
                    call = statement.value
                    while isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):  # .tag(config=True)
                        call = call.func.value
                    if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant) \
                            and isinstance(call.args[0].value, str):
                        return call.args[0].value
    return None


def configured_exchange(root: Path, workspace: Path, skip: tuple[Path, ...] = ()) -> Path:
    """The ``Exchange.root`` nbgrader's config gives the student's lab, else nbgrader's default.

    Read from ``nbgrader_config.py``/``.json`` in, by rank: the workspace (the Assignments list's
    working directory), Jupyter's config folders as the list reads them (``JUPYTER_CONFIG_PATH``,
    ``~/.jupyter``, ``<prefix>/etc/jupyter``, ``/etc/jupyter``), and last the course root (where
    the instructor's ``nbgrader`` commands run; the list does not read it, so the course's config
    folder passes it on), less the folders of ``skip`` (the course's own, written from this)."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config import Config
    from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

    skipped = {Path(p).resolve() for p in skip}
    folders = [str(workspace), *jupyter_config_path(), str(root)]
    folders = [f for i, f in enumerate(folders) if Path(f).resolve() not in skipped and f not in folders[:i]]
    config = Config()
    for folder in reversed(folders):  # lowest rank first; each merge outranks the last
        for loader in (PyFileConfigLoader, JSONFileConfigLoader):
            name = "nbgrader_config" + (".py" if loader is PyFileConfigLoader else ".json")
            try:
                config.merge(loader(name, path=folder).load_config())
            except Exception:  # noqa: BLE001 - none there (ConfigFileNotFound), or broken: nbgrader says so itself
                continue
    value = config.Exchange.get("root") if "Exchange" in config else None
    if not value:
        return nbgrader_default_exchange()
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else workspace / path


@dataclass(frozen=True)
class Exchange:
    """The exchange the student's Assignments list uses."""

    root: Path
    configured: Path  # what nbgrader's config (or its default) names
    local: bool  # ``configured`` does not exist: an empty exchange of the workspace's is used instead

    def nbgrader_config(self) -> str:
        """The ``nbgrader_config.py`` of the student's lab config folder."""
        return ("# written by `transformer-course lab` at every start: the exchange your nbgrader config names\n"
                "# (~/.jupyter/nbgrader_config.py, /etc/jupyter/, the course's), or an empty one of your own where none exists\n"
                "c = get_config()  # noqa: F821\n"
                f"c.Exchange.root = {str(self.root)!r}\n"
                f"c.CourseDirectory.course_id = {course_id()!r}\n")

    def message(self) -> str:
        """The one line printed at start: where the list's assignments come from, and how a class uses it."""
        if not self.local:
            return (f"Assignments list (Nbgrader menu): nbgrader's exchange {self.root}: fetch what your instructor "
                    "released, submit it, fetch its feedback")
        return (f"Assignments list (Nbgrader menu): empty, as there is no nbgrader exchange at {self.configured}; in a "
                "class the instructor releases the lessons into a shared exchange (c.Exchange.root in nbgrader_config.py, "
                "e.g. /etc/jupyter/nbgrader_config.py) and you fetch and submit them there")


def choose_exchange(configured: Path, workspace: Path) -> Exchange:
    """The configured exchange where it exists; else an empty one of the workspace's own
    (``<workspace>/.jupyter-course/exchange``), so the list is simply empty, not an error."""
    if configured.is_dir():
        return Exchange(configured, configured, local=False)
    return Exchange(workspace / CONFIG / LOCAL_EXCHANGE, configured, local=True)

