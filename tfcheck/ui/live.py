"""The progress line of ``tfcheck check`` on a terminal: the check running, its seconds against its budget, the
step of a training check; redrawn four times a second on stderr and gone when the model's report prints."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.live import Live
from rich.text import Text

from tfcheck import progress


def progress_text(state: progress.Progress, styled: bool) -> Text:
    """The line as drawn: dim when styled, plain text otherwise (NO_COLOR, --color=never)."""
    return Text(state.line(), style="dim" if styled else "", no_wrap=True, overflow="ellipsis")


class _Line:
    def __init__(self, state: progress.Progress, styled: bool):
        self.state, self.styled = state, styled

    def __rich__(self) -> Text:
        return progress_text(self.state, self.styled)


@contextlib.contextmanager
def progress_line(spec: str, shown: bool, styled: bool = True) -> Iterator[None]:
    """Show the progress of the work inside the block when ``shown`` (stderr is a terminal), else nothing; drawn
    dim when ``styled`` (the report's colour decision: --color, NO_COLOR, FORCE_COLOR), plain otherwise."""
    with progress.watched(spec) as state:
        if not shown:
            yield
            return
        console = Console(stderr=True, no_color=not styled, highlight=False)
        with Live(_Line(state, styled), console=console, transient=True, refresh_per_second=4):
            yield
