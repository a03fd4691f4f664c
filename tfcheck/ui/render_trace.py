"""A trace as a rich tree: module calls nested as they ran, with the attention-shaping ops among them.

A call is named relative to the call it ran in (``self_attn`` under ``layers.0``; a module called from outside
its owner keeps its full path), and its arguments are shown briefly: tensors as shape and dtype, a keyword
argument or output field that is None left out, a long run of equal items counted.
"""
from __future__ import annotations

import os
from typing import Any

from rich.markup import escape
from rich.text import Text
from rich.tree import Tree

from tfcheck.recording.recorder import ModuleCall, OpEvent, TensorMeta

#: Items of a tuple or list shown before the rest is counted.
SHOWN_ITEMS = 4


def trace_tree(trace) -> Tree:
    calls = trace.calls
    header = Text.assemble((f"{trace.model_name}", "bold"), f"  device: {trace.device}  ",
                           f"inputs: {brief(trace.inputs, arguments=True)}  ", trace.parameters_text())
    if trace.depth is not None:
        header.append(f"  (depth {trace.depth}: deeper calls folded)", style="dim")
    root = Tree(header)
    children: dict[int | None, list[ModuleCall]] = {}
    for c in calls:
        children.setdefault(c.parent, []).append(c)
    for top in children.get(None, []):
        _add_call(root, trace, top, children, None)
    for note in trace.notes:
        root.add(Text(f"note: {note}", style="yellow"))
    if trace.error is not None:
        err = root.add(Text.assemble(("FAILED ", "bold red"), escape(trace.error.message)))
        if trace.error.row:
            err.add(Text(f"troubleshooting row: {trace.error.row} (tfcheck table {trace.error.row})", style="dim"))
    return root


def relative_name(call: ModuleCall, parent: ModuleCall | None) -> str:
    """The call's path below its parent call's; the full path where the module is not the parent's own
    (a shared module called from another)."""
    if not call.path:
        return "<root>"
    if parent is not None and parent.path and call.path.startswith(parent.path + "."):
        return call.path[len(parent.path) + 1:]
    return call.path


def _add_call(parent: Tree, trace, call: ModuleCall, children: dict, caller: ModuleCall | None) -> None:
    style = "bold red" if call.raised else ""
    folded = trace.depth is not None and call.depth >= trace.depth
    label = Text.assemble((escape(relative_name(call, caller)), style or "bold"), f" ({call.cls})  ",
                          brief(call.inputs, arguments=True), " → ",
                          ("raised" if call.raised else brief(call.outputs), style),
                          (f"  {call.params:,} params" if call.params else "", "dim"))
    inside = _calls_below(call, children) if folded else 0
    if inside:
        label.append(f"  [{inside:,} {'call' if inside == 1 else 'calls'} inside]", style="dim")
    node = parent.add(label)
    if folded:
        return
    items: list[tuple[int, OpEvent | ModuleCall]] = [(op.index, op) for op in trace.shown_ops(call)]
    items += [(c.first_op, c) for c in children.get(call.index, [])]
    for _, item in sorted(items, key=lambda pair: pair[0]):
        if isinstance(item, ModuleCall):
            _add_call(node, trace, item, children, call)
        else:
            node.add(_op_label(item))


def _calls_below(call: ModuleCall, children: dict) -> int:
    below = children.get(call.index, [])
    return len(below) + sum(_calls_below(c, children) for c in below)


def brief(value: Any, arguments: bool = False) -> str:
    """A described value (tfcheck.recording.recorder.describe) in short. ``arguments``: a call's inputs, whose last
    dict is its keyword arguments, shown ``name=value``; trailing None positional arguments are left out."""
    if isinstance(value, TensorMeta):
        return str(value)
    if isinstance(value, list):
        items, keywords = list(value), {}
        if arguments and items and isinstance(items[-1], dict):
            keywords = items.pop()
        while arguments and items and items[-1] is None:
            items.pop()
        parts = _items(items) + [f"{k}={brief(v)}" for k, v in keywords.items() if v is not None]
        return "(" + ", ".join(parts) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {brief(v)}" for k, v in value.items() if v is not None) + "}"
    return repr(value)


def _items(items: list) -> list[str]:
    texts = [brief(v) for v in items]
    if len(texts) > SHOWN_ITEMS and len(set(texts)) == 1:
        return [f"{len(texts)} × {texts[0]}"]
    if len(texts) > SHOWN_ITEMS:
        return texts[:SHOWN_ITEMS - 1] + [f"… {len(texts) - SHOWN_ITEMS + 1} more"]
    return texts


def _op_label(op: OpEvent) -> Text:
    ins = " × ".join(str(m.shape) for m in op.inputs[:3]) or "()"
    outs = ", ".join(str(m.shape) for m in op.outputs) or "()"
    values = [_number(v) for v in op.scalars.get("positional", {}).values()]
    values += [f"{k}={_number(v)}" for k, v in op.scalars.items() if k != "positional"]
    args = f"({', '.join(values)})" if values else ""
    where = f"  {os.path.basename(op.file)}:{op.line}" if op.file else ""
    prefix = "· " if op.level == "aten" else ""
    return Text.assemble((f"{prefix}{op.short_name}", "cyan"), args, f"  {ins} → {outs}", (where, "dim"),
                         ("  raised" if op.raised else "", "bold red"))


def _number(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
