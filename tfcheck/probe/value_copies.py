"""Which tensors of one recorded forward are exact copies of another, so that a copy counts as the tensor it copies.

The residual recognisers follow tensor identities: ``x + sublayer(norm(x))`` is a residual because one operand is
the tensor the sublayer was computed from. Megatron-LM and litgpt keep that operand in a copy made first
(``residual = x.clone()`` ... ``x = residual + x``), a new identity holding the same values at the same positions;
read by identity alone, the add has no skipped stream and a correct block seems to lack its residual. A copy is
followed back to the tensor it copies, so both checks that read residual adds (shape.residual, norm.placement)
see the stream.

A copy here is an op whose output holds exactly its input's values at the same positions, and which keeps the
gradient path (a residual is also the gradient's path around the sublayer). Ops that hand back their input itself
(``.contiguous()`` of a contiguous tensor, ``.to()`` of the same dtype, dropout in eval, ``F.dropout(p=0)``) are
no ops here at all: the identity is already the same.
"""
from __future__ import annotations

from tfcheck.recording.recorder import OpEvent, Recording

#: Copies by definition: the same values, shape, dtype and gradient path. Not ``detach``: its values are the same,
#: but no gradient flows back through it, so a detached skip is a residual in the forward only, and the lower
#: layers train as if it were missing; it is left to shape.residual's warning.
COPIES = frozenset({"clone", "contiguous"})
#: Casts, a copy when the output's dtype holds every value of the input's: the same dtype or a widening
#: (Megatron's fp32 residual, ``residual.float()`` of a bf16 stream). A narrowing rounds, so it is no copy.
CASTS = frozenset({"to", "type", "type_as", "float", "double", "half", "bfloat16", "_to_copy"})
WIDENS = {"float16": {"float32", "float64"}, "bfloat16": {"float32", "float64"}, "float32": {"float64"}}
#: Re-readings of the input's elements in their row-major order: at the input's own shape each element stays at
#: its position (a view or reshape to the same shape, an expand that broadcasts nothing). Not permute, transpose,
#: flip, roll or an index: at the same shape they can still move values (a square transpose, a permutation).
SAME_SHAPE = frozenset({"view", "view_as", "reshape", "reshape_as", "flatten", "squeeze", "expand", "expand_as",
                        "broadcast_to"})
#: Multiplying or dividing by the number 1 is exact in floating point (NaN and infinities included). Not
#: ``1 / x`` (recorded as ``__rtruediv__``), and not a 0-d tensor of 1, whose value the recording does not keep.
BY_ONE = frozenset({"mul", "__mul__", "__rmul__", "multiply", "div", "__truediv__", "true_divide", "divide"})
#: In-place writes named by dunders; every other in-place method ends with "_" (zero_, copy_, masked_fill_).
INPLACE_DUNDERS = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
                             "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"})
#: In-place methods that change a flag, not the values (detach_ does cut the gradient path, so it is a write here).
FLAGS_ONLY = frozenset({"requires_grad_", "share_memory_"})


class Copies:
    """The exact copies made in one recording with tensor identities, each followed to the first tensor of its
    chain that is no copy (a clone of a contiguous() of x is x)."""

    def __init__(self, recording: Recording):
        self.source: dict[int, int] = {}
        made_at: dict[int, int] = {}  # copy -> the op that made it
        for op in recording.ops:
            if op.phase != "forward":
                continue
            # A copy written in place afterwards (residual.zero_(), residual[0] = v) no longer holds the values it
            # copied: from there on it, and any copy of it made later, stands for nothing but itself. Read in
            # recording order, so a copy made before the write keeps its source.
            target = op.input_ids[0] if op.input_ids else -1
            if target in self.source and op.parent_op != made_at[target] and writes_in_place(op):
                del self.source[target]
            if (op.level == "function" or op.parent_op is None) and (pair := copied(op)) is not None:
                copy, of = pair
                self.source[copy] = self.source.get(of, of)
                made_at[copy] = op.index

    def original(self, t: int) -> int:
        """The tensor ``t`` is an exact copy of (``t`` itself when it is no copy)."""
        return self.source.get(t, t)


def copied(op: OpEvent) -> tuple[int, int] | None:
    """(the copy, the tensor it copies) when ``op`` made an exact copy of its first tensor argument, else None."""
    name = op.short_name
    if name == "copy_":  # dst.copy_(src): dst now holds src's values, when nothing was broadcast or rounded
        pair = op.input_ids[:2]
        metas = op.inputs[1::-1]
    else:
        pair = (op.output_ids[0], op.input_ids[0]) if len(op.output_ids) == 1 and op.input_ids else ()
        metas = (op.inputs[0], op.outputs[0]) if op.inputs and op.outputs else ()
    if len(pair) != 2 or len(metas) != 2 or pair[0] == pair[1]:
        return None
    source, copy = metas
    if source.shape != copy.shape or (source.dtype != copy.dtype and copy.dtype not in WIDENS.get(source.dtype, ())):
        return None
    by_one = name in BY_ONE and len(op.input_ids) == 1 and op.scalars.get("positional") == {1: 1}
    if name in COPIES or name in CASTS or name in SAME_SHAPE or name == "copy_" or by_one:
        return pair[0], pair[1]
    return None


def writes_in_place(op: OpEvent) -> bool:
    """Whether ``op`` writes into its first argument (x.zero_(), x += y, x[i] = v)."""
    name = op.short_name
    return name in INPLACE_DUNDERS or (name.endswith("_") and not name.startswith("_") and name not in FLAGS_ONLY)
