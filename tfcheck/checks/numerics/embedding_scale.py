"""embedding.scale: a sinusoidal position table and the token embeddings it is added to are of
comparable size.

One recorded forward. A sinusoidal table is recognised from the recorded adds, never from class names:
one operand comes from a buffer of the model or a tensor kept as a plain attribute (not a parameter) whose
rows are sin/cos pairs (each pair, interleaved or split in halves, has sin² + cos² = 1, and position 0 reads
sin 0 = 0, cos 0 = 1), the other operand is an activation computed after an embedding lookup. The ratio of
their RMS is reported, and a table whose frequencies are not the standard base-10000 ones
(tfcheck.probe.sinusoid) is said with the column where it first differs; learned, rotary and relative positions
add no such table and pass with nothing to judge.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from tfcheck.engine.registry import NotApplicable, check
from tfcheck.probe import recorded_probe
from tfcheck.probe.numerics import ADDS
from tfcheck.probe.sinusoid import Deviation, deviation
from tfcheck.recording.tensor_storage import owned_storages, storage_address
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "embedding.scale"
ROW = "embedding-position-imbalance"
FREQUENCIES = "position-table-nonstandard"
#: A factor beyond which one signal drowns the other (the paper's design gives a ratio of about 1).
DROWNS = 3.0


def _not_applicable(subject) -> NotApplicable | None:
    if subject.kind == "attention" or subject.facts.takes_features:
        return NotApplicable("the model takes features, not token ids: it embeds nothing")
    return None


@dataclass
class Addition:
    module: str
    file: str | None
    line: int | None
    token_rms: float
    position_rms: float
    embedding_rms: float | None  # the raw lookup's RMS, to tell the √d_model scale from the initialisation
    lookup: Lookup | None = None  # the embedding lookup the tokens came from
    deviation: Deviation | None = None  # where the table first differs from the standard sinusoid


@dataclass
class Lookup:
    """An embedding lookup: its output's RMS, where it ran, and the parameter it read (None: not the model's)."""

    rms: float
    module: str
    file: str | None
    line: int | None
    weight: str | None


class _Observer:
    """Embedding lookups and the sin/cos buffers added to them, during the shared recorded forward."""

    def __init__(self, model: nn.Module):
        # A table kept as a plain tensor attribute (self.pe = table, not a registered buffer) is as much the
        # model's as a buffer: tutorials build it in a Python loop and store it so.
        kept = [v for m in model.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)
                and not isinstance(v, nn.Parameter)]
        self._buffers = owned_storages([*model.buffers(), *kept])
        self._params = owned_storages(model.parameters())
        self._names = {id(p): name for name, p in model.named_parameters()}
        self.lookups: list[Lookup] = []
        self.additions: list[Addition] = []

    def _storage(self, t: torch.Tensor) -> int | None:
        return storage_address(t)

    def __call__(self, event, args, kwargs, out) -> None:
        if event.level != "function" or event.phase != "forward":
            return
        if event.short_name == "embedding" and isinstance(out, torch.Tensor) and out.is_floating_point():
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
            self.lookups.append(Lookup(_rms(out), event.module, event.file, event.line, self._names.get(id(weight))))
            return
        if event.short_name not in ADDS or not self.lookups or len(args) < 2:
            return
        a, b = args[0], args[1]
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return
        for table, tokens in ((a, b), (b, a)):
            ptr = self._storage(table)
            if ptr in self._buffers and ptr not in self._params and self._storage(tokens) not in self._buffers \
                    and tokens.is_floating_point() and is_sinusoidal(table):
                rows = table.reshape(-1, table.shape[-1])[: tokens.shape[-2] if tokens.dim() >= 2 else None]
                self.additions.append(Addition(event.module, event.file, event.line, _rms(tokens), _rms(rows),
                                               self.lookups[-1].rms, self.lookups[-1], deviation(table)))
                return


recorded_probe.observer(ID)(_Observer)


def _rms(t: torch.Tensor) -> float:
    return float(t.detach().double().pow(2).mean().sqrt()) if t.numel() else 0.0


def is_sinusoidal(table: torch.Tensor) -> bool:
    """Rows of sin/cos pairs: every pair (interleaved or split in halves) on the unit circle, and row 0 is
    (sin 0, cos 0) = (0, 1)."""
    if not table.is_floating_point() or table.dim() < 2 or table.shape[-1] < 2 or table.shape[-1] % 2:
        return False
    rows = table.detach().double().reshape(-1, table.shape[-1])
    if rows.shape[0] < 2:
        return False
    d = rows.shape[-1]
    layouts = ((rows[:, 0::2], rows[:, 1::2]), (rows[:, : d // 2], rows[:, d // 2:]))
    for sin, cos in layouts:
        if bool(((sin ** 2 + cos ** 2 - 1).abs() < 1e-4).all()) and bool((sin[0].abs() < 1e-6).all()) \
                and bool(((cos[0] - 1).abs() < 1e-6).all()):
            return True
    return False


@check(ID, "token embeddings and a sinusoidal position table are of comparable size", rows=(ROW, FREQUENCIES), order=66,
       applies=_not_applicable)
def embedding_scale(ctx) -> list[Finding]:
    """One recorded forward: where a sin/cos buffer is added to embedded tokens, the RMS ratio of the two
    must be within a factor of 3."""
    subject = ctx.subject
    observer = recorded_probe.shared(ctx).observed(ID)
    if not observer.additions:
        return [Finding(ID, Status.PASS, "no sinusoidal position table is added to token embeddings (learned, rotary "
                        "or relative positions): nothing to balance", Location(module=""),
                        {"embedding_lookups": len(observer.lookups)})]
    findings = []
    d_model = subject.facts.d_model
    for add in observer.additions:
        ratio = add.token_rms / add.position_rms if add.position_rms else float("inf")
        evidence = {"token_rms": add.token_rms, "position_rms": add.position_rms, "ratio": ratio,
                    "lookup_rms": add.embedding_rms, "d_model": d_model, "drowns_beyond_factor": DROWNS}
        location = Location(module=add.module, file=add.file, line=add.line)
        if 1 / DROWNS <= ratio <= DROWNS:
            findings.append(Finding(ID, Status.PASS, f"token signal / position signal = {ratio:.3g} at "
                                    f"'{add.module or '<root>'}' (within a factor {DROWNS:g})", location, evidence))
            continue
        lever, related = _lever(subject, add, ratio)
        findings.append(Finding(ID, Status.WARN, _message(add, ratio, d_model), lever,
                                {**evidence, "warning": "one signal drowns the other"}, row=ROW, related=related))
    bad = [f for f in findings if f.status is not Status.PASS]
    odd = next((add for add in observer.additions if add.deviation is not None), None)
    if odd is not None:  # a base other than 10000 is a design too: said, with the column, not failed
        bad.append(Finding(ID, Status.WARN, f"{odd.deviation}.", Location(module=odd.module, file=odd.file,
                                                                          line=odd.line),
                           {"deviation": vars(odd.deviation)}, row=FREQUENCIES))
    return bad[:2] or findings[:1]


def _lever(subject, add: Addition, ratio: float) -> tuple[Location, tuple[Related, ...]]:
    """The line to change: for tokens too large, the line that last initialised the embedding's weight (else
    the line that built it); for tokens too small, the lookup, where the √d_model scale belongs. The add of
    the two signals is related."""
    at_add = (Related("the tokens and the table are added here", add.file, add.line, add.module),)
    lookup = add.lookup
    if lookup is None or lookup.weight is None:
        return Location(add.module, add.file, add.line), ()
    if ratio < 1:
        return Location(lookup.module, lookup.file, lookup.line), at_add
    owner = lookup.weight.rpartition(".")[0]
    written = subject.construction_site(lookup.weight, owner, kind="written")
    built = written if written.line else subject.construction_site(lookup.weight, owner)
    return (built, at_add) if built.line else (Location(add.module, add.file, add.line), ())


def _message(add: Addition, ratio: float, d_model: int | None) -> str:
    where = f"at '{add.module or '<root>'}' the token embeddings (RMS {add.token_rms:.3g}) and the sinusoidal table " \
            f"(RMS {add.position_rms:.3g}) differ by a factor {max(ratio, 1 / ratio):.3g}"
    scaled = add.embedding_rms and d_model and abs(add.token_rms / add.embedding_rms / math.sqrt(d_model) - 1) < 0.05
    if ratio > 1:
        lever = ("the lookup is multiplied by √d_model on top of an initialisation of std "
                 f"{add.embedding_rms:.3g}: initialise the embedding with std d_model**-0.5 (as the √d_model scale "
                 "assumes) or drop the scale" if scaled else
                 f"the embedding's initialisation (RMS {add.embedding_rms:.3g}) is large: initialise it with std "
                 "d_model**-0.5 and scale by √d_model, or scale the table")
        return f"{where}: positions drown in the token signal; {lever}."
    lever = ("the initialisation is small even with the √d_model scale: raise its std" if scaled else
             "the lookup is not multiplied by √d_model: multiply it (as the paper does), or initialise with std 1")
    return f"{where}: the tokens drown in the positions; {lever}."
