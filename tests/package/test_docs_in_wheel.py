"""The user guide (docs/) is package data, so `tfcheck help` works in an installed tfcheck: tfcheck/data/docs
links to docs/ and a built wheel holds every page as a file, and no page as a module."""
from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_package_links_to_the_docs_folder():
    link = REPO / "tfcheck" / "data" / "docs"
    assert link.is_symlink() and link.resolve() == (REPO / "docs").resolve()


def test_a_built_wheel_holds_every_page(tmp_path):
    build_meta = pytest.importorskip("setuptools.build_meta")
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("tfcheck", "reference_model", "docs"):
        shutil.copytree(REPO / name, source / name, symlinks=True, ignore=ignore)  # the link stays a link
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(source)  # setuptools builds in the working directory
        wheel = build_meta.build_wheel(str(tmp_path / "dist"))
    names = set(zipfile.ZipFile(tmp_path / "dist" / wheel).namelist())
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert pages and {f"tfcheck/data/docs/{p}" for p in pages} <= names
    assert not [n for n in names if n.startswith("tfcheck/data/docs/") and not n.endswith(".md")]
