"""Leak maps shown: a rich table for the terminal and (opt-in, with matplotlib) an image per map. The maps
themselves are data, in ``tfcheck.report.leak_map``."""
from __future__ import annotations

import re
from pathlib import Path

from tfcheck.report.leak_map import LEGEND, LeakMap


def leak_map_table(leak_map: LeakMap):
    """A rich table: one coloured cell per entry (red = leak), for the terminal."""
    from rich.table import Table
    from rich.text import Text

    style = {("forbidden", True): "bold white on red", ("real", True): "bold white on red",
             ("forbidden", False): "dim", ("real", False): "green", ("allowed", True): "cyan",
             ("allowed", False): "dim", ("pad", True): "dim", ("pad", False): "dim"}
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 0))
    table.add_column("")
    for column in zip(*leak_map.header()):
        table.add_column("\n".join(column), justify="center", no_wrap=True)
    for i, label in enumerate(leak_map.row_labels):
        cells = [Text(leak_map.glyph(i, j), style=style[(role, value > leak_map.tolerance)])
                 for j, (role, value) in enumerate(zip(leak_map.roles[i], leak_map.values[i]))]
        table.add_row(Text(label + " "), *cells)
    from rich.console import Group

    return Group(Text(leak_map.title), table, Text(LEGEND[leak_map.kind], style="dim"))


#: Characters of a spec kept in an image's file name (file names stop at 255 bytes).
MAX_SLUG = 120


def save_image(leak_map: LeakMap, path: str | Path) -> Path | None:
    """Write the map as a PNG heat map (log scale, tolerance marked). Needs matplotlib (an optional
    extra); returns None without writing when it is not installed. Drawn on a Figure of its own with the Agg
    canvas, never through pyplot: the user's backend, rcParams and open figures are left as they were."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    import math

    values = [[math.log10(max(v, 1e-12)) for v in row] for row in leak_map.values]
    fig = Figure(figsize=(0.4 * len(leak_map.column_labels) + 2, 0.4 * len(leak_map.row_labels) + 1.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    image = ax.imshow(values, cmap="viridis")
    for i in range(len(values)):
        for j in range(len(values[i])):
            if leak_map.leaked(i, j):
                ax.text(j, i, "X", ha="center", va="center", color="red", fontsize=8)
    ax.set_xticks(range(len(leak_map.column_labels)), leak_map.column_labels, rotation=90, fontsize=6)
    ax.set_yticks(range(len(leak_map.row_labels)), leak_map.row_labels, fontsize=6)
    ax.set_title(f"{leak_map.title}\nX: change > tolerance {leak_map.tolerance:.2g}", fontsize=8)
    fig.colorbar(image, ax=ax, label="log10 |change|")
    out = Path(path)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    return out


def save_images(report, directory: str | Path) -> list[Path]:
    """Every leak map in a report as ``<model>-<check>-<n>.png`` in ``directory`` (next to the JSON report), the
    model a filesystem-safe form of its spec and n counting that model's maps of that check, so that no model's
    image replaces another's; an empty list when matplotlib is not installed."""
    directory = Path(directory)
    written = []
    taken: dict[str, int] = {}
    for model in report.models:
        for finding in (f for f in model.findings() if "leak_map_data" in f.evidence):
            stem = f"{file_slug(model.spec)}-{file_slug(finding.check)}"
            n = taken[stem] = taken.get(stem, -1) + 1  # two specs with one slug still get their own files
            directory.mkdir(parents=True, exist_ok=True)
            path = save_image(LeakMap.from_evidence(finding.evidence["leak_map_data"]), directory / f"{stem}-{n}.png")
            if path is not None:
                written.append(path)
    return written


def file_slug(text: str) -> str:
    """``reference_model.broken:NoCausalMask`` -> ``reference_model.broken-NoCausalMask``: letters, digits, ``.``,
    ``_`` and ``-`` only (a path spec's slashes and colons and a label's spaces become ``-``)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return slug[-MAX_SLUG:].lstrip("-.") or "model"  # the end of a long path spec names its model
