"""Which stack frames are the user's code: the one rule every message that names "your line" uses.

A frame is the user's unless it is torch, tfcheck itself or the standard library. Packages installed in
site-packages do count as the user's code (a Hugging Face model is the model under test), except torch.
Frames with no file to point at (``<frozen importlib._bootstrap>``, ``<string>``, generated code) are not.

Torch-free on purpose: the pytest plugin and the model loader use it before torch is imported.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import traceback
from types import FrameType

__all__ = ["is_user_frame", "file_kind", "short_path", "innermost_user_frame", "model_frame", "called_by_tfcheck"]


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[tuple[str, ...], str]:
    """(directories never the user's, the standard library's directory). Each ends in a separator so that
    ``.../torch`` does not also claim ``.../torchvision`` and ``.../tfcheck`` not ``.../tfcheck_models``."""
    own = os.path.dirname(os.path.abspath(__file__))  # the package root: this module sits at its top
    found = importlib.util.find_spec("torch")  # finds torch's folder without paying for importing it
    dirs = [own]
    if found is not None and found.origin:
        dirs.append(os.path.dirname(os.path.abspath(found.origin)))
    stdlib = os.path.dirname(os.path.abspath(os.__file__))
    return tuple(d + os.sep for d in dirs), stdlib + os.sep


def is_user_frame(filename: str) -> bool:
    """True when ``filename`` (a code object's or traceback frame's) is the user's code."""
    return file_kind(filename) == "user"


@functools.lru_cache(maxsize=4096)
def file_kind(filename: str) -> str:
    """'user', 'tfcheck' or 'other' (torch, the standard library, generated code), once per file: the recorder
    asks for every op."""
    if not filename or filename.startswith("<"):
        return "other"
    path = os.path.abspath(filename)
    never, stdlib = _library_dirs()
    if path.startswith(never[0]):
        return "tfcheck"
    if path.startswith(never):
        return "other"
    # site-packages usually lives inside the standard library's folder (lib/python3.X/site-packages)
    return "other" if path.startswith(stdlib) and "site-packages" not in path else "user"


def model_frame(skip: int = 1) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of the model's own code on the current stack, ``skip`` frames above the
    caller. tfcheck's frames at the bottom (a hook, a mode, the recorder) are passed over, and the first tfcheck
    frame above the model ends the walk: the script, test or pytest plugin that called tfcheck is never taken for
    the model's line (a torch.nn model has no line of its own)."""
    frame: FrameType | None = sys._getframe(skip + 1)
    while frame is not None and file_kind(frame.f_code.co_filename) == "tfcheck":
        frame = frame.f_back
    while frame is not None:
        kind = file_kind(frame.f_code.co_filename)
        if kind == "tfcheck":
            return None
        if kind == "user":
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def short_path(path: str) -> str:
    """``path`` relative to the working directory when it lies under it, else absolute: what a reader can
    paste and what CI annotations match against the checkout."""
    path = os.path.abspath(path)
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return rel if not rel.startswith("..") else path


def raised_in_user_code(exc: BaseException) -> traceback.FrameSummary | None:
    """The frame that raised ``exc`` when it lies in the user's code (a model's, an installed model library's),
    entered through torch (a backward, a module call) rather than called by tfcheck itself (an observer of its own
    is tfcheck's code wherever it was written): the innermost frame that is neither torch's nor the standard
    library's."""
    frames = traceback.extract_tb(exc.__traceback__)
    last_own = max((i for i, f in enumerate(frames) if file_kind(f.filename) == "tfcheck"), default=-1)
    if last_own + 1 < len(frames) and file_kind(frames[last_own + 1].filename) == "user":
        return None  # tfcheck called it directly: a callback of tfcheck's
    owned = [f for f in frames[last_own + 1:] if file_kind(f.filename) != "other"]
    return owned[-1] if owned and file_kind(owned[-1].filename) == "user" else None


def innermost_user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``exc``'s traceback in the user's code, if any."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if is_user_frame(frame.filename):
            return frame
    return None


def called_by_tfcheck(skip: int = 1) -> bool:
    """Whether the op called ``skip`` frames above the caller was called by tfcheck's own code (the noise a probe's
    hook adds to an embedding), not by the model: its direct caller, past the Tensor methods torch writes in Python
    (``torch/_tensor.py``), is tfcheck's. Not further: a torch.nn model's ops are called by torch's modules, which
    tfcheck called, and they are the model's."""
    frame: FrameType | None = sys._getframe(skip + 1)
    while frame is not None and frame.f_code.co_filename.endswith(_TENSOR_METHODS):
        frame = frame.f_back
    return frame is not None and file_kind(frame.f_code.co_filename) == "tfcheck"


#: Where torch writes Tensor methods in Python (``__rsub__``, ``__format__``): a caller's op passes through them.
_TENSOR_METHODS = os.path.join("torch", "_tensor.py")
