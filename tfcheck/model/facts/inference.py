"""Settling the facts of a model without running it: each rule reads declarations, then the config, then the
forward signature and the modules, and records where the fact came from (the report's assumptions).

Nothing here looks at the behaviour a check measures: causality, for one, is never guessed from outputs.
Facts that need a forward (the output's selection, a tutorial-style mask layout) are left for the first
forward; collection decides its items from these facts alone.
"""
from __future__ import annotations

import functools
from typing import Any

import torch.nn as nn

from tfcheck.errors import SpecError
from tfcheck.model.build.names import (
    CAUSAL_MASK_ARGS,
    CONFIG_NAMES,
    GENERATION_SETTINGS,
    MASK_ARGS,
)
from tfcheck.model.build.spec import import_target, resolve_attr, split_spec
from tfcheck.model.facts import declarations as decl
from tfcheck.model.facts.call_plan import plan_calls
from tfcheck.model.facts.causal_source import causal_source
from tfcheck.model.facts.facts import AUTO
from tfcheck.model.facts.hf_kind import kind_from_hf_class, kind_from_hf_config
from tfcheck.model.facts.label_convention import settle as settle_label_shift
from tfcheck.model.facts.lengths import min_length
from tfcheck.model.facts.structure import (
    causal_attribute,
    first_embedding,
    first_linear,
    first_width,
    forward_params,
    library_of,
    takes_any_keyword,
    takes_features,
    takes_varargs,
    torch_batch_first,
)
from tfcheck.model.facts.targets import decoder_input, target_embedding
from tfcheck.model.facts.under_test import ModelUnderTest
from tfcheck.report.report import Assumption


def infer_facts(subject: ModelUnderTest) -> None:
    """Settle every fact of ``subject`` that nothing declared, each with its source."""
    _Resolver(subject).resolve_all()


class _Resolver:
    """Resolves each fact from declarations, then config, then structure, recording every source."""

    def __init__(self, subject: ModelUnderTest):
        self.s = subject
        self.model = subject.model
        self.config = getattr(self.model, "config", None)
        self.params = forward_params(self.model)

    def set(self, key: str, value: Any, source: str, show: bool = True) -> None:
        self.s.facts.set(key, value, source)
        if show:
            self.s.assumptions.append(Assumption(key, value if not callable(value) else callable_name(value), source))

    def declared(self, key: str) -> bool:
        d = self.s.declared.get(key)
        if d is None:
            return False
        value = d.value
        if key in ("inputs", "schedule", "extra") and isinstance(value, str):
            target, attr = split_spec(value)
            value = resolve_attr(import_target(target), target, attr)
        self.set(key, value, d.source, show=key not in ("accept", "kwargs"))
        return True

    def resolve_all(self) -> None:
        if self.s.loaded.filled:
            self.s.assumptions.append(Assumption(
                "constructor arguments", {k: brief(v) for k, v in self.s.loaded.filled.items()},
                "filled by tfcheck with small values (override with the 'kwargs' declaration)"))
        for key in ("accept", "inputs", "extra"):
            self.declared(key)
        # Training and precision facts come only from declarations: nothing in a model says them.
        for key in ("schedule", "warmup_steps", "total_steps", "lr", "precision", "train_steps"):
            self.declared(key)
        for key in ("probe_len", "length_multiple", "budget_s", "budget_overrun", "memory_budget", "device"):
            self.declared(key)
        self.kind()
        self.from_config("vocab_size")
        self.from_config("output_vocab_size", fallback=self.s.facts.vocab_size)
        self.target_vocab()
        self.padded_vocab()
        self.from_config("pad_id", embedding_attr="padding_idx")
        self.from_config("max_len")
        self.positions_after_pad()
        self.from_config("d_model", embedding_attr="embedding_dim")
        self.min_len()
        self.causal()
        settle_label_shift(self.s)
        self.mask()
        self.causal_mask()
        self.declared_head()
        self.layout()
        self.call_plan()
        self.returns()
        self.output()

    def kind(self) -> None:
        if self.declared("kind"):
            return
        for rule in (self._kind_from_hf_config, self._kind_from_hf_class, self._kind_from_torch_class,
                     self._kind_from_signature, self._kind_from_causal_attribute, self._kind_from_generate):
            if (found := rule()) is not None:
                return self.set("kind", *found)
        if self.config is not None and getattr(self.config, "model_type", None):
            return self.set("kind", None, f"unknown: config.model_type = {self.config.model_type!r} is no family "
                            "tfcheck knows and the class name says nothing, so outputs of width d_model or vocab_size "
                            "are both accepted. Declare kind=decoder for a causal LM, kind=encoder for a bidirectional "
                            "one (e.g. --set kind=decoder)")
        self.set("kind", None, "unknown: nothing declares it, so outputs of width d_model or vocab_size are "
                 "both accepted. Declare kind=encoder|decoder|seq2seq|attention")

    def _kind_from_hf_config(self) -> tuple[str, str] | None:
        return kind_from_hf_config(self.config, self.s.loaded.set_by_tfcheck)

    def _kind_from_hf_class(self) -> tuple[str, str] | None:
        return kind_from_hf_class(self.model, self.config)

    def _kind_from_causal_attribute(self) -> tuple[str, str] | None:
        """A bool ``causal`` on the model or its layer stack (x-transformers' Decoder / Encoder set it)."""
        if (found := causal_attribute(self.model)) is None:
            return None
        return ("decoder" if found[1] else "encoder"), f"{found[0]} = {found[1]}"

    def _kind_from_torch_class(self) -> tuple[str, str] | None:
        if isinstance(self.model, (nn.TransformerEncoder, nn.TransformerEncoderLayer)):
            return "encoder", (f"torch.nn.{type(self.model).__name__}: it attends both ways unless its caller "
                               "passes mask= or is_causal=True, and tfcheck calls it with neither")
        return None

    def _kind_from_generate(self) -> tuple[str, str] | None:
        """nanoGPT and minGPT: a token model with its own generate() loop is an autoregressive LM. (Hugging
        Face's generate comes with every generative head, so their configs decide instead.)"""
        if library_of(self.model) == "transformers" or not callable(getattr(self.model, "generate", None)) \
                or first_embedding(self.model) is None:
            return None
        return "decoder", (f"{type(self.model).__name__} has a generate() method (an autoregressive LM, as "
                           "nanoGPT's GPT). Declare kind=encoder if not")

    def _kind_from_signature(self) -> tuple[str, str] | None:
        names = set(self.params)
        if {"query", "key", "value"} <= names:
            return "attention", "forward takes (query, key, value)"
        found = decoder_input(self.model, self.params)
        return ("seq2seq", found[1]) if found is not None else None

    def from_config(self, key: str, embedding_attr: str | None = None, fallback: Any = None,
                    show: bool = True) -> None:
        if key in self.s.declared:
            self.declared(key)
            return
        # x-transformers keeps the width on the layer stack it wraps (TransformerWrapper.attn_layers.dim).
        holders = ((self.config, "config"), (self.model, "model"),
                   (getattr(self.model, "attn_layers", None), "model.attn_layers"))
        for holder, prefix in holders:
            if holder is None:
                continue
            for name in CONFIG_NAMES[key]:
                if name in GENERATION_SETTINGS and holder is self.config and library_of(self.model) == "transformers":
                    continue  # a Hugging Face config's max_length is how long generate() runs, not a capacity
                value = getattr(holder, name, None)
                # Sizes are positive and ids non-negative: XLNet's max_position_embeddings is -1 ("no limit").
                if isinstance(value, int) and not isinstance(value, bool) and value >= (0 if key == "pad_id" else 1):
                    return self.set(key, value, f"{prefix}.{name}", show=show)
        if embedding_attr:
            found = first_embedding(self.model)
            if found is not None and getattr(found[1], embedding_attr) is not None:
                return self.set(key, getattr(found[1], embedding_attr),
                                f"nn.Embedding '{found[0]}'.{embedding_attr}")
        if key == "d_model" and (width := first_width(self.model)) is not None:
            return self.set(key, width[1], width[0])
        if key == "d_model" and self.s.facts.kind == "attention" and (linear := first_linear(self.model)):
            return self.set(key, linear[1].in_features, f"nn.Linear '{linear[0]}'.in_features (the first "
                            "projection of the query)")
        if key == "vocab_size":
            found = first_embedding(self.model)
            if found is not None:
                return self.set(key, found[1].num_embeddings, f"nn.Embedding '{found[0]}'.num_embeddings")
        if fallback is not None:
            return self.set(key, fallback, "same as vocab_size", show=False)
        self.set(key, None, "unknown", show=key in ("vocab_size", "d_model"))

    def target_vocab(self) -> None:
        """A seq2seq model's target vocabulary, its decoder input drawn below it: the config's (stated where it differs
        from vocab_size), else, where no config names vocab_size (one for both sides), the decoder side's token
        embedding (targets.target_embedding; the trial forward confirms it, trial.target_vocab), else vocab_size.
        Its logits are as wide, unless the config says otherwise."""
        facts = self.s.facts
        if facts.kind != "seq2seq":
            return
        self.from_config("target_vocab_size", show=False)
        if facts.target_vocab_size not in (None, facts.vocab_size):
            self.s.assumptions.append(Assumption("target_vocab_size", facts.target_vocab_size,
                                                 facts.sources["target_vocab_size"]))
        found = target_embedding(self.model) if facts.sources["vocab_size"].startswith("nn.Embedding") else None
        if facts.target_vocab_size is None and found is not None and found[1].num_embeddings != facts.vocab_size:
            self.set("target_vocab_size", found[1].num_embeddings, f"nn.Embedding '{found[0]}'.num_embeddings (the "
                     "decoder side's token embedding)")
            if facts.sources.get("output_vocab_size") == "same as vocab_size":
                self.set("output_vocab_size", facts.target_vocab_size, "same as target_vocab_size (the decoder "
                         "predicts target tokens)")
        elif facts.target_vocab_size is None:
            self.set("target_vocab_size", facts.vocab_size, "same as vocab_size", show=False)

    def padded_vocab(self) -> None:
        """A padded vocabulary the config states, shown where it is wider than the output vocabulary."""
        self.from_config("padded_vocab_size", show=False)
        padded, vocab = self.s.facts.padded_vocab_size, self.s.facts.output_vocab_size
        if padded is not None and vocab is not None and padded > vocab:
            where = self.s.facts.sources.get("padded_vocab_size")
            self.s.assumptions.append(Assumption("padded_vocab_size", padded, f"{where} (the vocabulary padded for "
                                                 "speed): logits this wide are accepted"))

    def min_len(self) -> None:  # stated where above 1 (tfcheck.model.facts.lengths.min_length)
        shortest, where = min_length(self.s)
        if shortest > 1:
            self.s.assumptions.append(Assumption("min_len", shortest, f"{where}; the shape probes start there"))

    def positions_after_pad(self) -> None:
        """A position table with a padding_idx numbers real positions from padding_idx + 1 (RoBERTa and its
        kin), so a table of max_position_embeddings rows holds that many fewer positions."""
        max_len = self.s.facts.max_len
        if max_len is None or "max_len" in self.s.declared:
            return
        for name, module in self.model.named_modules():
            if (isinstance(module, nn.Embedding) and name.split(".")[-1] in ("position_embeddings", "embed_positions")
                    and module.num_embeddings == max_len and module.padding_idx is not None):
                usable, read_from = max_len - module.padding_idx - 1, self.s.source_of("max_len")
                self.s.assumptions[:] = [a for a in self.s.assumptions if a.key != "max_len"]
                return self.set("max_len", usable, f"{read_from} - {module.padding_idx} - 1: nn.Embedding '{name}' "
                                f"has padding_idx={module.padding_idx}, so positions count from "
                                f"{module.padding_idx + 1}")

    def causal(self) -> None:
        if self.declared("causal"):
            return
        found = causal_attribute(self.model)
        if found is not None and "kind" not in self.s.declared:  # a declared kind outranks what the model says
            return self.set("causal", found[1], found[0])
        kind = self.s.facts.kind
        if kind in ("decoder", "seq2seq"):
            return self.set("causal", True, f"kind={kind}" + (" (the decoder side)" if kind == "seq2seq" else ""))
        if kind == "encoder":
            return self.set("causal", False, "kind=encoder")
        read = causal_source(self.model)
        if read.causal is not None:
            return self.set("causal", read.causal, f"{read.where} (declare causal={str(not read.causal).lower()} "
                            "if not)")
        self.set("causal", None, f"unknown ({read.where}): declare causal=true or causal=false")

    def mask(self) -> None:
        if self.declared("mask"):
            argument = self.s.facts.mask.argument if self.s.facts.mask is not None else None
            if argument is not None and self.params and argument not in self.params \
                    and not takes_any_keyword(self.model):
                raise SpecError(
                    f"mask={argument}:... ({self.s.declared['mask'].source}) names no argument of "
                    f"{type(self.model).__name__}.forward, which takes {', '.join(self.params)}: declare the "
                    "argument that takes the padding mask, mask=internal if forward builds it from pad_id, or "
                    "mask=none")
            return
        for name in self.params:
            if name in ("attention_mask",):
                return self.set("mask", decl.MaskSpec(name, "keep"), "forward argument named attention_mask "
                                "(Hugging Face convention: 1 = real token, given as int64 as tokenizers return it)")
            if name in ("src_key_padding_mask", "key_padding_mask"):
                return self.set("mask", decl.MaskSpec(name, "pad"),
                                f"forward argument named {name} (torch convention: True = padding)")
        if "mask" in self.params and library_of(self.model) == "x_transformers":
            return self.set("mask", decl.MaskSpec("mask", "keep"), "x-transformers' forward(x, mask=None): a bool "
                            "keep mask (True = attend)")
        for name in self.params:
            if name in MASK_ARGS:
                return self.set("mask", decl.MaskSpec(name, "keep"),
                                f"forward argument named {name}; convention unknown, assumed keep "
                                f"(True = real token, given as bool, laid out (batch, length) unless that raises). "
                                f"Declare mask={name}:pad or {name}:additive if not")
        self.set("mask", decl.MaskSpec(None, "none"), "no mask argument in forward")

    def declared_head(self) -> None:
        """A declared head must name a submodule: refused before any check runs (its rule is the trial's,
        tfcheck.model.trial.head)."""
        declared = self.s.declared.get("head")
        if declared is None:
            return
        try:
            self.model.get_submodule(str(declared.value))
        except AttributeError:
            children = ", ".join(name for name, _ in self.model.named_children())
            raise SpecError(f"head={declared.value} ({declared.source}) names no submodule of "
                            f"{type(self.model).__name__} (its submodules: {children or 'none'}); declare the dotted "
                            "attribute name of the module that maps forward's output to logits") from None

    def causal_mask(self) -> None:
        """The forward argument that takes the look-ahead mask its caller builds: declared, or named so
        (names.CAUSAL_MASK_ARGS; a generic mask / attn_mask never). Its convention, and whether the model builds
        its own instead, are read in the trial forward (tfcheck.model.trial.caller_masks)."""
        if self.declared("causal_mask"):
            argument = self.s.facts.causal_mask.argument if self.s.facts.causal_mask is not None else None
            if argument is not None and self.params and argument not in self.params \
                    and not takes_any_keyword(self.model):
                raise SpecError(
                    f"causal_mask={argument} ({self.s.declared['causal_mask'].source}) names no argument of "
                    f"{type(self.model).__name__}.forward, which takes {', '.join(self.params)}: declare the "
                    "argument that takes the look-ahead mask its caller builds, or causal_mask=none")
            return
        if self.s.facts.kind == "attention" or self.s.facts.inputs is not None:
            return
        for name in self.params:
            if name in CAUSAL_MASK_ARGS:
                return self.set("causal_mask", decl.MaskSpec(name, ""), f"forward argument named {name}: its "
                                "caller builds the look-ahead mask", show=False)

    def layout(self) -> None:
        """Whether the model takes (length, batch, ...): declared, or said by torch's own Transformer modules'
        batch_first. (The trial forward may read it from the model's length-derived objects:
        tfcheck.model.trial.sequence_layout.)"""
        declared = self.s.declared.get("layout")
        if declared is not None:
            self.s.facts.set("batch_first", declared.value == "batch_first", declared.source)
            self.s.assumptions.append(Assumption(
                "layout", "(batch, length, ...)" if self.s.facts.batch_first else "(length, batch, ...)",
                f"{declared.source}; tfcheck transposes the token ids, features and the output it reads, and "
                "reports shapes as (batch, length, ...)" if not self.s.facts.batch_first else declared.source))
            return
        found = torch_batch_first(self.model)
        if found is None:
            return
        batch_first, where = found
        self.s.facts.set("batch_first", batch_first, where)
        if not batch_first:
            self.s.assumptions.append(Assumption(
                "layout", "(length, batch, d_model)", f"{where} = False (torch's default); tfcheck transposes the "
                "inputs it builds and the output it reads, and reports shapes as (batch, length, ...)"))

    def returns(self) -> None:
        """Logits or hidden states, where the model says so itself (x-transformers' ``to_logits`` head)."""
        if not hasattr(self.model, "to_logits") or "output" in self.s.declared:
            return
        head = self.model.to_logits
        if head is None:
            self.set("returns", "hidden states", "model.to_logits is None (no LM head)")
        elif isinstance(head, nn.Module):
            self.set("returns", "logits", f"model.to_logits is a {type(head).__name__} (an LM head)")

    def call_plan(self) -> None:
        """Which forward parameters get which probe tensor: (name or None for positional, role)."""
        if self.s.facts.inputs is not None or self.s.facts.kind == "attention":
            self.s.facts.call_plan = []
            if self.s.facts.kind == "attention" and self.s.facts.d_model is None:
                raise SpecError(f"{self.s.spec} is an attention module but its width is unknown: declare d_model=INT")
            return
        features = takes_features(self.model)
        if features and self.s.facts.d_model is None:
            raise SpecError(
                f"{self.s.spec} has no nn.Embedding, so it takes features, but its width is unknown: declare "
                "d_model=INT, or declare inputs=module:factory to build its inputs")
        self.s.facts.takes_features = features
        if features:
            self.s.assumptions.append(Assumption(
                "inputs", "float features (batch, length, d_model)",
                "the model has no nn.Embedding (declare inputs=module:factory if not)"))
        plan = plan_calls(self.s, self.params, features)
        if not plan and takes_varargs(self.model):
            # forward(*args): the inputs go in positionally, as a wrapper would pass them on.
            plan.append((None, "features" if features else "tokens"))
        if not plan:
            raise SpecError(f"{self.s.spec}.forward takes no arguments; declare inputs=module:factory")
        self.s.facts.call_plan = plan

    def output(self) -> None:
        if self.declared("output"):
            return
        self.set("output", AUTO, "inferred from the first forward's return value", show=False)


def callable_name(fn: Any) -> str:
    """A declared factory by its name, never a repr with a memory address (the same in every xdist worker)."""
    if isinstance(fn, functools.partial):
        args = [repr(a) for a in fn.args] + [f"{k}={v!r}" for k, v in fn.keywords.items()]
        return f"{callable_name(fn.func)}({', '.join(args)})"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}:{name}" if module else name


def brief(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool, type(None))) else type(v).__name__ + "(small sizes)"
