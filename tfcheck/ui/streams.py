"""Terminal streams that cannot fail on a character: a report full of √, ×, → and … goes to a stream whose
encoding may be ASCII (PYTHONIOENCODING=ascii, a CI runner or a minimal container without a UTF-8 locale) or
latin-1. A character the stream cannot encode is spelled in ASCII (``sqrt`` for ``√``, ``...`` for ``…``), or
``?`` where no spelling is known, never raised: a UnicodeEncodeError on the report's first √ would lose the
report, and the run's exit status with it. Files tfcheck writes (JSON, images) are UTF-8 and need none of this.
Imports neither torch nor rich."""
from __future__ import annotations

import codecs
import io
import sys
from typing import Any

#: The characters tfcheck's texts use outside ASCII, as they read in ASCII.
ASCII_SPELLINGS = {
    "√": "sqrt ", "…": "...", "×": "x", "→": "->", "←": "<-", "↔": "<->", "−": "-", "–": "-", "—": "-",
    "≤": "<=", "≥": ">=", "≠": "!=", "≈": "~", "±": "+/-", "·": ".", "∞": "inf", "²": "^2", "³": "^3",
    "“": '"', "”": '"', "‘": "'", "’": "'", "✓": "ok", "✗": "x", "•": "*", "↑": "^", "↓": "v", "⁻": "^-",
    "¹": "^1", "½": "1/2", "°": " deg", "§": "section ",
    # the sparklines of a schedule or a loss curve, lowest to highest
    "▁": "_", "▂": ".", "▃": "-", "▄": "=", "▅": "+", "▆": "*", "▇": "#", "█": "@",
    # tree and table lines (tfcheck trace, rich's boxes)
    "├": "+", "└": "`", "─": "-", "│": "|", "┌": "+", "┐": "+", "┘": "+", "┬": "+", "┴": "+", "┼": "+",
    "╭": "+", "╮": "+", "╰": "+", "╯": "+", "═": "=", "║": "|", "┃": "|", "━": "-", "┏": "+", "┓": "+",
    "┗": "+", "┛": "+", "┡": "+", "┩": "+", "╇": "+",
}
ERRORS = "tfcheck-ascii"


def spelled(error: UnicodeError) -> tuple[str, int]:
    """The codec error handler: the characters the stream cannot encode, spelled in ASCII."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII_SPELLINGS.get(c, "?") for c in text), error.end


codecs.register_error(ERRORS, spelled)


def never_failing(*streams: Any) -> None:
    """Make each text stream (sys.stdout and sys.stderr by default) spell what it cannot encode instead of
    raising. A stream that encodes everything (UTF-8), or that is no TextIOWrapper (a test's capture), is left
    as it is."""
    for stream in streams or (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("_", "-")
        if not isinstance(stream, io.TextIOWrapper) or encoding.startswith("utf"):
            continue
        try:
            stream.reconfigure(errors=ERRORS)
        except (ValueError, OSError):  # a closed or detached stream: nothing will be written to it
            continue
