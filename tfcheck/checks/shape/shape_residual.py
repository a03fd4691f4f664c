"""shape.residual: every residual connection adds tensors of the same shape, and every attention and
feed-forward sublayer sits inside one.

Residual adds are found from the recorded ops, not from module names: an add whose one operand ``x`` was
made before a sublayer ran and whose other operand ``y`` was computed from ``x`` through that sublayer; an exact
copy of the stream (``residual = x.clone()``, tfcheck.probe.value_copies) counts as the stream.
"""
from __future__ import annotations

from dataclasses import dataclass

from tfcheck.engine.registry import check
from tfcheck.probe import recorded_probe
from tfcheck.probe.value_copies import Copies
from tfcheck.recording.recorder import ModuleCall, OpEvent, Recording
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "shape.residual"
ADDS = frozenset({"add", "__add__", "__radd__", "__iadd__", "add_"})
INPLACE_ADDS = frozenset({"__iadd__", "add_"})
#: In-place writes into their first argument that return nothing of their own to follow (``__setitem__``) or that
#: write values other than a sum: the rows of experts, scattered back.
INPLACE_WRITES = frozenset({"__setitem__", "index_add_", "index_copy_", "index_put_", "scatter_", "scatter_add_",
                            "scatter_reduce_", "masked_scatter_"})
ATTENTION_OPS = frozenset({"softmax", "_softmax", "_safe_softmax", "scaled_dot_product_attention",
                           "multi_head_attention_forward", "_native_multi_head_attention"})
#: Attention ops that are an attention by themselves; a softmax is one only over a product of two activations.
FUSED_ATTENTION = ATTENTION_OPS - {"softmax", "_softmax", "_safe_softmax"}
SCORE_PRODUCTS = frozenset({"matmul", "__matmul__", "__rmatmul__", "bmm", "baddbmm", "einsum"})
#: Ops whose output reads only their input's shape, dtype and device, never its values: a tensor made by one
#: (torch.ones_like(x), x.new_zeros(...)) does not carry x's values, so a table built from it is no sublayer of x.
SHAPE_ONLY_OPS = frozenset({"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
                            "randint_like", "new_zeros", "new_ones", "new_empty", "new_full", "size", "sym_size"})
#: How far back a dependence search may walk (ops), so a huge graph cannot stall the check.
SEARCH_LIMIT = 20000
#: How many tensors back a sublayer's input may be made from the stream by the calling forward's own ops.
INLINE_OPS = 8


@dataclass
class Residual:
    add: OpEvent
    stream: tuple  # shape of the operand that skips the sublayer
    branch: tuple  # shape of the operand computed through it
    sublayer: ModuleCall | None
    #: the stream the sublayer was computed from: one of the add's operands, or a term of one (a parallel block)
    stream_id: int | None = None
    #: the operand computed through the sublayer
    branch_id: int | None = None


@check(ID, "residual adds keep (batch, length, d_model); attention and FFN sit inside a residual",
       rows=("residual-width", "tensor-size-mismatch", "residual-missing"),
       kinds=("encoder", "decoder", "seq2seq", None), order=20)
def shape_residual(ctx) -> list[Finding]:
    """One recorded forward at the probe size. Each residual add is judged by its operands' shapes; each
    attention (a softmax or fused attention op) and each feed-forward (a Linear widening d -> d_ff followed
    by one narrowing back) must feed a residual add whose other operand predates it."""
    graph = Dataflow(recorded_probe.shared(ctx).recording)
    residuals = graph.residuals()
    findings = [_width_finding(r, graph) for r in residuals if r.stream != r.branch]
    parameters = {id(p) for p in ctx.subject.model.parameters()}
    findings += [_missing_finding(kind, call, graph) for kind, call in graph.uncovered(residuals, parameters)]
    if findings:
        return findings
    if not residuals:
        return [Finding(ID, Status.SKIP, "inconclusive: no residual add found in the recorded forward (a model "
                        "without residual connections, or adds tfcheck cannot see)", evidence={"adds_seen": 0})]
    names = sorted({r.sublayer.path for r in residuals if r.sublayer is not None})
    return [Finding(ID, Status.PASS, f"{len(residuals)} residual adds, each of operands of one shape "
                    f"{residuals[0].stream}; sublayers: {', '.join(names) or '(functional)'}", Location(module=""),
                    {"residuals": [{"sublayer": r.sublayer.path if r.sublayer else None, "shape": r.stream,
                                    "at": f"{r.add.file}:{r.add.line}"} for r in residuals]})]


def failed_residual(ctx, args: tuple, kwargs: dict) -> tuple[str, str | None] | None:
    """For a forward that raises in an add: which sublayer made the operand of the wrong shape, and the path of
    the innermost module that made it (whose construction chose its width; None when no module did)."""
    from tfcheck.engine.context import ModelRaised
    from tfcheck.probe.attention_view import visible_attention
    from tfcheck.recording.recorder import Recorder

    recorder = Recorder(ctx.subject.model, track_ids=True)
    try:
        with visible_attention(), recorder:
            ctx.run(args, kwargs, "a recorded rerun of the failing forward")
    except ModelRaised:
        pass
    graph = Dataflow(recorder.recording)
    for r in graph.residuals():
        if r.add.raised and r.sublayer is not None:
            maker = graph.module_that_made(r.branch_id) if r.branch_id is not None else None
            return (f"The residual add at {r.add.file}:{r.add.line} got {r.branch} from sublayer "
                    f"'{r.sublayer.path}' ({r.sublayer.cls}) for the stream {r.stream}: that sublayer changes the "
                    f"width {r.stream[-1]} -> {r.branch[-1]}" + (f" (its '{maker.path}' made it)." if maker else "."),
                    maker.path if maker else None)
    return None


def _width_finding(r: Residual, graph: Dataflow) -> Finding:
    name = f"'{r.sublayer.path}' ({r.sublayer.cls})" if r.sublayer else "the sublayer"
    change = ""
    if r.stream and r.branch and len(r.stream) == len(r.branch) and r.stream[-1] != r.branch[-1]:
        change = f": width {r.stream[-1]} -> {r.branch[-1]}"
    verb = "and the add fails" if r.add.raised else "and the add broadcasts silently"
    module = r.sublayer.path if r.sublayer else r.add.module
    # The line to change is the op that first gave the sublayer's tensor its wrong shape, not the add.
    made = graph.reshaped_by(r.branch_id, r.stream, r.branch, r.sublayer.first_op if r.sublayer else 0) \
        if r.branch_id is not None else None
    location, shaped = Location(module, r.add.file, r.add.line), ""
    related: tuple[Related, ...] = ()
    if made is not None and made.file:
        location = Location(module, made.file, made.line)
        related = (Related("the residual add", r.add.file, r.add.line, r.add.module),)
        shaped = f"; {made.short_name} at {made.file}:{made.line} turns {r.stream} into {r.branch}"
    return Finding(ID, Status.FAIL, f"the residual add at {r.add.file}:{r.add.line} adds {r.branch} from {name} to "
                   f"the stream {r.stream}{change} — the sublayer does not return the shape it receives, {verb}"
                   f"{shaped}", location,
                   {"stream_shape": r.stream, "sublayer_output_shape": r.branch, "tolerance": "shapes equal"},
                   row="residual-width" if not r.add.raised else "tensor-size-mismatch", related=related)


def _missing_finding(kind: str, call: ModuleCall, graph: Dataflow) -> Finding:
    where = call.path
    # Where the sublayer's output is used without being added to its input: there the add belongs.
    used = graph.first_use(call)
    location, at = Location(where, reason=f"no recorded op of the user's code takes the {kind}'s output, so no line "
                            "shows where the residual add belongs"), ""
    if used is not None and used.file:
        location, at = Location(where, used.file, used.line), f" (its output is used at {used.file}:{used.line})"
    return Finding(ID, Status.WARN, f"no residual path around the {kind} in '{where or '<root>'}'{at}: its output "
                   "reaches the next layer without x + sublayer(x). Deep stacks without it train badly; if the "
                   "design is intended (e.g. a single-layer head), accept it: accept=shape.residual:REASON",
                   location, {"sublayer": kind}, row="residual-missing")


class Dataflow:
    """Which tensor each op made, and what depends on what, over one recording with tensor identities."""

    def __init__(self, recording: Recording):
        self.rec = recording
        self.made_by: dict[int, int] = {}
        # In-place updates of a tensor (m += a; a mixture of experts writing each expert's rows into its output:
        # out.index_add_(0, rows, expert(x[rows])), out[rows] = ...): its value now also depends on their operands.
        self.updated_by: dict[int, list[int]] = {}
        for op in recording.ops:
            if op.level == "function" or op.parent_op is None:
                if op.short_name in INPLACE_WRITES and op.input_ids:
                    self.updated_by.setdefault(op.input_ids[0], []).append(op.index)
                for t in op.output_ids:
                    # An op that hands back one of its inputs (dropout in eval, an in-place op) did not
                    # make that tensor: keep its real maker, or the chain back to the sublayer breaks.
                    if t not in op.input_ids:
                        self.made_by[t] = op.index
                    elif op.short_name in INPLACE_ADDS:
                        self.updated_by.setdefault(t, []).append(op.index)
        self.ops = [o for o in recording.ops if o.level == "function" or o.parent_op is None]
        self.by_index = {o.index: o for o in self.ops}
        self.copies = Copies(recording)

    def depends(self, later: int, earlier: set[int], values: bool = False, after: int = -1) -> bool:
        """Whether tensor ``later`` was computed (through ops) from any tensor in ``earlier``; with ``values``,
        from their values: an op that reads only its input's shape (ones_like) does not pass the dependence on.
        Tensors made before op ``after`` are not followed (they cannot come from a tensor made there)."""
        seen: set[int] = set()
        todo = [later]
        while todo and len(seen) < SEARCH_LIMIT:
            t = todo.pop()
            if t in earlier:
                return True
            if t in seen or (self.made_by.get(t, -1) < after and t not in self.updated_by):
                continue
            seen.add(t)
            for index in (self.made_by.get(t, -1), *self.updated_by.get(t, ())):
                op = self.by_index.get(index)
                if op is not None and not (values and op.short_name in SHAPE_ONLY_OPS):
                    todo.extend(i for i in op.input_ids if i != t)
        return False

    def residuals(self) -> list[Residual]:
        out = []
        for op in self.ops:
            if op.short_name not in ADDS or op.phase != "forward" or len(op.input_ids) != 2 or len(op.inputs) != 2:
                continue
            if (not all(m.dtype.startswith(("float", "bfloat")) for m in op.inputs)
                    or op.input_ids[0] == op.input_ids[1]):
                continue
            # A residual stream is (batch, length, d_model) (or flattened): a 4-d add is scores plus an
            # additive mask or a position bias (eager attention), never a residual.
            if any(len(m.shape) > 3 for m in op.inputs):
                continue
            for (x, xm), (y, ym) in (((op.input_ids[0], op.inputs[0]), (op.input_ids[1], op.inputs[1])),
                                     ((op.input_ids[1], op.inputs[1]), (op.input_ids[0], op.inputs[0]))):
                found = next(((t, c) for t in self._summed(x) if (c := self._sublayer(t, y, op)) is not None), None)
                if found is not None:
                    out.append(Residual(op, xm.shape, ym.shape, found[1], found[0], y))
                    break
        return out

    def _summed(self, x: int, depth: int = 3) -> list[int]:
        """``x`` and, when ``x`` is itself a sum, the terms it adds (to ``depth``): a parallel block adds its
        sublayers to the stream in one expression (residual + attn + mlp, Cohere's and GPT-J's), so the stream
        an mlp branch was computed from is a term of the add's other operand, not that operand."""
        terms = list(dict.fromkeys((x, self.copies.original(x))))  # a copy's stream is the tensor it copies
        op = self.by_index.get(self.made_by.get(terms[-1], -1))
        if depth and op is not None and op.short_name in ADDS and len(op.input_ids) == 2:
            for term in op.input_ids:
                terms += [t for t in self._summed(term, depth - 1) if t not in terms]
        return terms

    def _sublayer(self, x: int, y: int, add: OpEvent) -> ModuleCall | None:
        """The heaviest module call that took ``x`` (or a normalised x) in and led to ``y``, outside the add's
        own module stack; None when ``y`` does not come from ``x`` through a module."""
        born = self.made_by.get(x, -1)
        ancestors = self._ancestors(add.call)
        candidates = []
        for call in self.rec.calls:
            if call.index in ancestors or call.first_op <= born or call.last_op >= add.index or not call.output_ids:
                continue
            if (x in call.input_ids or self._fed_from(call, x)) and self.depends(y, set(call.output_ids)) \
                    and self._reads_values_of(call, x):
                candidates.append(call)
        if not candidates:
            return None
        return max(candidates, key=lambda c: (c.last_op - c.first_op, -c.depth))

    def _reads_values_of(self, call: ModuleCall, x: int) -> bool:
        """Whether the call's output is computed from the values of ``x`` (or of the normalised x it took): a
        position table (an embedding of arange(x.shape[1])) takes x in but reads only its shape, and is no
        sublayer whose output the residual add must match."""
        born = self.made_by.get(x, -1)
        return any(self.depends(t, {x}, values=True, after=born) for t in call.output_ids)

    def _fed_from(self, call: ModuleCall, x: int) -> bool:
        """Pre-LN: the sublayer's input is a function of x made by one module (the norm), or by a few ops of the
        forward that calls the sublayer (a token shift written inline, ``attn(token_shift(x)) + x``: chunk, pad,
        cat)."""
        for t in call.input_ids:
            op = self.by_index.get(self.made_by.get(t, -1))
            if op is not None and x in op.input_ids:
                return True
            maker = next((c for c in self.rec.calls if t in c.output_ids and x in c.input_ids), None)
            if maker is not None or self._made_inline_from(t, x, call.parent):
                return True
        return False

    def _made_inline_from(self, t: int, x: int, caller: int | None) -> bool:
        """Whether tensor ``t`` was computed from ``x`` by ops that ran directly in module call ``caller`` (no
        module in between: another sublayer on the way would make ``t`` that sublayer's output, not the stream)."""
        seen: set[int] = set()
        todo = [t]
        while todo and len(seen) < INLINE_OPS:
            u = todo.pop()
            op = self.by_index.get(self.made_by.get(u, -1))
            if u in seen or op is None or op.call != caller:
                continue
            seen.add(u)
            if x in op.input_ids:
                return True
            todo.extend(op.input_ids)
        return False

    def _ancestors(self, index: int | None) -> set[int]:
        out = set()
        while index is not None:
            out.add(index)
            index = self.rec.calls[index].parent
        return out

    def reshaped_by(self, t: int, stream: tuple, shape: tuple, since: int) -> OpEvent | None:
        """The earliest op (from op ``since`` on) on the way to tensor ``t`` that turned a tensor of the
        ``stream`` shape into one of ``shape``: where a sublayer's output got its wrong shape."""
        seen: set[int] = set()
        todo, found = [t], None
        while todo and len(seen) < SEARCH_LIMIT:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            op = self.by_index.get(self.made_by.get(x, -1))
            if op is None or op.index < since:
                continue
            if any(m.shape == stream for m in op.inputs) and any(m.shape == shape for m in op.outputs) and \
                    (found is None or op.index < found.index):
                found = op
            todo.extend(i for i in op.input_ids if i != x)
        return found

    def first_use(self, call: ModuleCall) -> OpEvent | None:
        """The first op after ``call`` that takes one of its outputs."""
        made = set(call.output_ids)
        return next((op for op in self.ops if op.index > call.last_op and op.phase == "forward"
                     and made & set(op.input_ids)), None)

    def module_that_made(self, t: int) -> ModuleCall | None:
        """The last module called that returned tensor ``t`` without having received it (a pass-through such as
        dropout in eval hands back what it got and made nothing)."""
        makers = [c for c in self.rec.calls if t in c.output_ids and t not in c.input_ids]
        return max(makers, key=lambda c: c.index) if makers else None

    def uncovered(self, residuals: list[Residual], parameters: set[int]) -> list[tuple[str, ModuleCall]]:
        """Attention and feed-forward sublayers whose output no residual add carries around them (``parameters``:
        the model's parameter identities, which tell an attention's q·kᵀ from a router's projection)."""
        out: list[tuple[str, ModuleCall]] = []
        for kind, call in self._sublayers(parameters):
            if self._adds_its_input(call) or any(self._carries(r, call) for r in residuals):
                continue
            if not any(call.path == c.path for _, c in out):
                out.append((kind, call))  # once per module: a layer shared across depth (ALBERT) is one finding
        return out

    def _adds_its_input(self, call: ModuleCall) -> bool:
        """A sublayer that adds its own input back itself, with projections that are no modules of their own
        (XLNet's post_attention: einsum with a parameter, then attn_out + h): an add inside the call of one
        of the call's inputs and a tensor the call made."""
        for op in self.ops:
            if op.index < call.first_op or op.index > call.last_op or op.short_name not in ADDS:
                continue
            if len(op.input_ids) == 2 and any(
                    x in call.input_ids and call.first_op <= self.made_by.get(y, -1) <= call.last_op
                    for x, y in (op.input_ids, op.input_ids[::-1])):
                return True
        return False

    def _carries(self, r: Residual, call: ModuleCall) -> bool:
        """Whether residual add ``r`` carries the stream around sublayer ``call``: its stream predates the
        call, and its other operand is the call's output (an add after it) or was made inside the call (an
        add the sublayer does itself: ALBERT's LayerNorm(x + attention), Bloom's dropout_add)."""
        stream_made = self.made_by.get(r.stream_id, -1) if r.stream_id is not None else \
            min(self.made_by.get(t, -1) for t in r.add.input_ids)
        if stream_made >= call.first_op:
            return False
        if r.add.index > call.last_op:
            return any(self.depends(t, set(call.output_ids)) for t in r.add.input_ids)
        return r.add.index >= call.first_op and \
            any(call.first_op <= self.made_by.get(t, -1) <= call.last_op for t in r.add.input_ids)

    def _sublayers(self, parameters: set[int]) -> list[tuple[str, ModuleCall]]:
        found = []
        for call in self.rec.calls:
            if call.parent is None or not call.output_ids:
                continue
            direct = [o for o in self.rec.ops_in(call) if o.call == call.index]
            if any(o.short_name in FUSED_ATTENTION or (o.short_name in ATTENTION_OPS and self._scores(o, parameters))
                   for o in direct):
                found.append(("attention", call))
        found += [("feed-forward", c) for c in self._feed_forwards()]
        return found

    def _scores(self, softmax: OpEvent, parameters: set[int]) -> bool:
        """Whether a softmax normalises what a product of two activations made (q·kᵀ, then scaled, masked, biased or
        re-viewed): walked back through the ops, not past a projection (an op that reads a parameter), so a mixture
        of experts' router, a softmax of a Linear's output, is no attention."""
        seen: set[int] = set()
        todo = list(softmax.input_ids[:1])
        while todo and len(seen) < INLINE_OPS * 8:
            op = self.by_index.get(self.made_by.get(todo.pop(), -1))
            if op is None or op.index in seen or any(self._from_parameters(i, parameters) for i in op.input_ids):
                continue
            seen.add(op.index)
            if op.short_name in SCORE_PRODUCTS and len(op.input_ids) >= 2:
                return True
            todo.extend(op.input_ids)
        return False

    def _from_parameters(self, t: int, parameters: set[int], depth: int = 4) -> bool:
        """A parameter, or a tensor made from parameters alone (``self.weight.t()``)."""
        if t in parameters:
            return True
        op = self.by_index.get(self.made_by.get(t, -1))
        return depth > 0 and op is not None and bool(op.input_ids) and \
            all(self._from_parameters(i, parameters, depth - 1) for i in op.input_ids)

    def _feed_forwards(self) -> list[ModuleCall]:
        """Linear pairs d -> d_ff -> d (widening then narrowing back), returned as the narrowing call."""
        linears = [c for c in self.rec.calls if c.cls == "Linear" and c.inputs and c.outputs is not None]
        out = []
        for i, wide in enumerate(linears):
            d_in, d_mid = _last(wide.inputs), _last(wide.outputs)
            if d_in is None or d_mid is None or d_mid <= d_in:
                continue
            for narrow in linears[i + 1:]:
                if _last(narrow.inputs) == d_mid and _last(narrow.outputs) == d_in and \
                        self.depends(narrow.input_ids[0] if narrow.input_ids else -1, set(wide.output_ids)):
                    out.append(narrow)
                    break
        return out


def _last(structure) -> int | None:
    meta = structure[0] if isinstance(structure, list) and structure else structure
    shape = getattr(meta, "shape", None)
    return shape[-1] if shape else None
