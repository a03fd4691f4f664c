"""The subject: a model plus everything tfcheck knows about it, each fact with its source.

Facts come from declarations first, then from the model's config and forward signature. Nothing here
looks at the behaviour a check measures: causality, for one, is never guessed from outputs.
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from tfcheck.model import declarations as decl
from tfcheck.errors import SpecError, UsageError
from tfcheck.report.report import Assumption
from tfcheck.model.facts import Facts
from tfcheck.model.spec import Loaded

#: Longest probe tfcheck runs, whatever max_len a config claims (never 131072 because a config says so).
PROBE_LENGTH_CAP = 64
#: The default probe: batch and length distinct from each other and from every small hyper-parameter.
PROBE_BATCH, PROBE_LENGTH = 3, 7
#: The target length of seq2seq probes, distinct from the source length.
TARGET_LENGTH_DELTA = -2

_CONFIG_NAMES = {
    "vocab_size": ("vocab_size", "n_vocab", "ntoken", "num_tokens", "src_vocab_size"),
    "output_vocab_size": ("tgt_vocab_size", "vocab_size", "n_vocab", "ntoken", "num_tokens"),
    "pad_id": ("pad_id", "pad_token_id", "pad_idx", "padding_idx"),
    "max_len": ("max_len", "max_position_embeddings", "n_positions", "block_size", "max_seq_len",
                "max_seq_length", "context_length", "n_ctx"),
    "d_model": ("d_model", "hidden_size", "n_embd", "dim", "embed_dim", "model_dim"),
}
#: Hugging Face model families whose causality their config's model_type states: bidirectional encoders
#: and decoder-only LMs. (``is_decoder`` and ``is_encoder_decoder`` are read first: a BERT built as a decoder
#: says so there.)
_HF_FAMILIES = {
    **dict.fromkeys(("bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta",
                     "camembert", "mpnet", "modernbert", "ernie", "esm", "longformer", "megatron-bert",
                     # XLNet attends both ways unless given a perm_mask (its *LMHeadModel is no causal LM)
                     "xlnet"), "encoder"),
    **dict.fromkeys(("gpt2", "openai-gpt", "gpt_neo", "gpt_neox", "gptj", "gpt_bigcode", "llama", "mistral", "mixtral",
                     "opt", "bloom", "falcon", "qwen2", "qwen3", "phi", "phi3", "gemma", "gemma2", "gemma3_text",
                     "codegen", "starcoder2", "olmo", "olmo2", "stablelm", "mpt"), "decoder"),
}
_TOKEN_ARGS = ("input_ids", "tokens", "idx", "src", "x", "input", "inputs", "ids", "src_tokens", "token_ids")
_TARGET_ARGS = ("tgt", "trg", "decoder_input_ids", "tgt_tokens", "target_ids", "dec_input")
_MASK_ARGS = ("mask", "attention_mask", "src_mask", "key_padding_mask", "src_key_padding_mask", "pad_mask",
              "padding_mask")
#: Required forward arguments that take the decoder's causal (look-ahead) mask, built by the caller in the
#: tutorial style: forward(src, tgt, src_mask, tgt_mask).
_CAUSAL_MASK_ARGS = ("tgt_mask", "trg_mask", "causal_mask", "look_ahead_mask", "subsequent_mask")
#: Hugging Face class-name endings that say the kind (a head decides it: a masked LM reads both ways).
_HF_CLASS_KINDS = (("ForCausalLM", "decoder"), ("LMHeadModel", "decoder"), ("ForMaskedLM", "encoder"),
                   ("EncoderModel", "encoder"))
#: torch.nn modules whose own attribute says their layout: (batch, length, d) or, torch's default, (length, batch, d).
_TORCH_LAYOUT_CLASSES = (nn.MultiheadAttention, nn.Transformer, nn.TransformerEncoder, nn.TransformerDecoder,
                         nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


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

    @property
    def model(self) -> nn.Module:
        return self.loaded.model

    @property
    def spec(self) -> str:
        return self.loaded.spec

    def source_of(self, key: str) -> str | None:
        """Where the fact ``key`` came from (a declaration, the config, a rule), as the report shows it."""
        return next((a.source for a in self.assumptions if a.key == key), None)

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

    def probe_lengths(self) -> tuple[int, ...]:
        """Lengths that shape checks visit: 1, the default probe, and the capped maximum."""
        return tuple(sorted({1, self.probe_length(), self.length_cap()}))

    def length_cap(self) -> int:
        """The longest probe: max_len, but never over PROBE_LENGTH_CAP unless probe_len asks for more."""
        cap = max(PROBE_LENGTH_CAP, self.facts.probe_len or 0)
        return min(self.facts.max_len or cap, cap)

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
        return tuple(min(n, cap) for n in defaults)

    # ----- inputs and outputs --------------------------------------------------------------------
    def make_inputs(self, batch: int, length: int, seed: int = 0) -> tuple[tuple, dict]:
        """Inputs for one forward at (batch, length), from a private generator (global RNG untouched)."""
        factory = self.facts.inputs
        if factory is not None:
            return _on_device(self.device, *_call_inputs_factory(factory, batch, length, self.spec))
        gen = torch.Generator().manual_seed(seed)
        primary = self.random_primary(batch, length, gen)
        target = None
        if self.takes_target:
            target = self.random_primary(batch, max(1, length + TARGET_LENGTH_DELTA), gen)
        return self.inputs_for(primary, target)

    def random_primary(self, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
        """Random token ids (never the pad id), or features for models that take them."""
        if self.kind == "attention" or self.facts.takes_features:
            return torch.randn(batch, length, self.facts.d_model, generator=gen).to(self.device)
        return self.random_tokens(batch, length, gen)

    def random_tokens(self, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
        vocab = self.facts.vocab_size
        pad = self.facts.pad_id
        # Draw real tokens only: ids from a vocabulary with the pad id taken out.
        high = vocab - 1 if pad is not None and 0 <= pad < vocab else vocab
        ids = torch.randint(0, max(high, 1), (batch, length), generator=gen)
        if pad is not None and 0 <= pad < vocab:
            ids = ids + (ids >= pad).long()
        return ids.to(self.device)

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
        if self.kind == "attention":
            return (primary, primary, primary), {}
        mask: decl.MaskSpec = self.facts.mask
        if keep is None:
            keep = torch.ones(primary.shape[:2], dtype=torch.bool, device=primary.device)
        args, kwargs = [], {}
        for name, role in self.facts.call_plan:
            value = self._plan_value(role, primary, target, keep)
            if name is None:
                args.append(value)
            else:
                kwargs[name] = value
        mask_in_plan = any(role == "mask" for _, role in self.facts.call_plan)
        if mask.argument is not None and not mask_in_plan and not bool(keep.all()):
            kwargs[mask.argument] = self.mask_value(keep)
        return tuple(args), kwargs

    def _plan_value(self, role: str, primary: torch.Tensor, target: torch.Tensor | None,
                    keep: torch.Tensor) -> torch.Tensor:
        if role in ("tokens", "lm_targets", "features"):
            return primary
        if role in ("causal_mask", "torch_causal_mask"):
            decoder_input = target if target is not None else primary
            return self.causal_mask_value(decoder_input.shape[0], decoder_input.shape[1], decoder_input.device,
                                          torch_convention=role == "torch_causal_mask")
        if role.startswith("target"):
            if target is None:
                raise UsageError(f"{self.spec} takes a target input; give inputs_for() a target tensor")
            return target
        return self.mask_value(keep)  # the required mask argument

    def to_model_layout(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Forward arguments as the model takes them: for a (length, batch, d) model every 3-D float argument
        (a sequence of features; masks are 2-D) transposed. The identity for every other model."""
        if self.facts.batch_first is not False:
            return args, kwargs

        def laid_out(v: Any) -> Any:
            return v.transpose(0, 1) if isinstance(v, torch.Tensor) and v.dim() == 3 and v.is_floating_point() else v
        return tuple(laid_out(v) for v in args), {k: laid_out(v) for k, v in kwargs.items()}

    def mask_value(self, keep: torch.Tensor) -> torch.Tensor:
        """A (batch, length) keep mask (True = real token) in the model's mask convention and layout."""
        value = _in_convention(keep, self.facts.mask)
        layout = self.mask_layout
        if layout == "b1s":
            return value[:, None, :]
        if layout == "b11s":
            return value[:, None, None, :]
        return value

    def causal_mask_value(self, batch: int, length: int, device: torch.device,
                          torch_convention: bool = False) -> torch.Tensor:
        """The decoder's causal mask as a caller builds it: torch's float (length, length) mask with -inf
        above the diagonal, or the tutorial's keep mask (True on and below the diagonal) in the padding mask's
        convention and layout ((length, length), (batch, length, length) or (batch, 1, length, length))."""
        if torch_convention:
            return nn.Transformer.generate_square_subsequent_mask(length, device=device)
        allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        value = _in_convention(allowed, self.facts.mask)
        layout = self.mask_layout
        if layout == "b1s":
            return value.expand(batch, length, length)
        if layout == "b11s":
            return value.expand(batch, 1, length, length)
        return value

    @property
    def mask_layout(self) -> str:
        return self.facts.mask.layout or "bs"

    def mask_layouts_to_try(self) -> tuple[str, ...]:
        """The other layouts of a mask the forward requires, when nothing declares its layout: the tutorial
        style takes its masks already laid out for the attention scores, (b, 1, s) or (b, 1, 1, s)."""
        mask = self.facts.mask
        required = any(role in ("mask", "causal_mask") for _, role in self.facts.call_plan or ())
        if mask is None or mask.layout is not None or not required or self.facts.inputs is not None:
            return ()
        return ("b1s", "b11s")

    def set_mask_layout(self, layout: str | None) -> None:
        self.facts.mask = dataclasses.replace(self.facts.mask, layout=layout)

    def adopt_mask_layout(self, layout: str, first_error: str) -> None:
        """Keep a layout that ran after the (batch, length) one raised, and say so among the assumptions."""
        self.set_mask_layout(layout)
        mask = self.facts.mask
        self.assumptions.append(Assumption(
            "mask layout", f"{layout} {decl.MASK_LAYOUTS[layout]}",
            f"the forward raised with (batch, length) masks ({first_error}) and ran with these; declare "
            f"mask={mask.argument or 'ARG'}:{mask.convention if mask.argument else 'keep'}:{layout} to state it"))

    @property
    def device(self) -> torch.device:
        for t in self.model.parameters():
            return t.device
        for t in self.model.buffers():
            return t.device
        return torch.device("cpu")

    def extract_output(self, raw: Any) -> torch.Tensor:
        """The output tensor of a forward's return value, as declared or inferred, (batch, length, ...)."""
        how = self.facts.output
        value = _select_output(raw, how)
        if not isinstance(value, torch.Tensor):
            raise UsageError(
                f"the output selected by output={how!r} is a {type(value).__name__}, not a tensor. Declare "
                "'output' as the tuple index or the key/attribute of the output tensor (e.g. output=logits)."
            )
        if self.facts.batch_first is False and value.dim() >= 2:
            return value.transpose(0, 1)
        return value

    def expected_last_dims(self) -> tuple[tuple[int, ...], str]:
        """The last dimensions the output may have (empty: any), and why."""
        named = self.facts.output
        d_model, vocab = self.facts.d_model, self.facts.output_vocab_size
        if named in ("logits", "lm_logits"):
            return _known(vocab), "vocab_size (the output is named logits)"
        if named in ("last_hidden_state", "hidden_states", "encoder_last_hidden_state"):
            return _known(d_model), "d_model (the output is named last_hidden_state)"
        if self.facts.returns == "logits":
            return _known(vocab), f"vocab_size ({self.source_of('returns')})"
        if self.facts.returns == "hidden states":
            return _known(d_model), f"d_model ({self.source_of('returns')})"
        if self.facts.takes_features:
            return _known(d_model), "d_model (the model takes features, not token ids)"
        if self.kind in ("decoder", "seq2seq"):
            return _known(vocab), f"vocab_size (kind={self.kind} outputs logits)"
        if self.kind in ("encoder", "attention"):
            return _known(d_model), f"d_model (kind={self.kind} outputs hidden states)"
        # Unknown kind: hidden states and logits are both legitimate; judging one would be a false alarm.
        return _known(d_model, vocab), "d_model or vocab_size (kind unknown; declare kind to pin it)"


def _in_convention(keep: torch.Tensor, mask: decl.MaskSpec) -> torch.Tensor:
    """A bool keep tensor (True = may attend) as the mask argument takes it: Hugging Face's attention_mask as
    int64 1/0 (what tokenizers return), other keep masks as bool (what (x != pad) gives)."""
    if mask.convention == "pad":
        return ~keep
    if mask.convention == "additive":
        return torch.zeros(keep.shape, device=keep.device).masked_fill(~keep, float("-inf"))
    return keep.long() if mask.argument == "attention_mask" else keep


def _callable_name(fn: Any) -> str:
    """A declared factory as the report shows it: its name, never a repr with a memory address (the report
    must be the same in every process, for one, in each pytest-xdist worker)."""
    import functools

    if isinstance(fn, functools.partial):
        args = [repr(a) for a in fn.args] + [f"{k}={v!r}" for k, v in fn.keywords.items()]
        return f"{_callable_name(fn.func)}({', '.join(args)})"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}:{name}" if module else name


def _known(*values: int | None) -> tuple[int, ...]:
    return tuple(dict.fromkeys(v for v in values if v is not None))


def _on_device(device: torch.device, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A factory's tensors on the model's device (the battery may run on a declared device the factory
    does not know about)."""
    def move(v: Any) -> Any:
        return v.to(device) if isinstance(v, torch.Tensor) and v.device != device else v

    return tuple(move(v) for v in args), {k: move(v) for k, v in kwargs.items()}


def _call_inputs_factory(factory: Any, batch: int, length: int, spec: str) -> tuple[tuple, dict]:
    result = factory(batch, length)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        raise UsageError(
            f"the 'inputs' factory for {spec} returned {type(result).__name__}; it must return (args, kwargs), "
            "e.g. return (images,), {}"
        )
    return tuple(result[0]), result[1]


def _select_output(raw: Any, how: str | int) -> Any:
    if how == "tensor":
        return raw
    if isinstance(how, int):
        return raw[how]
    if isinstance(raw, dict) and how in raw:
        return raw[how]
    if hasattr(raw, how):
        return getattr(raw, how)
    raise UsageError(f"the model's output has no key or attribute {how!r}; declare 'output' to select another")


# ----- building a subject ---------------------------------------------------------------------------

def build_subject(loaded: Loaded, declared: dict[str, decl.Declared]) -> Subject:
    subject = Subject(loaded, declared)
    resolver = _Resolver(subject)
    resolver.resolve_all()
    return subject


class _Resolver:
    """Resolves each fact from declarations, then config, then structure, recording every source."""

    def __init__(self, subject: Subject):
        self.s = subject
        self.model = subject.model
        self.config = getattr(self.model, "config", None)
        self.params = forward_params(self.model)

    def set(self, key: str, value: Any, source: str, show: bool = True) -> None:
        self.s.facts.set(key, value, source)
        if show:
            self.s.assumptions.append(Assumption(key, value if not callable(value) else _callable_name(value), source))

    def declared(self, key: str) -> bool:
        d = self.s.declared.get(key)
        if d is None:
            return False
        value = d.value
        if key in ("inputs", "schedule") and isinstance(value, str):
            from tfcheck.model.spec import import_target, resolve_attr, split_spec

            target, attr = split_spec(value)
            value = resolve_attr(import_target(target), target, attr)
        self.set(key, value, d.source, show=key not in ("accept", "kwargs"))
        return True

    def resolve_all(self) -> None:
        if self.s.loaded.filled:
            self.s.assumptions.append(Assumption(
                "constructor arguments", {k: _brief(v) for k, v in self.s.loaded.filled.items()},
                "filled by tfcheck with small values (override with the 'kwargs' declaration)"))
        for key in ("accept", "inputs"):
            self.declared(key)
        # Training and precision facts come only from declarations: nothing in a model says them.
        for key in ("schedule", "warmup_steps", "total_steps", "lr", "precision", "train_steps"):
            self.declared(key)
        for key in ("probe_len", "budget_s", "device"):  # run settings, declared or defaulted where used
            self.declared(key)
        self.kind()
        self.from_config("vocab_size")
        self.from_config("output_vocab_size", fallback=self.s.facts.vocab_size)
        self.from_config("pad_id", embedding_attr="padding_idx")
        self.from_config("max_len")
        self.positions_after_pad()
        self.from_config("d_model", embedding_attr="embedding_dim")
        self.causal()
        self.mask()
        self.layout()
        self.call_plan()
        self.returns()
        self.output()

    def kind(self) -> None:
        if self.declared("kind"):
            return
        for rule in (self._kind_from_hf_config, self._kind_from_hf_class, self._kind_from_torch_class,
                     self._kind_from_signature, self._kind_from_causal_attribute, self._kind_from_generate):
            found = rule()
            if found is not None:
                return self.set("kind", *found)
        if self.config is not None and getattr(self.config, "model_type", None):
            return self.set("kind", None, f"unknown: config.model_type = {self.config.model_type!r} is no family "
                            "tfcheck knows and the class name says nothing, so outputs of width d_model or vocab_size "
                            "are both accepted. Declare kind=decoder for a causal LM, kind=encoder for a bidirectional "
                            "one (e.g. --set kind=decoder)")
        self.set("kind", None, "unknown: nothing declares it, so outputs of width d_model or vocab_size are "
                 "both accepted. Declare kind=encoder|decoder|seq2seq|attention")

    def _kind_from_hf_config(self) -> tuple[str, str] | None:
        cfg = self.config
        if cfg is None:
            return None
        if getattr(cfg, "is_encoder_decoder", False) is True:
            return "seq2seq", "config.is_encoder_decoder = True"
        if getattr(cfg, "is_decoder", False) is True:
            return "decoder", "config.is_decoder = True"
        family = _HF_FAMILIES.get(getattr(cfg, "model_type", None))
        if family is not None:
            return family, f"config.model_type = {cfg.model_type!r} (model family: {family})"
        return None

    def _kind_from_hf_class(self) -> tuple[str, str] | None:
        """A Hugging Face model of a family tfcheck does not list: its class name, the config's
        architectures, then the classes its modeling module defines (a masked-LM head means a bidirectional
        family; a causal-LM head and no masked-LM one, a decoder-only family)."""
        if self.config is None:
            return None
        cls = type(self.model).__name__
        for suffix, kind in _HF_CLASS_KINDS:
            if cls.endswith(suffix):
                return kind, f"Hugging Face class {cls} (*{suffix}: {kind}) with a config"
        for name in getattr(self.config, "architectures", None) or ():
            for suffix, kind in _HF_CLASS_KINDS:
                if isinstance(name, str) and name.endswith(suffix):
                    return kind, f"config.architectures names {name} (*{suffix}: {kind})"
        module = inspect.getmodule(type(self.model))
        if module is None or not module.__name__.startswith("transformers."):
            return None
        heads = [n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__]
        masked = sorted(n for n in heads if n.endswith("ForMaskedLM"))
        causal = sorted(n for n in heads if n.endswith(("ForCausalLM", "LMHeadModel")))
        if masked:
            return "encoder", (f"{module.__name__} defines the masked-LM head {masked[0]} (a bidirectional family; "
                               "config.is_decoder is not set)")
        if causal:
            return "decoder", f"{module.__name__} defines the causal-LM head {causal[0]} and no masked-LM head"
        return None

    def _kind_from_causal_attribute(self) -> tuple[str, str] | None:
        """A bool ``causal`` on the model or its layer stack (x-transformers' Decoder / Encoder set it)."""
        found = _causal_attribute(self.model)
        if found is None:
            return None
        where, causal = found
        return ("decoder", f"{where} = True") if causal else ("encoder", f"{where} = False")

    def _kind_from_torch_class(self) -> tuple[str, str] | None:
        if isinstance(self.model, (nn.TransformerEncoder, nn.TransformerEncoderLayer)):
            return "encoder", (f"torch.nn.{type(self.model).__name__}: it attends both ways unless its caller "
                               "passes mask= or is_causal=True, and tfcheck calls it with neither")
        return None

    def _kind_from_generate(self) -> tuple[str, str] | None:
        """nanoGPT and minGPT: a token model with its own generate() loop is an autoregressive LM. (Hugging
        Face's generate comes with every generative head, so their configs decide instead.)"""
        if _library(self.model) == "transformers" or not callable(getattr(self.model, "generate", None)):
            return None
        if first_embedding(self.model) is None:
            return None
        return "decoder", (f"{type(self.model).__name__} has a generate() method (an autoregressive LM, as "
                           "nanoGPT's GPT). Declare kind=encoder if not")

    def _kind_from_signature(self) -> tuple[str, str] | None:
        names = set(self.params)
        if {"query", "key", "value"} <= names:
            return "attention", "forward takes (query, key, value)"
        if names & set(_TARGET_ARGS):
            return "seq2seq", f"forward takes a target argument ({sorted(names & set(_TARGET_ARGS))[0]})"
        return None

    def from_config(self, key: str, embedding_attr: str | None = None, fallback: Any = None) -> None:
        if key in self.s.declared:
            self.declared(key)
            return
        # x-transformers keeps the width on the layer stack it wraps (TransformerWrapper.attn_layers.dim).
        holders = ((self.config, "config"), (self.model, "model"),
                   (getattr(self.model, "attn_layers", None), "model.attn_layers"))
        for holder, prefix in holders:
            if holder is None:
                continue
            for name in _CONFIG_NAMES[key]:
                value = getattr(holder, name, None)
                # Sizes are positive and ids non-negative: XLNet's max_position_embeddings is -1 ("no limit").
                if isinstance(value, int) and not isinstance(value, bool) and value >= (0 if key == "pad_id" else 1):
                    return self.set(key, value, f"{prefix}.{name}")
        if embedding_attr:
            found = first_embedding(self.model)
            if found is not None and getattr(found[1], embedding_attr) is not None:
                return self.set(key, getattr(found[1], embedding_attr),
                                f"nn.Embedding '{found[0]}'.{embedding_attr}")
        if key == "d_model" and (found := _first_width(self.model)) is not None:
            return self.set(key, found[1], found[0])
        if key == "d_model" and self.s.facts.kind == "attention" and (found := _first_linear(self.model)):
            return self.set(key, found[1].in_features, f"nn.Linear '{found[0]}'.in_features (the first projection "
                            "of the query)")
        if key == "vocab_size":
            found = first_embedding(self.model)
            if found is not None:
                return self.set(key, found[1].num_embeddings, f"nn.Embedding '{found[0]}'.num_embeddings")
        if fallback is not None:
            return self.set(key, fallback, "same as vocab_size", show=False)
        self.set(key, None, "unknown", show=key in ("vocab_size", "d_model"))

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
        found = _causal_attribute(self.model)
        if found is not None and "kind" not in self.s.declared:  # a declared kind outranks what the model says
            return self.set("causal", found[1], found[0])
        kind = self.s.facts.kind
        if kind in ("decoder", "seq2seq"):
            return self.set("causal", True, f"kind={kind}" + (" (the decoder side)" if kind == "seq2seq" else ""))
        if kind == "encoder":
            return self.set("causal", False, "kind=encoder")
        self.set("causal", None, "unknown: declare causal=true or causal=false")

    def mask(self) -> None:
        if self.declared("mask"):
            return
        for name in self.params:
            if name in ("attention_mask",):
                return self.set("mask", decl.MaskSpec(name, "keep"), "forward argument named attention_mask "
                                "(Hugging Face convention: 1 = real token, given as int64 as tokenizers return it)")
            if name in ("src_key_padding_mask", "key_padding_mask"):
                return self.set("mask", decl.MaskSpec(name, "pad"),
                                f"forward argument named {name} (torch convention: True = padding)")
        if "mask" in self.params and _library(self.model) == "x_transformers":
            return self.set("mask", decl.MaskSpec("mask", "keep"), "x-transformers' forward(x, mask=None): a bool "
                            "keep mask (True = attend)")
        for name in self.params:
            if name in _MASK_ARGS:
                return self.set("mask", decl.MaskSpec(name, "keep"),
                                f"forward argument named {name}; convention unknown, assumed keep "
                                f"(True = real token, given as bool, laid out (batch, length) unless that raises). "
                                f"Declare mask={name}:pad or {name}:additive if not")
        self.set("mask", decl.MaskSpec(None, "none"), "no mask argument in forward")

    def layout(self) -> None:
        """Whether the model takes (length, batch, d): torch's own Transformer modules say it in batch_first."""
        found = _torch_batch_first(self.model)
        if found is None:
            return
        batch_first, where = found
        self.s.facts.batch_first = batch_first
        if not batch_first:
            self.s.assumptions.append(Assumption(
                "layout", "(length, batch, d_model)", f"{where} = False (torch's default); tfcheck transposes the "
                "inputs it builds and the output it reads, and reports shapes as (batch, length, ...)"))

    def returns(self) -> None:
        """Logits or hidden states, where the model says so itself (x-transformers' ``to_logits`` head)."""
        if not hasattr(self.model, "to_logits") or "output" in self.s.declared:
            return
        head = getattr(self.model, "to_logits")
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
        features = first_embedding(self.model) is None
        if features and self.s.facts.d_model is None:
            raise SpecError(
                f"{self.s.spec} has no nn.Embedding, so it takes features, but its width is unknown: declare "
                "d_model=INT, or declare inputs=module:factory to build its inputs")
        self.s.facts.takes_features = features
        if features:
            self.s.assumptions.append(Assumption("inputs", "float features (batch, length, d_model)",
                                                 "the model has no nn.Embedding (declare inputs=module:factory if not)"))
        plan: list[tuple[str | None, str]] = []
        mask: decl.MaskSpec = self.s.facts.mask
        params = list(self.params.items())
        for i, (name, param) in enumerate(params):
            required = param.default is inspect.Parameter.empty
            positional = param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) and all(
                p.default is inspect.Parameter.empty for _, p in params[:i])
            slot = None if positional else name
            if i == 0:
                plan.append((slot, "features" if features else "tokens"))
            elif name in _TARGET_ARGS or (self.s.facts.kind == "seq2seq" and i == 1 and required):
                plan.append((slot, "target_features" if features else "target_tokens"))
            elif required and name == mask.argument:
                plan.append((slot, "mask"))
            elif required and name in _CAUSAL_MASK_ARGS:
                plan.append((slot, "causal_mask"))
                self.s.assumptions.append(Assumption(
                    name, "the causal keep mask (True on and below the diagonal)", f"forward requires {name} (the "
                    "tutorial style: the caller builds the look-ahead mask); given in the padding mask's convention "
                    "and layout"))
            elif name == "tgt_mask" and "tgt_is_causal" in self.params and not required:
                plan.append((name, "torch_causal_mask"))
                self.s.assumptions.append(Assumption(
                    name, "nn.Transformer.generate_square_subsequent_mask(t)", "forward takes (tgt_mask=None, "
                    "tgt_is_causal=None) as torch.nn.Transformer does, whose decoder is causal only when the caller "
                    "passes the mask, as torch documents"))
            elif name == "targets" and not features and self.s.facts.kind in ("decoder", None):
                # nanoGPT's forward(idx, targets=None) returns only the last position's logits without
                # targets (its generation shortcut): give the inputs as targets to get every position.
                plan.append((name, "lm_targets"))
                self.s.assumptions.append(Assumption(
                    "targets", "the input tokens", "forward takes targets=None (nanoGPT convention: without "
                    "targets only the last position's logits come back)"))
            elif required:
                raise SpecError(
                    f"{self.s.spec}.forward requires argument {name!r}, which tfcheck cannot build. Declare "
                    f"inputs=module:factory (fn(batch, length) -> (args, kwargs)), or mask={name}:keep if it is "
                    "the padding mask.")
        if not plan and _takes_varargs(self.model):
            # forward(*args): the inputs go in positionally, as a wrapper would pass them on.
            plan.append((None, "features" if features else "tokens"))
        if not plan:
            raise SpecError(f"{self.s.spec}.forward takes no arguments; declare inputs=module:factory")
        self.s.facts.call_plan = plan

    def output(self) -> None:
        if self.declared("output"):
            return
        self.set("output", "auto", "inferred from the first forward's return value", show=False)


def infer_output(subject: Subject, raw: Any) -> None:
    """Settle output='auto' from a forward's return value (the structure, not the values)."""
    if subject.facts.output != "auto":
        return
    how, why = _infer_output(raw)
    subject.facts.output = how
    subject.assumptions.append(Assumption("output", how, why))


def _infer_output(raw: Any) -> tuple[str | int, str]:
    if isinstance(raw, torch.Tensor):
        return "tensor", "forward returns a tensor"
    for name in ("logits", "last_hidden_state"):
        if (isinstance(raw, dict) and isinstance(raw.get(name), torch.Tensor)) or \
                isinstance(getattr(raw, name, None), torch.Tensor):
            return name, f"forward returns an object with {name!r}"
    if isinstance(raw, (tuple, list)):
        for i, v in enumerate(raw):
            if isinstance(v, torch.Tensor):
                return i, f"first tensor of the returned {type(raw).__name__} (declare output=INDEX if not)"
    if isinstance(raw, dict):
        for k, v in raw.items():
            if isinstance(v, torch.Tensor) and isinstance(k, str):
                return k, "first tensor value of the returned dict (declare output=KEY if not)"
    raise UsageError(
        f"the model returned a {type(raw).__name__} with no tensor tfcheck can find; declare 'output' (a tuple "
        "index or a key/attribute name of the output tensor)")


def _library(model: nn.Module) -> str | None:
    """The top-level package that defines the model's class (``transformers``, ``x_transformers``, ...)."""
    module = inspect.getmodule(type(model))
    return module.__name__.split(".")[0] if module is not None else None


def _causal_attribute(model: nn.Module) -> tuple[str, bool] | None:
    """A bool ``causal`` on the model, or on the layer stack it wraps (x-transformers' ``attn_layers``)."""
    for path in ("", "attn_layers"):
        holder = getattr(model, path, None) if path else model
        value = getattr(holder, "causal", None) if holder is not None else None
        if isinstance(value, bool):
            return f"model.{path + '.' if path else ''}causal", value
    return None


def _torch_batch_first(model: nn.Module) -> tuple[bool, str] | None:
    """batch_first of a torch.nn Transformer module given as the model itself, and where it was read."""
    if not isinstance(model, _TORCH_LAYOUT_CLASSES):
        return None
    name = type(model).__name__
    if isinstance(model, (nn.MultiheadAttention, nn.Transformer)):
        return bool(model.batch_first), f"torch.nn.{name}.batch_first"
    layer = model.layers[0] if isinstance(model, (nn.TransformerEncoder, nn.TransformerDecoder)) else model
    prefix = "layers[0]." if layer is not model else ""
    return bool(layer.self_attn.batch_first), f"torch.nn.{name}.{prefix}self_attn.batch_first"


def forward_params(model: nn.Module) -> dict[str, inspect.Parameter]:
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return {}
    return {n: p for n, p in sig.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _takes_varargs(model: nn.Module) -> bool:
    try:
        return any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return False


def first_embedding(model: nn.Module) -> tuple[str, nn.Embedding] | None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding):
            return name, module
    return None


def _first_width(model: nn.Module) -> tuple[str, int] | None:
    """The model width read off its first attention or LayerNorm, for models without embeddings."""
    for name, module in model.named_modules():
        if isinstance(module, nn.MultiheadAttention):
            return f"nn.MultiheadAttention '{name}'.embed_dim", module.embed_dim
        if isinstance(module, nn.LayerNorm) and module.normalized_shape:
            return f"nn.LayerNorm '{name}'.normalized_shape", module.normalized_shape[-1]
    return None


def _first_linear(model: nn.Module) -> tuple[str, nn.Linear] | None:
    return next(((n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)), None)


def _brief(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool, type(None))) else type(v).__name__ + "(small sizes)"
