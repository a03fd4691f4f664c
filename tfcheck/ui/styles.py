"""How a status looks in every text view: its word in capitals, in its colour (dropped when colour is off)."""
from __future__ import annotations

from rich.text import Text

from tfcheck.report.status import Status

STYLE = {Status.PASS: "green", Status.ACCEPTED: "cyan", Status.SKIP: "yellow", Status.WARN: "magenta",
         Status.FAIL: "bold red", Status.ERROR: "bold red"}


def status_text(status: Status) -> Text:
    return Text(status.value.upper(), style=STYLE[status])
