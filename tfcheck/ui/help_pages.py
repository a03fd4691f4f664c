"""The user guide shipped with the package, for ``tfcheck help TOPIC``: the pages of the repository's docs/ folder.

``tfcheck/data/docs`` is a link to ``docs/``: an editable install reads the pages through it, and building a
wheel or an sdist copies them into the package (``[tool.setuptools.package-data]``), so an installed tfcheck
has the same pages. A topic is a page's name without ``.md`` (``declarations``, ``models/huggingface``).
"""
from __future__ import annotations

import difflib
from importlib import resources
from importlib.resources.abc import Traversable

from tfcheck.errors import UsageError


def pages() -> dict[str, Traversable]:
    """Topic -> page, the top-level pages first, then each folder's, in name order."""
    root = resources.files("tfcheck").joinpath("data", "docs")
    if not root.is_dir():
        raise UsageError("the user guide is not installed with this copy of tfcheck (tfcheck/data/docs is missing: "
                         "a checkout without symbolic links?); read the pages in the docs/ folder of its source")
    out: dict[str, Traversable] = {}
    folders = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            folders.append(entry)
        elif entry.name.endswith(".md"):
            out[entry.name.removesuffix(".md")] = entry
    for folder in folders:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".md"):
                out[f"{folder.name}/{entry.name.removesuffix('.md')}"] = entry
    return out


def page_text(topic: str) -> str:
    """The page's Markdown; an unknown topic is a UsageError naming the closest topics."""
    found = pages()
    name = topic.strip().removeprefix("docs/").removesuffix(".md")
    if name not in found:
        close = difflib.get_close_matches(name, found, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UsageError(f"tfcheck help {topic}: no such topic{hint}; run `tfcheck help` to list the topics")
    return found[name].read_text("utf-8")


def title(page: Traversable) -> str:
    """The page's first heading, without its ``#``."""
    for line in page.read_text("utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


def topics_text() -> str:
    """What ``tfcheck help`` prints: every topic with its page's title."""
    found = pages()
    width = max((len(t) for t in found), default=0)
    lines = ["tfcheck help TOPIC prints a page of the user guide. Topics:", ""]
    lines += [f"  {topic:<{width}}  {title(page)}" for topic, page in found.items()]
    return "\n".join(lines) + "\n"
