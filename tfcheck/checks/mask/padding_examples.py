"""The padded inputs of mask.padding, and its minimal-example property: the smallest padded batch whose
real outputs still move when only the pads' content changes ("padding leaks with batch 1, length 2, one
pad at the end").

Apart from mask_padding.py so that both fit one screenful; the check imports its inputs from here.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tfcheck.frames import short_path
from tfcheck.model.inputs import with_memory_padding_mask
from tfcheck.model.trial.observed import COMPARISONS
from tfcheck.probe import flow, layer_capture
from tfcheck.tools import shrinking


def padded_inputs(subject, primary, target, keep) -> tuple[tuple, dict]:
    """Forward arguments of a padded batch (``keep``: True = real), with the mask where the model takes it."""
    args, kwargs = subject.inputs_for(primary, target, keep=keep)
    return args, with_memory_padding_mask(subject, kwargs, keep)


def pad_comparison(ctx, args: tuple, kwargs: dict, pad_id: int | None) -> str | None:
    """Where one recorded forward of the padded batch compares integer ids with ``pad_id`` (``ids != pad``,
    ``ids.eq(pad)``), as path:line; None when it never does."""
    if pad_id is None:
        return None
    found: list[str] = []

    def on_op(event, op_args, op_kwargs, out):
        if found or event.short_name not in COMPARISONS or len(op_args) != 2:
            return
        ids, other = op_args
        value = other.item() if isinstance(other, torch.Tensor) and other.numel() == 1 else other
        if isinstance(ids, torch.Tensor) and not ids.is_floating_point() and ids.dtype != torch.bool \
                and isinstance(value, int) and not isinstance(value, bool) and value == pad_id:
            found.append(f"{short_path(event.file)}:{event.line}" if event.file else repr(event.module))

    ctx.record(args, kwargs, "the padded batch, recorded to find comparisons with pad_id", on_op=on_op)
    return found[0] if found else None


def mask_axes(n: int, samples: int) -> tuple[set[str], Callable[..., None]]:
    """An ``on_op`` for a recorded forward of padded samples, and the set it fills with the axes a per-sample mask
    is applied on to square (n, n) scores: 'query' ((..., n, 1)), 'key' ((..., n) or (..., 1 or n, n))."""
    seen: set[str] = set()

    def on_op(event, op_args, op_kwargs, out):
        name = event.short_name.lower()
        if not any(k in name for k in ("masked_fill", "where", "add", "sub", "mul", "scaled_dot_product",
                                       "baddbmm", "multi_head_attention")):
            return
        tensors = [t for t in (*op_args, *op_kwargs.values()) if isinstance(t, torch.Tensor)]
        scores = [t for t in tensors if t.dim() >= 3 and tuple(t.shape[-2:]) == (n, n)]
        if not scores and not ("scaled_dot" in name or "multi_head" in name):
            return
        largest = max((t.numel() for t in scores), default=None)
        for t in tensors:
            if t.dim() < 2 or t.shape[0] % samples or (largest is not None and t.numel() >= largest):
                continue  # not a per-sample (or per sample and head) mask smaller than the scores
            if tuple(t.shape[-2:]) == (n, 1):
                seen.add("query")
            elif t.shape[-1] == n and (t.dim() == 2 or t.shape[-2] in (1, n)):
                seen.add("key")

    return seen, on_op


def layout(keep_row: tuple[bool, ...]) -> str:
    """'.' for a real token, '_' for a pad (the layout mask.padding's evidence shows)."""
    return "".join("." if k else "_" for k in keep_row)


def describe_padding(keep_row: tuple[bool, ...]) -> str:
    """'unpadded', 'one pad at the end', '2 pads at the start', 'pads at positions 1, 3'."""
    pads = [i for i, k in enumerate(keep_row) if not k]
    if not pads:
        return "unpadded"
    count = "one pad" if len(pads) == 1 else f"{len(pads)} pads"
    n = len(keep_row)
    if pads == list(range(n - len(pads), n)):
        return f"{count} at the end"
    if pads == list(range(len(pads))):
        return f"{count} at the start"
    return f"{count} at position{'s' if len(pads) > 1 else ''} {', '.join(map(str, pads))}"


@dataclass(frozen=True)
class PaddingExample:
    """A padded batch (one keep pattern per sample, True = real) whose pads' content changes."""

    batch: int
    length: int
    keep: tuple[tuple[bool, ...], ...]
    seed: int

    def describe(self) -> str:
        if self.batch == 1:
            return f"batch 1, length {self.length}, {describe_padding(self.keep[0])}"
        samples = "; ".join(f"sample {i} {describe_padding(k)}" for i, k in enumerate(self.keep))
        return f"batch {self.batch}, length {self.length} ({samples})"

    def to_dict(self) -> dict:
        return {"batch": self.batch, "length": self.length, "pads": [layout(k) for k in self.keep],
                "seed": self.seed}

    @classmethod
    def from_dict(cls, data: dict) -> PaddingExample:
        keep = tuple(tuple(c == "." for c in row) for row in data["pads"])
        return cls(int(data["batch"]), int(data["length"]), keep, int(data["seed"]))


class PaddingProperty(shrinking.Property):
    check, example_type = "mask.padding", PaddingExample

    def strategy(self, subject, finding):
        from hypothesis import strategies as st

        from tfcheck.model import strategies as tst

        longest = max(2, shrinking.longest_measured(finding, "length"))

        @st.composite
        def examples(draw) -> PaddingExample:
            b = draw(tst.batch_sizes(1, shrinking.MAX_BATCH))
            n = draw(tst.lengths(2, longest))
            keep = list(draw(st.lists(tst.padding_patterns(n), min_size=b, max_size=b)))
            if all(all(row) for row in keep):
                # Padding leaks only where there is some: the simplest draw (no pads) stands for the simplest
                # padded batch, one pad at the end of the last sample.
                keep[-1] = (True,) * (n - 1) + (False,)
            return PaddingExample(b, n, tuple(keep), draw(tst.seeds()))

        return examples()

    def _batch(self, subject, ex: PaddingExample):
        """(base, other, keep, target): the padded batch and the same with other pad content."""
        gen = torch.Generator().manual_seed(ex.seed)
        keep = torch.tensor(ex.keep, dtype=torch.bool).to(subject.device)
        pads = ~keep
        real = subject.random_primary(ex.batch, ex.length, gen)
        pad_id = subject.facts.pad_id
        features = real.is_floating_point()
        base = real if features or pad_id is None else torch.where(pads, torch.full_like(real, pad_id), real)
        # As mask.padding: the pads keep pad_id where it is known (the mask, or positions, may be built from it)
        # and only their embedding changes; other ids (or features) only where no pad id is known.
        ids_changed = features or pad_id is None
        if not ids_changed:
            other = base
        elif features:
            other = torch.where(pads[..., None], torch.randn(base.shape, generator=gen).to(base.device), base)
        else:
            other = flow.replace_tokens(subject, base, pads, ex.seed + 1)
        target = subject.random_primary(ex.batch, ex.length, gen) if subject.takes_target else None
        return base, other, keep, target

    def shows(self, runs, ex):
        subject = runs.subject
        base, other, keep, target = self._batch(subject, ex)
        what = f"{ex.batch} padded sample(s) of length {ex.length}"
        base_out = runs.output(("padding", ex), *padded_inputs(subject, base, target, keep), what)
        other_out = runs.output(("padding-changed", ex), *padded_inputs(subject, other, target, keep),
                                f"{what}, their pads changed",
                                during=lambda: layer_capture.perturbed_embedding(subject.model, other, ~keep, ex.seed))
        out_len = ex.length if target is None else target.shape[1]
        if base_out.dim() < 2 or tuple(base_out.shape[:2]) != (ex.batch, out_len) or other_out.shape != base_out.shape:
            return None
        real = keep if target is None else torch.ones(ex.batch, out_len, dtype=torch.bool, device=keep.device)
        judged = real.to(base_out.device) & shrinking.finite_rows(base_out)
        if not bool(judged.any()):
            return None
        change = torch.where(judged, flow.change_per_position(base_out, other_out),
                             torch.full(judged.shape, -1.0, dtype=torch.float64, device=judged.device))
        sample, position = divmod(int(change.argmax()), out_len)
        largest = float(change.max())
        who = f"sample {sample}'s" if ex.batch > 1 else "the"
        side = "decoder output" if target is not None else "real output"
        return shrinking.Shown(largest, flow.tolerance(base_out[judged]),
                               f"{who} {side} at position {position} changes by {largest:.3g} when only the pads' "
                               "content changes")

    def summary(self, ex, shown):
        return f"padding leaks with {ex.describe()}: {shown.detail}"

    def inputs(self, subject, ex):
        base, _, _, target = self._batch(subject, ex)
        out = {"tokens": shrinking.tokens_or_shape(base), "layout": [layout(k) for k in ex.keep]}
        if target is not None:
            out["target"] = shrinking.tokens_or_shape(target)
        return out


SHRINK = PaddingProperty()
