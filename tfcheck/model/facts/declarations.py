"""Declarations: what a user tells tfcheck about a model, one typed registry of keys.

Sources, strongest first: the command line (``--set`` / ``--tfcheck-set``), a ``[[tool.tfcheck.models]]``
entry in pyproject.toml, a ``__tfcheck__`` dict on the model class or factory, then inference from the
model's config and signature. Every value remembers where it came from, so the report can say it.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfcheck.errors import DeclarationError, UsageError
from tfcheck.model.build.byte_sizes import parse_bytes

KINDS = ("encoder", "decoder", "seq2seq", "attention")
PRECISIONS = ("fp32", "fp16", "bf16")
MASK_CONVENTIONS = ("keep", "pad", "additive")
#: How a padding mask is shaped, for forwards that take it already laid out for the attention scores.
MASK_LAYOUTS = {"bs": "(batch, length)", "b1s": "(batch, 1, length)", "b11s": "(batch, 1, 1, length)",
                "b1ss": "(batch, 1, length, length)"}
#: How a causal (look-ahead) mask the caller builds is shaped: (length, length), or per batch for the scores.
CAUSAL_MASK_LAYOUTS = {"ss": "(length, length)", "bss": "(batch, length, length)",
                       "b1ss": "(batch, 1, length, length)"}
#: How the model lays out its sequences: batch first (batch, length, ...) or torch's (length, batch, ...).
SEQUENCE_LAYOUTS = ("batch_first", "seq_first")
#: Who shifts the labels of a model's own loss: the model (labels = the input ids) or its caller (labels[t] is the
#: target of logits[t], already token t + 1).
LABEL_SHIFTS = ("inside", "caller")
#: What a check stopped by its time budget counts as (the budget_overrun declaration).
BUDGET_OVERRUNS = ("skip", "fail")


@dataclass(frozen=True)
class MaskSpec:
    """How the model takes its padding mask: a forward argument and its convention, or built inside."""

    argument: str | None  # None when the mask is built inside forward (``internal``) or absent (``none``)
    convention: str  # keep | pad | additive | internal | none
    layout: str | None = None  # a key of MASK_LAYOUTS; None: (batch, length) unless tfcheck infers another

    def __str__(self) -> str:
        if not self.argument:
            return self.convention
        return self.argument + (f":{self.convention}" if self.convention else "") + \
            (f":{self.layout}" if self.layout else "")


@dataclass(frozen=True)
class Key:
    name: str
    syntax: str
    doc: str
    parse: Callable[[Any], Any]


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "yes", "1", "false", "no", "0"):
        return v.lower() in ("true", "yes", "1")
    raise ValueError("expected true or false")


#: Larger integers overflow torch's int64 token ids and sizes: no real hyper-parameter comes near.
_INT_LIMIT = 2**62


def _integer(v: Any) -> int | None:
    """An int written as an int, a string of digits or an integral float (TOML's 2.0); None otherwise, so that
    2.9 is refused rather than truncated to 2."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else None
    if isinstance(v, str) and re.fullmatch(r"\s*[+-]?\d+\s*", v):
        return int(v)
    return None


def _positive_int(v: Any) -> int:
    n = _integer(v)
    if n is None or not 0 < n < _INT_LIMIT:
        raise ValueError("expected a positive integer")
    return n


def _optional_int(v: Any) -> int | None:
    if v is None or (isinstance(v, str) and v.lower() == "none"):
        return None
    n = _integer(v)
    if n is None or not -_INT_LIMIT < n < _INT_LIMIT:
        raise ValueError("expected an integer or none")
    return n


def _kind(v: Any) -> str:
    if v not in KINDS:
        raise ValueError(f"expected one of {', '.join(KINDS)}")
    return str(v)


def _mask(v: Any) -> MaskSpec:
    if isinstance(v, MaskSpec):
        return v
    if not isinstance(v, str):
        raise ValueError("expected ARGUMENT:CONVENTION, 'internal' or 'none'")
    if v in ("internal", "none"):
        return MaskSpec(None, v)
    arg, sep, conv = v.partition(":")
    conv, _, layout = conv.partition(":")
    if not sep or not arg.isidentifier() or conv not in MASK_CONVENTIONS or (layout and layout not in MASK_LAYOUTS):
        raise ValueError(
            "expected ARGUMENT:CONVENTION[:LAYOUT] with CONVENTION one of keep (1 = real token), pad (True = pad), "
            "additive (0 / -inf added to the logits) and LAYOUT one of "
            f"{', '.join(f'{k} {v}' for k, v in MASK_LAYOUTS.items())}, e.g. attention_mask:keep or "
            "src_mask:keep:b11s; or 'internal' / 'none'")
    return MaskSpec(arg, conv, layout or None)


def _causal_mask(v: Any) -> MaskSpec:
    """ARG[:CONVENTION][:LAYOUT]: the forward argument that takes the look-ahead mask the caller builds."""
    if isinstance(v, MaskSpec):
        return v
    if not isinstance(v, str):
        raise ValueError("expected ARGUMENT[:CONVENTION][:LAYOUT] or 'none'")
    if v == "none":
        return MaskSpec(None, "none")
    arg, *rest = v.split(":")
    conv = rest[0] if rest and rest[0] in MASK_CONVENTIONS else None
    layout = rest[-1] if rest and rest[-1] in CAUSAL_MASK_LAYOUTS else None
    if not arg.isidentifier() or len(rest) > 2 or len(rest) != (conv is not None) + (layout is not None):
        raise ValueError(
            "expected ARGUMENT[:CONVENTION][:LAYOUT] with CONVENTION one of keep (True = may attend), pad (True = "
            "blocked), additive (0 / -inf added to the logits) and LAYOUT one of "
            f"{', '.join(f'{k} {v}' for k, v in CAUSAL_MASK_LAYOUTS.items())}, e.g. tgt_mask:keep or "
            "trg_mask:keep:b1ss; or 'none'")
    return MaskSpec(arg, conv or "", layout)


def _sequence_layout(v: Any) -> str:
    if v not in SEQUENCE_LAYOUTS:
        raise ValueError(f"expected one of {', '.join(SEQUENCE_LAYOUTS)}")
    return str(v)


def _label_shift(v: Any) -> str:
    if v not in LABEL_SHIFTS:
        raise ValueError(f"expected one of {', '.join(LABEL_SHIFTS)}")
    return str(v)


def _budget_overrun(v: Any) -> str:
    if v not in BUDGET_OVERRUNS:
        raise ValueError(f"expected one of {', '.join(BUDGET_OVERRUNS)}")
    return str(v)


def _attribute_path(v: Any) -> str:
    if not isinstance(v, str) or not all(part.isidentifier() for part in v.split(".")):
        raise ValueError("expected the attribute name of a submodule, e.g. generator or heads.lm")
    return v


def _output(v: Any) -> str | int:
    if isinstance(v, bool):
        raise ValueError("expected 'tensor', a tuple index or a key/attribute name")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        if re.fullmatch(r"-?\d+", v):
            return int(v)
        if v == "tensor" or v.isidentifier():
            return v
    raise ValueError("expected 'tensor', a tuple index or a key/attribute name")


def _callable_or_spec(v: Any) -> Any:
    if callable(v):
        return v
    if isinstance(v, str) and ":" in v:
        return v  # resolved lazily by the subject, with the spec loader's error messages
    raise ValueError("expected a callable or a 'module:function' spec")


def _extra(v: Any) -> Any:
    """A dict (or a JSON object), else a callable or a 'module:function' spec."""
    return _kwargs(v) if isinstance(v, dict) or (isinstance(v, str) and v.lstrip().startswith("{")) \
        else _callable_or_spec(v)


def _accept(v: Any) -> dict[str, str]:
    if isinstance(v, str):
        # CLI syntax: CHECK_ID:REASON[,CHECK_ID:REASON...]; a reason is required.
        out = {}
        for part in v.split(","):
            check, sep, reason = part.partition(":")
            if not sep or not reason.strip():
                raise ValueError("expected CHECK_ID:REASON (a reason is required)")
            out[check.strip()] = reason.strip()
        return out
    if isinstance(v, dict) and all(isinstance(k, str) and isinstance(r, str) and r.strip() for k, r in v.items()):
        return dict(v)
    raise ValueError("expected a table of check id -> reason (each reason a non-empty string)")


def _float_positive(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a positive number")
    x = float(v)
    if not 0 < x < math.inf:  # nan and inf (1e400 reads as inf) too
        raise ValueError("expected a positive finite number")
    return x


def _seconds(v: Any) -> float:
    """A budget in seconds; inf (or none) means no budget."""
    if isinstance(v, str) and v.strip().lower() in ("inf", "none"):
        return math.inf
    if isinstance(v, float) and v == math.inf:
        return v
    return _float_positive(v)


def _memory_size(v: Any) -> int:
    """Bytes, given as an integer or with a unit (512MiB, 4GiB, 8GB)."""
    if isinstance(v, bool):
        raise ValueError("expected a size such as 4GiB or 512MiB")
    try:
        n = parse_bytes(v if isinstance(v, int) else str(v))
    except UsageError:
        raise ValueError("expected a size such as 4GiB, 512MiB or a number of bytes") from None
    if n is None or not 0 < n < _INT_LIMIT:
        raise ValueError("expected a positive size such as 4GiB")
    return n


def _entry_name(v: Any) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", v):
        raise ValueError("expected a short name of letters, digits, '_', '.' or '-', e.g. small")
    return v


def _device(v: Any) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"cpu|cuda(:\d{1,4})?|mps", v):
        raise ValueError("expected cpu, cuda, cuda:N or mps")
    return v


def _precision(v: Any) -> str:
    if v not in PRECISIONS:
        raise ValueError(f"expected one of {', '.join(PRECISIONS)}")
    return str(v)


def _kwargs(v: Any) -> dict[str, Any]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a JSON object, e.g. '{{\"vocab_size\": 500}}' ({exc.msg})") from None
    if not isinstance(v, dict):
        raise ValueError("expected a table / JSON object of constructor arguments")
    return dict(v)


KEYS: dict[str, Key] = {k.name: k for k in [
    Key("kind", "encoder | decoder | seq2seq | attention",
        "What the model is: a bidirectional encoder, a decoder-only (causal) LM, an encoder-decoder, or a bare "
        "attention module forward(query, key, value, mask=None).", _kind),
    Key("causal", "true | false", "Whether position t may only depend on positions <= t.", _bool),
    Key("vocab_size", "INT", "Number of token ids; probes draw ids below it.", _positive_int),
    Key("pad_id", "INT | none", "The padding token id; probes never draw it as a real token.", _optional_int),
    Key("max_len", "INT", "Longest sequence the model accepts; probes are capped well below large values.",
        _positive_int),
    Key("min_len", "INT",
        "Shortest sequence the model accepts (a model that pools the sequence needs some positions to pool); "
        "the shape probes start there instead of at length 1.", _positive_int),
    Key("length_multiple", "INT",
        "The model accepts only lengths that are a multiple of INT (a bucket, block or chunk size it does not pad "
        "to): every probe length is rounded to one, and decoding token by token does not apply.", _positive_int),
    Key("d_model", "INT", "Width of the hidden states (hidden_size, n_embd, dim).", _positive_int),
    Key("mask", "ARG:keep | ARG:pad | ARG:additive [:bs | :b1s | :b11s | :b1ss] | internal | none",
        "The forward argument that takes the padding mask and its convention (keep: 1 = real token; pad: True = "
        "padding; additive: 0 / -inf added to the logits), optionally its layout ((batch, length) by default; b1s = "
        "(batch, 1, length), b11s = (batch, 1, 1, length), b1ss = (batch, 1, length, length)), or 'internal' when "
        "forward builds it from pad_id, or 'none'.", _mask),
    Key("causal_mask", "ARG[:keep | :pad | :additive][:ss | :bss | :b1ss] | none",
        "The forward argument that takes the look-ahead mask its caller builds (forward(src, tgt, src_mask, "
        "tgt_mask)), with its convention (keep: True = may attend; pad: True = blocked; additive: 0 / -inf; by "
        "default the op that consumes it decides) and layout ((length, length) unless that raises); 'none': the "
        "model builds its own or has none.", _causal_mask),
    Key("layout", "batch_first | seq_first",
        "How the model lays out its sequences: (batch, length, ...) or torch's (length, batch, ...); tfcheck "
        "transposes the token ids, features and outputs of a seq_first model (padding masks stay (batch, length), "
        "as torch's key_padding_mask is).", _sequence_layout),
    Key("head", "ATTR",
        "The submodule that maps the states forward returns to logits when forward does not call it (the "
        "Annotated Transformer's generator): every check reads head(forward(x)).", _attribute_path),
    Key("output", "tensor | INDEX | NAME",
        "Which part of the forward's return value is the output: the tensor itself, a tuple index, or a "
        "key / attribute such as logits.", _output),
    Key("inputs", "module:function",
        "A factory fn(batch, length) -> (args, kwargs) for models that do not take token ids "
        "(ViT patches, audio frames, inputs_embeds).", _callable_or_spec),
    Key("extra", "JSON object | module:function",
        "Forward arguments held fixed while tfcheck perturbs the tokens: values ('{\"start_pos\": 0}') or a "
        "factory fn(batch, length) -> dict called for each probe.", _extra),
    Key("accept", "CHECK_ID:REASON[,...]",
        "Failures of these checks are reported as 'accepted' with the reason instead of failing.", _accept),
    Key("kwargs", "JSON object", "Constructor arguments; they win over the small values tfcheck fills in.",
        _kwargs),
    Key("shrink", "true | false",
        "Whether tfcheck builds the model small (default true: known hyper-parameters with large defaults are "
        "shrunk, their invariants kept); false keeps every default as written. A kwargs key always keeps its "
        "value.", _bool),
    Key("schedule", "module:function",
        "The learning-rate schedule: a factory fn(optimizer) -> scheduler, or fn(params) -> (optimizer, "
        "scheduler).", _callable_or_spec),
    Key("warmup_steps", "INT", "The warmup length the schedule is meant to have.", _positive_int),
    Key("total_steps", "INT", "The planned number of training steps (the schedule is stepped over them).",
        _positive_int),
    Key("lr", "FLOAT", "The base learning rate given to the optimizer.", _float_positive),
    Key("precision", "fp32 | fp16 | bf16",
        "The precision the model trains in; fp16 / bf16 also opt in to a run under autocast.", _precision),
    Key("train_steps", "INT", "The step budget of the training checks (overfitting one batch and the like).",
        _positive_int),
    Key("label_shift", "inside | caller",
        "Who shifts the labels of the model's own loss (forward(..., labels)): inside, the model (labels are the "
        "input ids, as GPT-2's); caller, the caller (labels[t] is the target of logits[t], already token t + 1, as "
        "BART's *ForCausalLM and nanoGPT's targets).", _label_shift),
    Key("name", "NAME",
        "A name for a [[tool.tfcheck.models]] entry, so that one spec can be listed twice (one class at two "
        "sizes, each with its kwargs): the test id becomes tfcheck[NAME] and the report names SPEC[NAME].",
        _entry_name),
    # Run settings: how tfcheck probes, not what the model is; per model like the rest.
    Key("probe_len", "INT",
        "Sequence length of the information-flow probes (default 7; capped at max_len).", _positive_int),
    Key("budget_s", "SECONDS",
        "Wall-clock budget of each check (default 120); a check over it stops between two operations "
        "and is reported as a skip that says so; inf means no budget.", _seconds),
    Key("budget_overrun", "skip | fail",
        "What a check stopped by its budget counts as: skip (inconclusive, the default) or fail (a CI gate that "
        "must not pass slow checks unjudged); tfcheck check --strict and pytest --tfcheck-strict imply fail.",
        _budget_overrun),
    Key("memory_budget", "SIZE",
        "The memory the run may use (e.g. 4GiB); by default the smallest of the machine's limits (physical "
        "memory, the cgroup's, RLIMIT_AS). A declared probe_len whose probes would not fit in a quarter of it "
        "is scaled down, and the report says so.", _memory_size),
    Key("device", "cpu | cuda | cuda:N | mps",
        "Where the battery runs; the model is moved there for the run and moved back afterwards.", _device),
]}


@dataclass(frozen=True)
class Declared:
    value: Any
    source: str


def parse_value(key: str, value: Any, source: str) -> Declared:
    """Validate one declaration; raise DeclarationError naming the valid keys or the expected syntax."""
    if key not in KEYS:
        raise DeclarationError(
            f"unknown tfcheck declaration {key!r} (from {source}); valid keys are: {', '.join(KEYS)}. "
            "Run `tfcheck help declarations`."
        )
    try:
        return Declared(KEYS[key].parse(value), source)
    except (ValueError, TypeError) as exc:
        raise DeclarationError(
            f"bad value {value!r} for tfcheck declaration {key!r} (from {source}): {exc}. "
            f"Syntax: {key}={KEYS[key].syntax}"
        ) from None


def parse_assignment(text: str, source: str) -> tuple[str, Declared]:
    """Parse ``KEY=VALUE`` as given on a command line."""
    key, sep, value = text.partition("=")
    if not sep:
        raise DeclarationError(f"expected KEY=VALUE, got {text!r} (from {source}); valid keys are: {', '.join(KEYS)}")
    key = key.strip()
    return key, parse_value(key, value.strip(), source)


def merge(*layers: dict[str, Declared]) -> dict[str, Declared]:
    """Merge declaration layers given strongest first."""
    out: dict[str, Declared] = {}
    for layer in reversed(layers):
        out.update(layer)
    return out


def from_mapping(mapping: dict[str, Any], source: str) -> dict[str, Declared]:
    return {k: parse_value(k, v, source) for k, v in mapping.items()}
