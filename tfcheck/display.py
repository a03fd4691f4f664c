"""Showing data without importing its views: the report, an explanation, a trace and a watch print themselves
through these two functions, and the views in ``tfcheck.ui.views`` register how each class is drawn. The views
import the data they show; the data never imports a view. The front ends (``tfcheck``'s public names, the API
and the command line) import the views; before that an object shows its one-line ``repr``."""
from __future__ import annotations

import functools
from typing import Any


@functools.singledispatch
def rich_view(obj: Any) -> Any:
    """What rich draws for ``obj`` (its ``__rich__``): the registered view, else its one-line repr."""
    return repr(obj)


@functools.singledispatch
def text_view(obj: Any) -> str:
    """``str(obj)``: the registered view's text, else its one-line repr."""
    return repr(obj)
