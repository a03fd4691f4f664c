"""Leak maps: where an information-flow check saw a change it did not allow, as data, as text, as a rich
table and (opt-in, with matplotlib) as an image; and the two probes the mask checks share: the outputs
of the layer modules captured during a pass, and a perturbation of the embedded tokens.

A map is a grid of measured changes with a role per cell:
- ``forbidden``: no change allowed (a later key for a causal model); above the tolerance it is a leak;
- ``allowed``: change expected (the past, the present);
- ``pad``: a padded position, whose own output is not judged;
- ``real``: a real token's output, which must not change when only padding changed.
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from tfcheck.recording.hooks import Hook, hooked

#: (cell role, changed?) -> glyph of the text map
GLYPHS = {("forbidden", True): "X", ("forbidden", False): ".", ("allowed", True): "o", ("allowed", False): " ",
          ("real", True): "X", ("real", False): ".", ("pad", True): "_", ("pad", False): "_"}
LEGEND = {"causal": "X = leak (changed where it must not), . = unchanged future, o = past/present (may change), "
                    "? = output not finite",
          "padding": "X = real token changed by padding content (leak), . = real token unchanged, _ = pad"}


@dataclass
class LeakMap:
    """Measured changes per (row, column) with the tolerance they were judged by."""

    kind: str  # "causal" (rows: query position, columns: perturbed key position) or "padding"
    title: str
    row_labels: list[str]
    column_labels: list[str]
    values: list[list[float]]
    roles: list[list[str]]
    tolerance: float

    def leaked(self, i: int, j: int) -> bool:
        return self.roles[i][j] in ("forbidden", "real") and self.values[i][j] > self.tolerance

    @property
    def leaks(self) -> int:
        return sum(self.leaked(i, j) for i in range(len(self.values)) for j in range(len(self.values[i])))

    def glyph(self, i: int, j: int) -> str:
        value = self.values[i][j]
        return "?" if value != value else GLYPHS[(self.roles[i][j], value > self.tolerance)]  # ? = NaN: not measured

    def header(self) -> list[str]:
        """Column indices, one digit per column: the last digit where the columns are every position in
        order (0123456789012...), else the whole index written downwards, so that k15 never reads as k5."""
        indices = [c.lstrip("kq") for c in self.column_labels]
        if indices == [str(j) for j in range(len(indices))] or not all(i.isdigit() for i in indices):
            return ["".join(c[-1] for c in self.column_labels)]
        places = max(len(i) for i in indices)
        return ["".join(i.rjust(places)[p] for i in indices) for p in range(places)]

    def text(self) -> str:
        """The map as lines of glyphs, a header of column indices, and the legend."""
        width = max(len(r) for r in self.row_labels)
        lines = [self.title, *(" " * (width + 1) + line for line in self.header())]
        for i, label in enumerate(self.row_labels):
            cells = "".join(self.glyph(i, j) for j in range(len(self.values[i])))
            lines.append(f"{label:>{width}} {cells}")
        lines.append(LEGEND[self.kind] + f"; tolerance {self.tolerance:.3g}")
        return "\n".join(lines)

    def to_evidence(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "rows": self.row_labels, "columns": self.column_labels,
                "values": [[float(f"{v:.3g}") for v in row] for row in self.values], "roles": self.roles,
                "tolerance": self.tolerance}

    @classmethod
    def from_evidence(cls, data: dict[str, Any]) -> LeakMap:
        return cls(data["kind"], data["title"], list(data["rows"]), list(data["columns"]),
                   [[float(v) for v in row] for row in data["values"]], [list(r) for r in data["roles"]],
                   float(data["tolerance"]))

    def renderable(self):
        """A rich table: one coloured cell per entry (red = leak), for the terminal."""
        from rich.table import Table
        from rich.text import Text

        style = {("forbidden", True): "bold white on red", ("real", True): "bold white on red",
                 ("forbidden", False): "dim", ("real", False): "green", ("allowed", True): "cyan",
                 ("allowed", False): "dim", ("pad", True): "dim", ("pad", False): "dim"}
        table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 0))
        table.add_column("")
        for column in zip(*self.header()):
            table.add_column("\n".join(column), justify="center", no_wrap=True)
        for i, label in enumerate(self.row_labels):
            cells = [Text(self.glyph(i, j), style=style[(self.roles[i][j], self.values[i][j] > self.tolerance)])
                     for j in range(len(self.values[i]))]
            table.add_row(Text(label + " "), *cells)
        from rich.console import Group

        return Group(Text(self.title), table, Text(LEGEND[self.kind], style="dim"))


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


def evidence_of(leak_map: LeakMap) -> dict[str, Any]:
    """The two evidence entries of a map: the text (what the terminal shows) and the data (JSON, images)."""
    return {"leak_map": leak_map.text(), "leak_map_data": leak_map.to_evidence()}


# ----- probes shared by the mask checks -------------------------------------------------------------

def layer_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The layers of the model's stacks: children of every outermost nn.ModuleList (the encoder and the
    decoder stack of a seq2seq model; not lists nested inside a layer, such as T5's sublayers)."""
    lists: list[str] = []
    layers: list[tuple[str, nn.Module]] = []
    for path, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and not any(path.startswith(p + ".") for p in lists):
            lists.append(path)
            layers.extend((f"{path}.{name}" if path else name, child) for name, child in module.named_children())
    return layers


def first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    hidden = getattr(value, "last_hidden_state", None)
    return hidden if isinstance(hidden, torch.Tensor) else None


@contextlib.contextmanager
def captured_layers(model: nn.Module, rows: int, seq_first: bool = False) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Collect (path, output) of every layer module called during the block, in call order, for outputs
    laid out (rows, length, ...); ``seq_first``: the layers work in (length, rows, ...) (torch's
    batch_first=False), and their outputs are transposed. The hooks are removed after, also when the model raises."""
    captured: list[tuple[str, torch.Tensor]] = []

    def hook_for(path: str):
        def hook(module, args, output):
            t = first_tensor(output)
            if seq_first and t is not None and not t.is_nested and t.dim() >= 2:
                t = t.transpose(0, 1)
            if t is not None and not t.is_nested and t.dim() >= 2 and t.shape[0] == rows and t.is_floating_point():
                captured.append((path, t.detach().clone()))
        return hook

    with hooked(Hook(module, hook_for(path)) for path, module in layer_modules(model)):
        yield captured


@contextlib.contextmanager
def perturbed_embedding(model: nn.Module, tokens: torch.Tensor, where: torch.Tensor, seed: int) -> Iterator[list]:
    """Add a random vector, of the embedding's own scale, to the embedded tokens at ``where`` (bool, the
    shape of ``tokens``), so that dependences too small to show through a token change still show.

    Every nn.Embedding is hooked, and the one that receives ``tokens`` is perturbed: the token embedding
    is not always the first (a seq2seq model may embed the source first) and may be shared between the
    source and the target (T5), so it is recognised by its input, not by its place. The input may be the tokens
    extended on the right (Longformer pads its ids to a multiple of its attention window before embedding them):
    then only the tokens' own positions are perturbed. The yielded list names the embeddings perturbed."""
    gen = torch.Generator().manual_seed(seed)
    perturbed: list[str] = []

    def hook_for(path: str):
        def hook(module, args, output):
            if not (args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor)
                    and embeds_tokens(args[0], tokens) and output.shape[:2] == args[0].shape[:2]):
                return output
            scale = output.detach().double().pow(2).mean().sqrt().clamp_min(1e-6)
            noise = torch.randn(output.shape, generator=gen, dtype=torch.float64) * scale
            at = where.to("cpu")
            if args[0].shape != tokens.shape:
                at = torch.cat([at, at.new_zeros(at.shape[0], args[0].shape[1] - at.shape[1])], dim=1)
            delta = (noise * at[..., None]).to(output.device, output.dtype)
            perturbed.append(path)
            return output + delta
        return hook

    with hooked(Hook(module, hook_for(path)) for path, module in model.named_modules()
                if isinstance(module, nn.Embedding)):
        yield perturbed


def embeds_tokens(ids: torch.Tensor, tokens: torch.Tensor) -> bool:
    """Whether an embedding's input is ``tokens``, or ``tokens`` (batch, length) followed by more positions
    (ids padded on the right inside forward)."""
    if ids.shape == tokens.shape:
        return torch.equal(ids, tokens.to(ids.device))
    if tokens.dim() != 2 or ids.dim() != 2 or ids.shape[0] != tokens.shape[0] or ids.shape[1] < tokens.shape[1]:
        return False
    return ids.dtype == tokens.dtype and torch.equal(ids[:, :tokens.shape[1]], tokens.to(ids.device))
