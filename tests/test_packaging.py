"""The package list in pyproject.toml names every package, so a plain `pip install .` ships all."""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from conftest import REPO


def test_every_package_is_listed():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "replay").rglob("__init__.py")}
    assert found <= listed, f"add to pyproject.toml: {sorted(found - listed)}"
    assert "replay.queries" in listed
