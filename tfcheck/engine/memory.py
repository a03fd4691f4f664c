"""A memory budget beside the time budget: probes never grow past the memory a run may use.

A probe's peak is estimated from the model's shape (width, layers, heads, vocabulary) and the probe's rows and
length: the activations every layer keeps (the recorder and backward keep them all), the attention scores and
their softmax (rows · heads · length² per layer) and the logits. The decision is deterministic: it reads the
machine's *limits* (physical memory, the cgroup's limit, the address-space limit) or a declared
``memory_budget``, never the memory free at the moment, so that a serial run and each pytest-xdist worker
scale a probe the same way. A declared ``probe_len`` that does not fit is scaled down and the report says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tfcheck.model.build import names
from tfcheck.model.build.memory_limits import Limit
from tfcheck.model.build.sizing import human
from tfcheck.model.facts.memory_budget import limit_for
from tfcheck.model.subject import Subject
from tfcheck.model.trial.capacity import PROBE_LENGTH_CAP
from tfcheck.report.report import Assumption

#: Share of the memory limit the probes of one check may take (the model, its baseline copy and torch's own
#: allocations need the rest).
PROBE_SHARE = 0.25
#: The most rows one probe runs: mask.causal perturbs each position of its longest probe (up to 16) and keeps
#: the reference row.
WORST_ROWS = 17
#: Activations a layer keeps per token and per unit of width (projections, norms, residuals, the FFN's
#: widened states and their gradients): generous, so an estimate errs on the safe side.
ACTIVATIONS_PER_LAYER = 24
BYTES = 4  # float32
#: Used when the model does not say its depth or head count.
UNKNOWN_LAYERS, UNKNOWN_HEADS = 12, 16
ASSUMPTION = "probe length (memory)"


@dataclass(frozen=True)
class ModelShape:
    d_model: int
    layers: int
    heads: int
    vocab: int

    def peak(self, rows: int, length: int) -> int:
        """Bytes one probe of ``rows`` × ``length`` may hold at its peak."""
        activations = rows * length * self.d_model * ACTIVATIONS_PER_LAYER * self.layers
        scores = 2 * rows * self.heads * length * length * self.layers  # scores and their softmax, each layer
        logits = 2 * rows * length * self.vocab
        return (activations + scores + logits) * BYTES


def shape_of(subject: Subject) -> ModelShape:
    model = subject.model
    config = getattr(model, "config", None)

    def first(candidates: tuple[str, ...], default: int) -> int:
        for holder in (config, model):
            for name in candidates:
                try:
                    value = getattr(holder, name, None)
                except Exception:  # noqa: BLE001 - a heterogeneous HF config refuses a global per-layer read
                    continue
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
        return default

    d_model = subject.facts.d_model or first(names.D_MODEL, 1024)
    return ModelShape(d_model, first(names.NUM_LAYERS, UNKNOWN_LAYERS), first(names.NUM_HEADS, UNKNOWN_HEADS),
                      subject.facts.output_vocab_size or subject.facts.vocab_size or 1)


def fit_probes(subject: Subject, limit: Limit | None = None) -> None:
    """Scale the probes down to the longest whose worst probe fits the memory budget, and say so: a declared
    probe_len, or the default probes' longest (PROBE_LENGTH_CAP, which only a very large model built as
    written does not fit)."""
    if any(a.key == ASSUMPTION for a in subject.assumptions):
        return
    declared = subject.facts.probe_len
    requested = declared or PROBE_LENGTH_CAP
    limit = limit or limit_for(subject)
    budget = int(limit.bytes * PROBE_SHARE)
    shape = shape_of(subject)
    if shape.peak(WORST_ROWS, requested) <= budget:
        return
    fits = _longest_fitting(shape, budget)
    if declared:
        subject.facts.probe_len = fits
    else:  # the checks keep their own lengths, capped: probe_len would scale the short ones up to the cap
        subject.facts.memory_cap = fits
    subject.assumptions.append(Assumption(
        ASSUMPTION, fits,
        (f"probe_len={requested} ({subject.source_of('probe_len')})" if declared else
         f"the default probes (up to {requested} positions)") + f" scaled down: a probe of {WORST_ROWS} rows × "
        f"{requested} would need about {human(shape.peak(WORST_ROWS, requested))} (d_model {shape.d_model}, "
        f"{shape.layers} layers, {shape.heads} heads), over {int(PROBE_SHARE * 100)}% of the {limit.source} "
        f"({human(limit.bytes)}); {fits} fits. Run on a machine with more memory for longer probes"))


def _longest_fitting(shape: ModelShape, budget: int) -> int:
    """The longest length (a multiple of 8, at least 8) whose worst probe fits ``budget``."""
    a = 2 * WORST_ROWS * shape.heads * shape.layers * BYTES
    b = WORST_ROWS * (shape.d_model * ACTIVATIONS_PER_LAYER * shape.layers + 2 * shape.vocab) * BYTES
    root = (-b + math.sqrt(b * b + 4 * a * budget)) / (2 * a)
    return max(8, int(root) // 8 * 8)
