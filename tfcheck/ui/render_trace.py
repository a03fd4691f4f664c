"""A trace as a rich tree: module calls nested as they ran, with the attention-shaping ops among them."""
from __future__ import annotations

import os

from rich.markup import escape
from rich.text import Text
from rich.tree import Tree

from tfcheck.probe.recorder import ModuleCall, OpEvent, structure_text


def trace_tree(trace) -> Tree:
    calls = trace.calls
    header = Text.assemble((f"{trace.model_name}", "bold"), f"  device: {trace.device}  ",
                           f"inputs: {structure_text(trace.inputs)}  ", f"params: {trace.total_params:,}")
    root = Tree(header)
    children: dict[int | None, list[ModuleCall]] = {}
    for c in calls:
        children.setdefault(c.parent, []).append(c)
    for top in children.get(None, []):
        _add_call(root, trace, top, children)
    for note in trace.notes:
        root.add(Text(f"note: {note}", style="yellow"))
    if trace.error is not None:
        err = root.add(Text.assemble(("FAILED ", "bold red"), escape(trace.error.message)))
        if trace.error.row:
            err.add(Text(f"troubleshooting row: {trace.error.row} (tfcheck table)", style="dim"))
    return root


def _add_call(parent: Tree, trace, call: ModuleCall, children: dict) -> None:
    style = "bold red" if call.raised else ""
    label = Text.assemble((escape(call.path or "<root>"), style or "bold"), f" ({call.cls})  ",
                          f"{structure_text(call.inputs)}", " → ",
                          ("raised" if call.raised else structure_text(call.outputs), style),
                          (f"  {call.params:,} params" if call.params else "", "dim"))
    node = parent.add(label)
    items: list[tuple[int, OpEvent | ModuleCall]] = [(op.index, op) for op in trace.shown_ops(call)]
    items += [(c.first_op, c) for c in children.get(call.index, [])]
    for _, item in sorted(items, key=lambda pair: pair[0]):
        if isinstance(item, ModuleCall):
            _add_call(node, trace, item, children)
        else:
            node.add(_op_label(item))


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
