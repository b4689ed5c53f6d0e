"""What the distribution ships besides the code: each package's `py.typed` (PEP 561, so mypy
checks a caller's use of sweeper and jobs against their annotations) and the licence.

Read from pyproject.toml and the tree rather than from a built wheel: building one takes a
minute here, and setuptools ships exactly the package data pyproject names, once the file is
there.  The check is proven by planting a package left out of `package-data`.
"""

from __future__ import annotations

import tomllib
from importlib.resources import files
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def untyped_packages(pyproject: dict, root: Path) -> list[str]:
    """The top-level packages found (`packages.find`'s include patterns) whose `py.typed` is
    missing from the tree or from `package-data`, each with what is missing."""
    setuptools = pyproject["tool"]["setuptools"]
    package_data = setuptools.get("package-data", {})
    tops = sorted(pattern.rstrip("*") for pattern in setuptools["packages"]["find"]["include"])
    problems = []
    for package in tops:
        if not (root / package / "py.typed").is_file():
            problems.append(f"{package}: no {package}/py.typed")
        if "py.typed" not in package_data.get(package, []):
            problems.append(f"{package}: py.typed not in [tool.setuptools.package-data]")
    return problems


def read_pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_package_ships_its_py_typed_marker():
    pyproject = read_pyproject()
    assert untyped_packages(pyproject, ROOT) == []
    for package in ("sweeper", "jobs"):  # and the installed (editable) packages hold them
        assert files(package).joinpath("py.typed").is_file()


def test_a_package_left_out_of_package_data_is_named():
    pyproject = read_pyproject()
    del pyproject["tool"]["setuptools"]["package-data"]["jobs"]
    assert untyped_packages(pyproject, ROOT) == [
        "jobs: py.typed not in [tool.setuptools.package-data]"]


def test_the_licence_is_apache_2_and_shipped():
    project = read_pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a notice
