"""The progress line of ``tfcheck check`` on a terminal: the check running, its seconds against its budget, the
step of a training check; redrawn four times a second on stderr and gone when the model's report prints."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.live import Live
from rich.text import Text

from tfcheck.engine import progress


class _Line:
    def __init__(self, state: progress.Progress):
        self.state = state

    def __rich__(self) -> Text:
        return Text(self.state.line(), style="dim", no_wrap=True, overflow="ellipsis")


@contextlib.contextmanager
def progress_line(spec: str, shown: bool) -> Iterator[None]:
    """Show the progress of the work inside the block when ``shown`` (stderr is a terminal), else nothing."""
    with progress.watched(spec) as state:
        if not shown:
            yield
            return
        with Live(_Line(state), console=Console(stderr=True), transient=True, refresh_per_second=4):
            yield
