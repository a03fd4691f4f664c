"""mask.causal's minimal-example property: the smallest batch and length whose earlier outputs still
move when one later position changes ("still leaks with batch 1, length 2: output position 0 changes by
0.41 when position 1 changes"); its inputs follow torch.nn.Transformer's calling convention as the check's
do (tfcheck.model.inputs.with_torch_causal_mask).

Apart from mask_causal.py so that the check module stays one screenful; the check imports from here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tfcheck.model.inputs import with_torch_causal_mask
from tfcheck.probe import flow, layer_capture
from tfcheck.tools import shrinking


@dataclass(frozen=True)
class CausalExample:
    """Every sample of a batch with the token at ``position`` changed: no earlier output may move."""

    batch: int
    length: int
    position: int
    seed: int

    def describe(self) -> str:
        return f"batch {self.batch}, length {self.length}"


class CausalProperty(shrinking.Property):
    check, example_type = "mask.causal", CausalExample

    def strategy(self, subject, finding):
        from hypothesis import strategies as st

        from tfcheck.model import strategies as tst

        longest = max(2, shrinking.longest_measured(finding, "lengths"))

        @st.composite
        def examples(draw) -> CausalExample:
            b = draw(tst.batch_sizes(1, shrinking.MAX_BATCH))
            n = draw(tst.lengths(2, longest))
            k = draw(st.integers(1, n - 1))
            return CausalExample(b, n, k, draw(tst.seeds()))

        return examples()

    def _sequences(self, subject, ex: CausalExample):
        gen = torch.Generator().manual_seed(ex.seed)
        where = torch.zeros(ex.batch, ex.length, dtype=torch.bool)
        where[:, ex.position] = True
        where = where.to(subject.device)
        if subject.facts.takes_features:
            base = torch.randn(ex.batch, ex.length, subject.facts.d_model, generator=gen).to(subject.device)
            other = torch.where(where[..., None], torch.randn(base.shape, generator=gen).to(subject.device), base)
        else:
            base = subject.random_tokens(ex.batch, ex.length, gen)
            other = flow.replace_tokens(subject, base, where, ex.seed + 1)
        source = subject.random_primary(ex.batch, ex.length, gen) if subject.kind == "seq2seq" else None
        return base, other, where, source

    def _inputs(self, subject, sequence, source):
        if source is None:
            return subject.inputs_for(sequence)
        args, kwargs = subject.inputs_for(source, sequence)
        return args, with_torch_causal_mask(subject, kwargs, sequence.shape[1])  # as mask.causal does

    def shows(self, runs, ex):
        subject = runs.subject
        base, other, where, source = self._sequences(subject, ex)
        base_out = runs.output(("causal", ex.batch, ex.length, ex.seed), *self._inputs(subject, base, source),
                               f"a forward at batch {ex.batch}, length {ex.length}")
        other_out = runs.output(
            ("causal", ex), *self._inputs(subject, other, source),
            f"a forward at batch {ex.batch}, length {ex.length} with position {ex.position} changed",
            during=lambda: layer_capture.perturbed_embedding(subject.model, other, where, ex.seed))
        if base_out.dim() < 2 or tuple(base_out.shape[:2]) != (ex.batch, ex.length) \
                or other_out.shape != base_out.shape:
            return None
        earlier = torch.zeros(ex.batch, ex.length, dtype=torch.bool, device=base_out.device)
        earlier[:, :ex.position] = True
        judged = earlier & shrinking.finite_rows(base_out)
        if not bool(judged.any()):
            return None
        change = torch.where(judged, flow.change_per_position(base_out, other_out),
                             torch.full(judged.shape, -1.0, dtype=torch.float64, device=judged.device))
        sample, q = divmod(int(change.argmax()), ex.length)
        largest = float(change.max())
        who = f"sample {sample}'s output" if ex.batch > 1 else "output"
        return shrinking.Shown(largest, flow.tolerance(torch.where(torch.isfinite(base_out), base_out,
                                                                   torch.zeros_like(base_out))),
                               f"{who} position {q} changes by {largest:.3g} when position {ex.position} changes")

    def summary(self, ex, shown):
        return f"still leaks with {ex.describe()}: {shown.detail}"

    def inputs(self, subject, ex):
        base, other, _, source = self._sequences(subject, ex)
        out = {"sequence": shrinking.tokens_or_shape(base), "changed_to": shrinking.tokens_or_shape(other)}
        if source is not None:
            out["source"] = shrinking.tokens_or_shape(source)
        return out


SHRINK = CausalProperty()
