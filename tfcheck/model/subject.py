"""The subject: a model plus everything tfcheck knows about it (its facts, each with its source, and the
assumptions the report shows), and the probe sizes the checks use.

The facts are settled by ``tfcheck.model.facts.inference`` (no forward) and ``tfcheck.model.trial.trial`` (one trial
forward); inputs are made by ``tfcheck.model.inputs`` and outputs read by ``tfcheck.model.trial.outputs``. The
methods here are the check author's short way to both.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from tfcheck.model import inputs
from tfcheck.model.build.composed import compose
from tfcheck.model.build.loaded import Loaded
from tfcheck.model.facts import declarations as decl
from tfcheck.model.facts.facts import Facts
from tfcheck.model.facts.inference import infer_facts
from tfcheck.model.inputs import PROBE_LENGTH
from tfcheck.model.trial import outputs
from tfcheck.model.trial.capacity import probe_cap
from tfcheck.report.findings import Location
from tfcheck.report.report import Assumption


@dataclass
class Subject:
    """A loaded model and the resolved facts the checks use."""

    loaded: Loaded
    declared: dict[str, decl.Declared]
    assumptions: list[Assumption] = field(default_factory=list)
    facts: Facts = field(default_factory=Facts)
    #: standard probes already run, shared by the checks of this model: (batch, length, seed) -> Probe
    probe_cache: dict = field(default_factory=dict)
    #: the model's parameters and buffers as they were before the first check (tfcheck.engine.guard.Baseline)
    baseline: Any = None
    #: the trial forward's outcome (tfcheck.model.trial.trial.Trial), once the engine has run it; None before
    trial: Any = None

    @property
    def model(self) -> nn.Module:
        model: nn.Module = self.loaded.model
        return model

    @property
    def spec(self) -> str:
        return self.loaded.spec

    def reported_assumptions(self) -> list[Assumption]:
        """The assumptions as the report shows them: each marked declared when its source is a declaration's (the
        user said it), so the report can tell what tfcheck guessed."""
        said = {d.source for d in self.declared.values()}
        return [dataclasses.replace(a, declared=True) if a.source in said else a for a in self.assumptions]

    def source_of(self, key: str) -> str | None:
        """Where the fact ``key`` came from (a declaration, the config, a rule), as the report shows it."""
        return next((a.source for a in self.assumptions if a.key == key), None)

    def construction_site(self, path: str, module: str | None = None, kind: str = "registered") -> Location:
        """The user's line that built the submodule, parameter or buffer at ``path`` (``kind`` "registered"),
        last wrote the parameter in place ("written") or froze it ("frozen"), located at ``module`` (default:
        the module holding ``path``); without a line, the reason why."""
        from tfcheck.model.build.construction_sites import INSTANCE_REASON

        if module is None:
            module = path if path in dict(self.model.named_modules()) else path.rpartition(".")[0]
        sites = self.loaded.sites
        if sites is None:
            return Location(module, reason=INSTANCE_REASON)
        found = {"registered": sites.of, "written": sites.written.get, "frozen": sites.frozen.get}[kind](path)
        if found is not None:
            return Location(module, found.file, found.line)
        return Location(module, reason=sites.reason or f"no line of your code {kind} '{path or '<root>'}' while "
                        "tfcheck built the model (built inside library code, or the root itself)")

    @property
    def kind(self) -> str | None:
        return self.facts.kind

    @property
    def takes_target(self) -> bool:
        """Whether the forward takes a target sequence besides its primary input (a seq2seq call plan)."""
        return any(role.startswith("target") for _, role in self.facts.call_plan or ())

    @property
    def accepted(self) -> dict[str, str]:
        return self.facts.accept or {}

    @property
    def device(self) -> torch.device:
        for tensor in itertools.chain(self.model.parameters(), self.model.buffers()):
            return tensor.device
        return torch.device("cpu")

    # ----- probe lengths -------------------------------------------------------------------------
    def probe_lengths(self) -> tuple[int, ...]:
        """Lengths that shape checks visit: 1, the default probe, and the capped maximum."""
        return tuple(sorted({self.accepted_length(1), self.probe_length(), self.length_cap()}))

    def length_cap(self) -> int:
        """The longest probe: max_len and the capacity (``tfcheck.model.trial.capacity``, settled by the trial
        forward; collection, before it, reads max_len alone) and the memory budget's cap, but never over
        PROBE_LENGTH_CAP unless probe_len asks for more."""
        limits = [n for n in (self.facts.max_len, self.facts.capacity, self.facts.memory_cap) if n]
        cap = min([probe_cap(self), *limits])
        multiple = self.facts.length_multiple or 1
        return max(multiple, cap // multiple * multiple)

    def accepted_length(self, n: int) -> int:
        """``n``, or for a model that takes multiples of length_multiple only, the multiple at or above it (below
        it where that passes the cap)."""
        multiple = self.facts.length_multiple or 1
        up = -(-n // multiple) * multiple
        return up if up <= self.length_cap() else max(multiple, n // multiple * multiple)

    def probe_length(self, default: int = PROBE_LENGTH) -> int:
        """A check's probe length: its default, or the declared probe_len; capped (see ``length_cap``)."""
        return self.scaled_lengths(default)[0]

    def scaled_lengths(self, *defaults: int) -> tuple[int, ...]:
        """A check's probe lengths: its defaults, or scaled so that the longest is the declared probe_len
        (ratios kept, so lengths a check keeps distinct stay distinct); each capped (see ``length_cap``)."""
        probe_len = self.facts.probe_len
        if probe_len is not None:
            longest = max(defaults)
            defaults = tuple(max(1, round(n * probe_len / longest)) for n in defaults)
        cap = self.length_cap()
        return tuple(self.accepted_length(min(n, cap)) for n in defaults)

    # ----- inputs and outputs (tfcheck.model.inputs / outputs) ------------------------------------
    def make_inputs(self, batch: int, length: int, seed: int = 0) -> tuple[tuple, dict]:
        """Inputs for one forward at (batch, length), from a private generator (global RNG untouched)."""
        return inputs.make_inputs(self, batch, length, seed)

    def random_primary(self, batch: int, length: int, gen: torch.Generator, side: str | None = None) -> torch.Tensor:
        """Random token ids (never the pad id), or features for models that take them. ``side`` "source" or
        "target" draws from that side's vocabulary; left out, from ids every side reads."""
        return inputs.random_primary(self, batch, length, gen, side)

    def random_tokens(self, batch: int, length: int, gen: torch.Generator, side: str | None = None) -> torch.Tensor:
        return inputs.random_tokens(self, batch, length, gen, side)

    def inputs_for(self, primary: torch.Tensor, target: torch.Tensor | None = None,
                   keep: torch.Tensor | None = None) -> tuple[tuple, dict]:
        """Forward arguments from given tensors, laid out as the forward takes them.

        ``primary`` is the token ids (or features); ``target`` the decoder input of a seq2seq model;
        ``keep`` an optional (batch, length) bool padding mask, True = real token, converted to the mask
        convention of the model's mask argument (given to it even when that argument is optional).
        Checks always work in (batch, length, ...): for a model that takes (length, batch, d) (torch's
        batch_first=False) the features are transposed at the call (``to_model_layout``) and the output back
        (``extract_output``).
        """
        return inputs.inputs_for(self, primary, target, keep)

    def to_model_layout(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Forward arguments as the model takes them (see ``tfcheck.model.inputs.to_model_layout``)."""
        return inputs.to_model_layout(self, args, kwargs)

    def mask_value(self, keep: torch.Tensor) -> torch.Tensor:
        """A (batch, length) keep mask (True = real token) in the model's mask convention and layout."""
        return inputs.mask_value(self, keep)

    def causal_mask_value(self, batch: int, length: int, device: torch.device,
                          torch_convention: bool = False) -> torch.Tensor:
        """The decoder's causal mask as a caller builds it (see ``tfcheck.model.inputs.causal_mask_value``)."""
        return inputs.causal_mask_value(self, batch, length, device, torch_convention)

    @property
    def mask_layout(self) -> str:
        return inputs.mask_layout(self)

    def extract_output(self, raw: Any) -> torch.Tensor:
        """The output tensor of a forward's return value, as declared or inferred, (batch, length, ...)."""
        return outputs.extract_output(self, raw)

    def expected_last_dims(self) -> tuple[tuple[int, ...], str]:
        """The last dimensions the output may have (empty: any), and why."""
        return outputs.expected_last_dims(self)


def build_subject(loaded: Loaded, declared: dict[str, decl.Declared]) -> Subject:
    """The Subject of a built model, every fact that nothing declared inferred (``tfcheck.model.facts.inference``);
    a model with no forward of its own but encode/decode methods is called through a composed forward
    (``tfcheck.model.build.composed``), stated first among the assumptions."""
    loaded, composition = compose(loaded)
    subject = Subject(loaded, declared, assumptions=[composition] if composition else [])
    infer_facts(subject)
    return subject
