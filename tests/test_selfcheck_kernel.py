"""The self-check one-liner (``check_notebook("NN-name.ipynb")``, a lesson's last cell) leaves the
student's kernel as it found it: a real Jupyter kernel runs lesson 03's first cell, draws a plot,
runs the self-check cell, then draws again, and the second plot still shows as an inline PNG.

The check's report in the cell is the one ``transformer-course check`` prints."""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.course import RELEASE, cell_source

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
LESSON = "03-self-attention"
NOTEBOOK = ROOT / RELEASE / LESSON / f"{LESSON}.ipynb"

PLOT = """\
import matplotlib
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(2, 2))
ax.plot([0, 1, 2], [2, 0, 1])
plt.show()
print("backend:", matplotlib.get_backend())
"""
STATE = """\
import os, sys
print("MPLBACKEND:", os.environ.get("MPLBACKEND"))
print("grading child loaded:", "autograder.child" in sys.modules)
"""


def kernel_env(home: Path) -> dict[str, str]:
    """The environment JupyterLab gives a kernel: no headless MPLBACKEND (the test suite's own
    Agg would hide every plot before the self-check ever ran), fresh IPython settings."""
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(IPYTHONDIR=str(home / ".ipython"), TRANSFORMER_COURSE_ROOT=str(ROOT),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    return env


def texts(cell) -> str:
    return "".join(out.get("text", "") for out in cell.outputs if out.get("output_type") == "stream")


def has_png(cell) -> bool:
    return any("image/png" in out.get("data", {}) for out in cell.outputs
               if out.get("output_type") in ("display_data", "execute_result"))


def test_self_check_leaves_the_kernel_as_it_found_it(tmp_path):
    from nbclient import NotebookClient

    assert NOTEBOOK.exists(), f"no release notebook {NOTEBOOK}"
    release = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell_source(c) for c in release.cells if c.cell_type == "code"]
    (self_check,) = [src for src in code if "check_notebook(" in src]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in (
        code[0],  # the lesson's imports: torch, the checks, helpers.plotting (matplotlib)
        PLOT, STATE, self_check, PLOT, STATE,
    )])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})  # the notebook's folder
    client.execute(env=kernel_env(tmp_path))
    _, plot_before, state_before, check, plot_after, state_after = nb.cells

    assert has_png(plot_before) and "inline" in texts(plot_before), plot_before.outputs
    report = texts(check)
    assert f"{LESSON} · {LESSON}.ipynb" in report and "visible tests:" in report, check.outputs

    # what the self-check must not have changed: the backend, the plots, the environment, the modules
    assert has_png(plot_after), f"no image/png after the self-check: {plot_after.outputs}"
    backend = texts(plot_after).split("backend:")[-1].strip()
    assert "inline" in backend, f"the self-check switched the kernel's backend to {backend!r}"
    assert texts(state_after) == texts(state_before)
    assert "grading child loaded: False" in texts(state_after)

    # the cell shows the report the command prints
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    command = subprocess.run([sys.executable, "-m", "autograder.cli", "check", NOTEBOOK.name], cwd=NOTEBOOK.parent,
                             env=env, capture_output=True, text=True, timeout=600)
    assert command.stdout.strip() and report.strip() == command.stdout.strip(), (report, command.stdout, command.stderr)
