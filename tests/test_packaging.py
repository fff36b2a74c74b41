"""pyproject.toml and environment.yml declare the same packages with the same version ranges."""

import re

import tomllib
import yaml
from harness import ROOT
from packaging.requirements import Requirement

CONDA_NAMES = {"torch": "pytorch-cpu"}  # pip name -> conda-forge name
PIP_ONLY = {"sphinx-mathjax-offline"}  # not on conda-forge: environment.yml lists them under pip:


def for_python_311(requirement: str) -> bool:
    """False for a requirement whose marker leaves Python 3.11 out (tomli: ``python_version < '3.11'``)."""
    marker = Requirement(requirement).marker
    return marker is None or marker.evaluate({"python_version": "3.11", "python_full_version": "3.11.0"})


def split(requirement: str) -> tuple[str, str]:
    requirement = requirement.split(";")[0]
    name, spec = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", requirement).groups()
    return name.lower(), spec.replace(" ", "")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = dict(split(r) for r in project["dependencies"] + extras["dev"] + extras["book"]
                  if for_python_311(r))  # environment.yml pins Python 3.11
    assert {split(r) for r in extras["book"]} <= {split(r) for r in extras["dev"]}, "dev includes the book tools"
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {}
    for dep in env["dependencies"]:
        if isinstance(dep, str):
            name, spec = split(dep.replace("=", "==", 1) if re.match(r"^[\w\-]+=[^=<>]", dep) else dep)
            conda[name] = spec
    pip_section = next(d for d in env["dependencies"] if isinstance(d, dict))["pip"]
    for entry in pip_section:
        if not entry.startswith("-"):
            name, spec = split(entry.split("#")[0])
            assert name in PIP_ONLY, f"{name}: only packages missing from conda-forge go under pip:"
            conda[name] = spec
    assert conda["python"].startswith("==3.11")
    for name, spec in wanted.items():
        conda_name = CONDA_NAMES.get(name, name)
        assert conda_name in conda, f"{name} is in pyproject.toml but not in environment.yml"
        assert conda[conda_name] == spec, f"{name}: pyproject says {spec!r}, environment.yml {conda[conda_name]!r}"
    assert "-e ." in pip_section


def test_ci_pins_torch_and_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    setup = (ROOT / "setup.sh").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "torch==2.13.0" in setup and "./setup.sh --dev" in ci
    command = ".venv/bin/python -m pytest -n auto"
    assert command in readme and command in ci
