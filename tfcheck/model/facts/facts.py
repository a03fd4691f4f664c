"""What tfcheck knows about a model: one typed attribute per fact, and where each came from.

Checks read attributes (``subject.facts.pad_id``), never strings; a fact nothing settled is ``None``. The
model layer sets facts with :meth:`Facts.set`, which records the source the report shows.
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tfcheck.model.facts.declarations import MaskSpec

#: One element of a call plan: the forward parameter (None: passed positionally) and the probe tensor's role.
PlanSlot = tuple["str | None", str]


#: The output selection until the trial forward shows the return value (``Facts.output``).
AUTO = "auto"


@dataclass
class Facts:
    # ----- what the model is: declared, or read from its config, signature and modules ---------------
    kind: str | None = None  # encoder | decoder | seq2seq | attention, or None when nothing says it
    causal: bool | None = None
    vocab_size: int | None = None
    #: the rows of the token embedding a seq2seq model's decoder input reaches (its target vocabulary): the target
    #: tokens are drawn below it; vocab_size's where both sides share one vocabulary
    target_vocab_size: int | None = None
    output_vocab_size: int | None = None
    #: the logits' width where the config pads the vocabulary for speed (None: not padded, or unknown)
    padded_vocab_size: int | None = None
    pad_id: int | None = None  # the source side's, on a seq2seq model
    target_pad_id: int | None = None  # a seq2seq model's target-side pad id, where it differs from pad_id
    max_len: int | None = None
    d_model: int | None = None
    mask: MaskSpec | None = None  # the padding mask's argument, convention and layout
    #: why no reading of an optional mask argument ran in the trial (the checks that pad are inconclusive); None: it ran
    mask_unread: str | None = None
    batch_first: bool | None = None  # False: torch's (length, batch, d) layout
    takes_features: bool | None = None  # no nn.Embedding: the model takes float features
    call_plan: list[PlanSlot] | None = None  # which forward parameter gets which probe tensor
    output: str | int | None = None  # how the output tensor is selected from the return value ("auto" until seen)
    returns: str | None = None  # "logits" or "hidden states", where the model says so itself
    #: the look-ahead mask the caller builds: its forward argument, convention ("" = the consumer's) and layout;
    #: MaskSpec(None, "none") when the model builds its own or has none
    causal_mask: MaskSpec | None = None
    head: str | None = None  # a submodule forward does not call that maps its states to logits
    #: who shifts the labels of the model's own loss, "inside" or "caller", where declared or documented (None:
    #: the label argument's name decides, tfcheck.model.facts.label_convention)
    label_shift: str | None = None
    #: the largest length the model's position tables hold, found in the trial forward (None: none found)
    capacity: int | None = None
    #: the longest probe the memory budget allows, when shorter than the default probes (tfcheck.engine.memory)
    memory_cap: int | None = None
    #: forward returns its output flattened to (batch·length, ...) rows, as a loss takes them (the trial shows it)
    flat_output: bool | None = None
    #: forward arguments tfcheck does not build, held fixed: name -> value, or a factory fn(batch, length) -> dict
    #: (declared, or a start position read as 0 from the signature)
    extra: dict[str, Any] | Callable[..., Any] | None = None
    # ----- declared only: nothing in a model says them ------------------------------------------------
    inputs: Callable[..., Any] | None = None
    accept: dict[str, str] | None = None
    kwargs: dict[str, Any] | None = None
    shrink: bool | None = None
    schedule: Callable[..., Any] | None = None
    warmup_steps: int | None = None
    total_steps: int | None = None
    lr: float | None = None
    precision: str | None = None
    train_steps: int | None = None
    # ----- run settings ----------------------------------------------------------------------------------
    probe_len: int | None = None
    length_multiple: int | None = None
    budget_s: float | None = None
    budget_overrun: str | None = None  # "skip" or "fail": what a check stopped by its budget counts as
    memory_budget: int | None = None
    device: str | None = None
    #: fact name -> where its value came from (a declaration, the config, a rule)
    sources: dict[str, str] = field(default_factory=dict)

    def set(self, name: str, value: Any, source: str) -> None:
        if name not in NAMES:
            raise AttributeError(f"no fact {name!r}; facts are: {', '.join(sorted(NAMES))}")
        setattr(self, name, value)
        self.sources[name] = source

    def __getattribute__(self, name: str) -> Any:
        # While a check runs, the facts it reads are noted: the report names the guessed ones beside its verdict.
        reads = object.__getattribute__(self, "__dict__").get("_reads")
        if reads is not None and name in NAMES:
            reads.add(name)
        return object.__getattribute__(self, name)

    @contextlib.contextmanager
    def reading(self) -> Iterator[builtins.set[str]]:  # builtins: ``set`` here is the method above
        """Note the names of the facts read inside the block (nested blocks note into the outer set too)."""
        outer = self.__dict__.get("_reads")
        reads: builtins.set[str] = builtins.set()
        self.__dict__["_reads"] = reads
        try:
            yield reads
        finally:
            self.__dict__["_reads"] = outer
            if outer is not None:
                outer |= reads


NAMES = frozenset(f.name for f in dataclasses.fields(Facts)) - {"sources"}
