"""batch.independence: a sample's output depends on that sample only.

Three passes at batch > 1 with different contents: the standard probe [x0, x1, x2]; the same with the
neighbours replaced, [x0, y1, y2] (sample 0's output must not move; samples 1 and 2 must, the positive
control); and a smaller, reordered batch [x2, x1] (different batch size, index and neighbours: their
outputs must be those of the probe). On a failure two recorded passes find the first op where the
sample's values change while its inputs did not, and name the pattern from that op.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from tfcheck.engine.registry import check
from tfcheck.model.inputs import PROBE_BATCH
from tfcheck.probe.flow import Judgement, pick_rows, tolerance
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status
from tfcheck.tools import shrinking

ID = "batch.independence"
ROW = "sample-depends-on-batch"
_STATISTICS = ("mean", "var", "std", "sum", "var_mean", "std_mean", "amax", "amin", "norm", "logsumexp",
               "batch_norm", "instance_norm", "max", "min", "softmax", "log_softmax", "cumsum")
_LAYOUT = ("view", "reshape", "flatten", "unflatten", "__getitem__", "narrow", "index_select", "split", "chunk",
           "as_strided", "contiguous", "expand")
#: Ops that re-read memory in a new shape without moving values: a reshape where a transpose was meant.
_RESHAPES = ("view", "reshape")


# ----- the minimal example --------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchExample:
    """A batch whose sample ``sample`` is also run alone (batch 1): its output must be the same."""

    batch: int
    length: int
    sample: int
    seed: int

    def describe(self) -> str:
        return f"batch {self.batch}, length {self.length}"


class BatchProperty(shrinking.Property):
    """A sample run alone and in a batch: the smallest batch, length and sample whose outputs differ."""

    check, example_type = ID, BatchExample

    def strategy(self, subject, finding):
        from hypothesis import strategies as st

        from tfcheck.model import strategies as tst

        longest = max(1, shrinking.longest_measured(finding, "length"))

        @st.composite
        def examples(draw) -> BatchExample:
            b = draw(tst.batch_sizes(2, shrinking.MAX_BATCH + 1))
            n = draw(tst.lengths(1, longest))
            return BatchExample(b, n, draw(st.integers(0, b - 1)), draw(tst.seeds()))

        return examples()

    def shows(self, runs, ex):
        subject = runs.subject
        batch_inputs = subject.make_inputs(ex.batch, ex.length, ex.seed)
        alone_inputs = pick_rows([batch_inputs], [(0, ex.sample)], ex.batch)
        together = runs.output(("batch", ex.batch, ex.length, ex.seed), *batch_inputs,
                               f"a forward at batch {ex.batch}, length {ex.length}")
        alone = runs.output(("alone", ex), *alone_inputs,
                            f"sample {ex.sample} of that batch alone (batch 1, length {ex.length})")
        if together.dim() < 1 or together.shape[0] != ex.batch or alone.shape[0] != 1 \
                or alone.shape[1:] != together.shape[1:]:
            return None
        change = _change(together[ex.sample], alone[0])
        return shrinking.Shown(change, tolerance(together), f"sample {ex.sample}'s output changes by {change:.3g} "
                               "between running alone and in the batch")

    def summary(self, ex, shown):
        return f"samples are still not independent with {ex.describe()}: {shown.detail}"

    def inputs(self, subject, ex):
        args, kwargs = subject.make_inputs(ex.batch, ex.length, ex.seed)
        first = next(v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor))
        return {"tokens": shrinking.tokens_or_shape(first)}


SHRINK = BatchProperty()


# ----- the check ------------------------------------------------------------------------------------

@check(ID, "each sample's output depends on that sample only, not on the rest of the batch",
       rows=(ROW,), order=40, builds_inputs=True, shrink=SHRINK)
def batch_independence(ctx) -> list[Finding]:
    """Compare sample 0 with its neighbours replaced, and samples 2 and 1 in a batch of two in reverse order,
    with the standard probe of batch 3: 3 passes (the probe usually reused), 2 more to localise a failure."""
    subject = ctx.subject
    length = subject.probe_length()
    base = ctx.forward(PROBE_BATCH, length)
    other = subject.make_inputs(PROBE_BATCH, length, seed=1)
    sources = [(base.args, base.kwargs), other]
    replaced_inputs = pick_rows(sources, [(0, 0), (1, 1), (1, 2)], PROBE_BATCH)
    moved_inputs = pick_rows(sources, [(0, 2), (0, 1)], PROBE_BATCH)
    replaced = ctx.run(*replaced_inputs,
                       f"a forward at batch 3, length {length}: sample 0 kept, samples 1 and 2 replaced")
    moved = ctx.run(*moved_inputs, f"a forward at batch 2, length {length}: samples 2 and 1 of the probe")
    out, out_r, out_m = base.output, replaced.output, moved.output
    if not _per_sample(out, PROBE_BATCH) or not _per_sample(out_r, PROBE_BATCH) or not _per_sample(out_m, 2) \
            or out_m.shape[1:] != out.shape[1:]:
        return [Finding(ID, Status.SKIP, f"inconclusive: the output {tuple(out.shape)} has no batch axis first (or "
                        "changes shape with the batch size), so samples cannot be compared; declare 'output' to pick "
                        "a per-sample tensor")]
    tol = tolerance(out)
    kept = _change(out[0], out_r[0])
    moved_change = max(_change(out[2], out_m[0]), _change(out[1], out_m[1]))
    control = min(_change(out[1], out_r[1]), _change(out[2], out_r[2]))
    judged = Judgement(max(kept, moved_change), tol, control)
    evidence = {**judged.evidence(), "length": length,
                "sample_0_change_when_neighbours_replaced": kept,
                "change_in_a_batch_of_2_in_reverse_order": moved_change,
                "compared": "[x0, x1, x2] vs [x0, y1, y2] (sample 0), and vs [x2, x1] (samples 2 and 1)"}
    if not judged.conclusive:
        return [Finding(ID, Status.SKIP, f"inconclusive: replacing samples 1 and 2 did not change their own outputs "
                        f"(smallest change {control:.3g}, tolerance {tol:.3g}), so the probe did not reach the output",
                        evidence=evidence)]
    if not judged.leaked:
        return [Finding(ID, Status.PASS, f"samples are independent: sample 0 moved by {kept:.3g} when its neighbours "
                        f"were replaced, samples 2 and 1 by {moved_change:.3g} in a batch of 2 (tolerance {tol:.3g}); "
                        f"replacing a sample changed its own output by at least {control:.3g}", Location(module=""),
                        evidence)]
    if kept > tol:
        how = (f"sample 0's output changed by {kept:.3g} (tolerance {tol:.3g}) when only the other samples of the "
               "batch were replaced")
        runs = ((base.args, base.kwargs), 0, PROBE_BATCH), (replaced_inputs, 0, PROBE_BATCH)
    else:
        how = (f"samples 2 and 1 changed by {moved_change:.3g} (tolerance {tol:.3g}) when run as a batch of 2 in "
               "reverse order: the output depends on the sample's index in the batch or on the batch size")
        runs = ((base.args, base.kwargs), 2, PROBE_BATCH), (moved_inputs, 0, 2)
    divergence = localise(ctx, *runs)
    return [shrinking.with_minimal_example(ctx, _failure(ctx.subject.model, how, divergence, evidence), SHRINK)]


def _per_sample(out: torch.Tensor, batch: int) -> bool:
    return out.dim() >= 1 and out.shape[0] == batch


def _change(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float(torch.nan_to_num((a.detach().double() - b.detach().double()).abs(), nan=float("inf")).max()) \
        if a.numel() else 0.0


# ----- localisation ---------------------------------------------------------------------------------

@dataclass
class Divergence:
    """The first op where the watched sample's values changed between two runs while its inputs had not."""

    op: str
    module: str
    file: str | None
    line: int | None
    pattern: str
    change: float
    inputs: list
    #: where the sample's values were first seen changed, when the culprit is an earlier op (file, line, module)
    seen_at: tuple | None = None


class _Rows:
    """on_op for one recorded run: the watched sample's row of every per-sample input and output."""

    def __init__(self, row: int, batch: int, reference: _Rows | None = None):
        self.row, self.batch, self.reference = row, batch, reference
        self.seen: list[tuple[str, list, list]] = []  # by function-level op count (aten counts vary per run)
        self.found: Divergence | None = None
        self.model: nn.Module | None = None
        self.batch_reductions: list = []  # ops that reduced a per-sample tensor over dim 0
        self.unbatched: list = []  # reshapes that took a batch-first tensor out of that layout

    def rows_of(self, values) -> list:
        flat = values if isinstance(values, (list, tuple)) else [values]
        return [v[self.row].detach().double()
                if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == self.batch and v.is_floating_point()
                else None for v in flat if isinstance(v, torch.Tensor)]

    def __call__(self, event, args, kwargs, out) -> None:
        if event.level != "function" or event.phase != "forward":
            return
        ins = self.rows_of(list(args) + list(kwargs.values()))
        outs = self.rows_of(out)
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if event.short_name in _STATISTICS and first is not None and first.dim() > 1 \
                and first.shape[0] == self.batch and _reduces_batch_axis(args, kwargs):
            self.batch_reductions.append(event)
        if event.short_name in _RESHAPES and _leaves_batch_first(first, out, self.batch):
            self.unbatched.append(event)
        self.seen.append((event.name, ins, outs))
        if self.reference is None or self.found is not None or len(self.seen) > len(self.reference.seen):
            return
        name, ref_ins, ref_outs = self.reference.seen[len(self.seen) - 1]
        if name != event.name or len(ref_ins) != len(ins) or len(ref_outs) != len(outs):
            return
        if any(_differs(a, b) for a, b in zip(ref_ins, ins)):
            return
        moved = [_change(a, b) for a, b in zip(ref_outs, outs) if a is not None and b is not None and _differs(a, b)]
        if moved:
            # A batch statistic shows where it is used (x - mean), not where it is taken: point at the latter.
            reduction = self._reduction_for(event) if None in ins else None
            # A layout op bringing back a tensor that was not batch-first shows the mix; the reshape that took
            # it out of batch-first, interleaving the samples, made it.
            unbatched = self.unbatched[-1] if reduction is None and None in ins and self.unbatched and \
                event.short_name in _LAYOUT else None
            culprit = reduction or unbatched or event
            self.found = Divergence(culprit.name, culprit.module, culprit.file, culprit.line,
                                    _pattern(self.model, event, args, kwargs, self.batch, reduction),
                                    max(moved), [str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor)],
                                    (event.file, event.line, event.module) if culprit is not event else None)


    def _reduction_for(self, event):
        """The first batch-axis reduction of the divergent op's module, else the latest one."""
        same = [r for r in self.batch_reductions if r.module == event.module]
        return same[0] if same else (self.batch_reductions[-1] if self.batch_reductions else None)


def _leaves_batch_first(x, out, batch: int) -> bool:
    """A reshape of a batch-first tensor into a permutation of its shape with another axis first: the memory is
    read in a new order, so rows of the result mix samples."""
    if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor) or x.dim() < 2 or x.shape[0] != batch:
        return False
    return sorted(out.shape) == sorted(x.shape) and tuple(out.shape) != tuple(x.shape) and out.shape[0] != batch


def _differs(a, b) -> bool:
    if a is None or b is None:
        return False
    return _change(a, b) > tolerance(a)


def localise(ctx, first: tuple, second: tuple) -> Divergence | None:
    """Record both runs; the first function-level op where the watched row's outputs differ while all of its
    per-sample inputs are the same is where samples mix (or where a batch-sized table enters)."""
    (inputs_a, row_a, batch_a), (inputs_b, row_b, batch_b) = first, second
    reference = _Rows(row_a, batch_a)
    ctx.record(*inputs_a, "a recorded forward of the probe, to localise where samples mix", on_op=reference)
    watch = _Rows(row_b, batch_b, reference)
    watch.model = ctx.subject.model
    ctx.record(*inputs_b, "a recorded forward of the changed batch, to localise where samples mix", on_op=watch)
    return watch.found


def _pattern(model: nn.Module | None, event, args: tuple, kwargs: dict, batch: int, reduction=None) -> str:
    name = event.short_name
    module = dict(model.named_modules()).get(event.module) if model is not None else None
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if isinstance(module, nn.MultiheadAttention) and not module.batch_first and first is not None \
            and first.dim() == 3 and first.shape[0] == batch:
        return (f"batch_first mismatch: nn.MultiheadAttention '{event.module}' was built with batch_first=False "
                f"(it reads (length, batch, d)) but receives {tuple(first.shape)} = (batch, length, d), so attention "
                "runs across the batch axis; build it with batch_first=True or transpose its inputs")
    if reduction is not None or (name in _STATISTICS and _reduces_batch_axis(args, kwargs)):
        name = reduction.short_name if reduction is not None else name
        return (f"statistics over the batch: {name} reduces over dim 0, the batch axis, and every sample then uses "
                "the result; take it over the feature axis (dim=-1) or use nn.LayerNorm")
    if name in _LAYOUT:
        return ("a reshape/view or index moves values across the batch axis: the tensor it reads is not laid out "
                "batch-first (a reshape where a transpose was meant, or a table sliced with x.size(0)); use "
                "transpose/permute to change layouts and x.size(1) for the length")
    if not any(isinstance(a, torch.Tensor) and a.is_floating_point() and a.dim() >= 1 and a.shape[0] == batch
               for a in (*args, *kwargs.values())):
        return ("its input is not the sample's own data: an index or table lookup built from the batch size or the "
                "sample's index (arange(x.size(0)) as position ids, pe[:x.size(0)]), or a tensor not laid out "
                "batch-first; index positions with the length, x.size(1)")
    return f"{name} mixes the samples of the batch"


def _reduces_batch_axis(args: tuple, kwargs: dict) -> bool:
    dim = kwargs.get("dim", args[1] if len(args) > 1 and not isinstance(args[1], torch.Tensor) else None)
    x = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if dim is None:
        return x is not None and x.dim() > 1
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return any(isinstance(d, int) and x is not None and d % max(x.dim(), 1) == 0 for d in dims)


def _failure(model: nn.Module, how: str, divergence: Divergence | None, evidence: dict) -> Finding:
    if divergence is None:
        nowhere = Location(module="", reason="no recorded op of the user's code is where the samples mix")
        return Finding(ID, Status.FAIL, f"samples are not independent: {how}. The recorded ops did not show where they "
                       "mix (the mixing happens below the Python level)", nowhere, evidence, ROW)
    where = f"'{divergence.module}'" if divergence.module else "the model's own forward"
    evidence = {**evidence, "first_divergent_op": divergence.op, "op_inputs": divergence.inputs,
                "change_at_that_op": divergence.change}
    related = (Related("the sample's values are first seen changed here", *divergence.seen_at),) \
        if divergence.seen_at else ()
    return Finding(ID, Status.FAIL, (
        f"samples are not independent: {how}. The sample's values first change at {divergence.op} in {where}, "
        f"whose per-sample inputs were unchanged — {divergence.pattern}"),
        Location(module=divergence.module, file=divergence.file, line=divergence.line), evidence, ROW,
        related=related)
