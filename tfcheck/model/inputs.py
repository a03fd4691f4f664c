"""Making a forward's inputs from the facts: token ids or features, the target of a seq2seq model, padding
and causal masks in the model's convention and layout, laid out as the forward takes them.

Checks build everything (batch, length, ...); the call plan (``facts.call_plan``) says which forward
parameter gets which tensor, and :func:`to_model_layout` transposes for a (length, batch, d) model at the
call. Random draws come from a private generator: the global RNG is never touched.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from tfcheck.errors import MaskUnread, UsageError
from tfcheck.frames import innermost_user_frame, short_path
from tfcheck.model.build.user_code import user_code
from tfcheck.model.facts.declarations import MaskSpec
from tfcheck.model.facts.structure import forward_params, takes_torch_tgt_mask
from tfcheck.model.facts.under_test import mask_spec

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest

#: The default probe: batch and length distinct from each other and from every small hyper-parameter.
PROBE_BATCH, PROBE_LENGTH = 3, 7
#: The target length of seq2seq probes, distinct from the source length.
TARGET_LENGTH_DELTA = -2
#: The mask layouts a forward may take: (batch, length), or laid out for the attention scores (tutorial style).
DEFAULT_MASK_LAYOUT = "bs"


def make_inputs(subject: ModelUnderTest, batch: int, length: int, seed: int = 0) -> tuple[tuple, dict]:
    """Inputs for one forward at (batch, length), from a private generator (global RNG untouched)."""
    factory = subject.facts.inputs
    if factory is not None:
        return on_device(subject.device, *call_inputs_factory(factory, batch, length, subject.spec))
    gen = torch.Generator().manual_seed(seed)
    primary = random_primary(subject, batch, length, gen, side="source")
    target = None
    if subject.takes_target:
        target = random_primary(subject, batch, max(1, length + TARGET_LENGTH_DELTA), gen, side="target")
    return inputs_for(subject, primary, target)


def random_primary(subject: ModelUnderTest, batch: int, length: int, gen: torch.Generator,
                   side: str | None = None) -> torch.Tensor:
    """Random token ids (never the pad id) of ``side`` (see :func:`random_tokens`), or features for models that
    take them."""
    if subject.kind == "attention" or subject.facts.takes_features:
        return torch.randn(batch, length, known_size(subject, "d_model"), generator=gen).to(subject.device)
    return random_tokens(subject, batch, length, gen, side)


def random_tokens(subject: ModelUnderTest, batch: int, length: int, gen: torch.Generator,
                  side: str | None = None) -> torch.Tensor:
    """Real token ids: never a pad id of either side (a seq2seq model may pad its target with another id)."""
    vocab = token_vocab(subject, side)
    pads = sorted({p for p in (subject.facts.pad_id, subject.facts.target_pad_id) if p is not None and 0 <= p < vocab})
    # Draw from the vocabulary with the pad ids taken out, then step over them in increasing order.
    ids = torch.randint(0, max(vocab - len(pads), 1), (batch, length), generator=gen)
    for pad in pads:
        ids = ids + (ids >= pad).long()
    return ids.to(subject.device)


def token_vocab(subject: ModelUnderTest, side: str | None) -> int:
    """How many ids the tokens of ``side`` are drawn from: the source's vocab_size, the decoder input's
    target_vocab_size (a seq2seq model may have a vocabulary per side), or, where the caller does not say the side,
    the smaller: ids every side's embedding reads, so that a draw never makes the model raise."""
    vocab = known_size(subject, "vocab_size")
    if side == "source" or subject.kind != "seq2seq":  # one side: its facts are read only where there are two
        return vocab
    target = subject.facts.target_vocab_size
    if target is None:
        return vocab
    return target if side == "target" else min(vocab, target)


def inputs_for(subject: ModelUnderTest, primary: torch.Tensor, target: torch.Tensor | None = None,
               keep: torch.Tensor | None = None) -> tuple[tuple, dict]:
    """Forward arguments from given tensors (see :meth:`ModelUnderTest.inputs_for`)."""
    if subject.kind == "attention":
        return (primary, primary, primary), {}
    mask = mask_spec(subject)
    given_keep = keep is not None
    if keep is None:
        keep = torch.ones(primary.shape[:2], dtype=torch.bool, device=primary.device)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    plan = subject.facts.call_plan or []
    for name, role in plan:
        value = plan_value(subject, role, primary, target, keep, name or positional_name(subject, len(args)))
        if name is None:
            args.append(value)
        else:
            kwargs[name] = value
    mask_in_plan = any(role == "mask" for _, role in plan)
    # A mask of real tokens only is left out; one on the meta device (a shape trace) has no values to ask.
    padded = given_keep and (keep.is_meta or not bool(keep.all()))
    if mask.argument is not None and not mask_in_plan and padded:
        kwargs[mask.argument] = mask_value(subject, keep)
    return tuple(args), kwargs


def plan_value(subject: ModelUnderTest, role: str, primary: torch.Tensor, target: torch.Tensor | None,
               keep: torch.Tensor, name: str | None = None) -> Any:
    """The tensor a call-plan role gets."""
    if role in ("tokens", "lm_targets", "features"):
        return primary
    if role == "causal_mask":
        decoder_input = target if target is not None else primary
        return causal_mask_value(subject, decoder_input.shape[0], decoder_input.shape[1], decoder_input.device)
    if role == "fixed":
        return extra_value(subject, primary.shape[0], primary.shape[1], name)
    if role.startswith("target"):
        if target is None:
            raise UsageError(f"{subject.spec} takes a target input; give inputs_for() a target tensor")
        return target
    return mask_value(subject, keep)  # the required mask argument


def positional_name(subject: ModelUnderTest, index: int) -> str | None:
    """The forward parameter at a positional slot (the call plan's positional slots are its first parameters)."""
    params = list(forward_params(subject.model))
    return params[index] if index < len(params) else None


def extra_value(subject: ModelUnderTest, batch: int, length: int, name: str | None) -> Any:
    """A forward argument the ``extra`` declaration holds fixed: its value, or what its factory makes for this
    probe's (batch, length)."""
    extra = subject.facts.extra
    if callable(extra):
        made = call_extra_factory(extra, batch, length, subject.spec)
        if name not in made:
            raise UsageError(f"the 'extra' factory for {subject.spec} returned no {name!r} (it returned "
                             f"{', '.join(map(repr, made)) or 'nothing'}); return every argument forward requires "
                             "besides the tokens")
        return on_device(subject.device, (), {name: made[name]})[1][name]
    if not isinstance(extra, dict) or name not in extra:
        raise UsageError(f"{subject.spec}: the 'extra' declaration gives no {name!r}")
    return extra[name]


def call_extra_factory(factory: Any, batch: int, length: int, spec: str) -> dict:
    try:
        with user_code():
            made = factory(batch, length)
    except Exception as exc:
        frame = innermost_user_frame(exc)
        at = f" ({short_path(frame.filename)}:{frame.lineno})" if frame is not None else ""
        raise UsageError(f"the 'extra' factory for {spec} raised {type(exc).__name__}: {exc}{at} when called as "
                         f"factory(batch={batch}, length={length}); it must take (batch, length) and return a dict "
                         "of forward arguments") from None
    if not isinstance(made, dict):
        raise UsageError(f"the 'extra' factory for {spec} returned {type(made).__name__}; it must return a dict of "
                         "forward arguments, e.g. return {'start_pos': 0}")
    return made


def known_size(subject: ModelUnderTest, fact: str) -> int:
    """A size the inputs need (d_model for features, vocab_size for token ids), or how to declare it."""
    value = getattr(subject.facts, fact)
    if not isinstance(value, int):
        raise UsageError(f"{subject.spec}: tfcheck needs {fact} to build inputs and nothing says it; declare "
                         f"{fact}=INT")
    return value


#: The call-plan roles that are sequences, transposed for a (length, batch, ...) model. Masks are not: torch's
#: key_padding_mask is (batch, length) in both layouts, and a look-ahead mask is (length, length).
SEQUENCE_ROLES = frozenset({"tokens", "features", "target_tokens", "target_features", "lm_targets"})


def to_model_layout(subject: ModelUnderTest, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Forward arguments as the model takes them: for a (length, batch, ...) model the sequences of the call plan
    (token ids, features, the decoder input) transposed; without a plan (a declared factory, an attention module)
    every 3-D float argument. The identity for every other model."""
    if subject.facts.batch_first is not False:
        return args, kwargs

    def laid_out(v: Any) -> Any:
        return v.transpose(0, 1) if isinstance(v, torch.Tensor) and v.dim() >= 2 else v

    plan = subject.facts.call_plan or []
    if not plan:
        def features(v: Any) -> Any:
            return laid_out(v) if isinstance(v, torch.Tensor) and v.dim() == 3 and v.is_floating_point() else v
        return tuple(features(v) for v in args), {k: features(v) for k, v in kwargs.items()}
    positional = [role for name, role in plan if name is None]
    named = {name: role for name, role in plan if name is not None}
    return (tuple(laid_out(v) if i < len(positional) and positional[i] in SEQUENCE_ROLES else v
                  for i, v in enumerate(args)),
            {k: laid_out(v) if named.get(k) in SEQUENCE_ROLES else v for k, v in kwargs.items()})


def batch_length(args: tuple, kwargs: dict) -> tuple[int, int]:
    """Batch and length of a forward's arguments: those of the first tensor with at least two dimensions
    (what a forward's cost is counted in)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            return int(value.shape[0]), int(value.shape[1])
    return 1, 1


# ----- masks ------------------------------------------------------------------------------------------

def mask_layout(subject: ModelUnderTest) -> str:
    return mask_spec(subject).layout or DEFAULT_MASK_LAYOUT


def mask_value(subject: ModelUnderTest, keep: torch.Tensor) -> torch.Tensor:
    """A (batch, length) keep mask (True = real token) in the model's mask convention and layout. Where the trial
    found no reading of an optional mask argument that runs, a MaskUnread: the check that pads is inconclusive."""
    if subject.facts.mask_unread is not None:
        raise MaskUnread(subject.facts.mask_unread)
    value = in_convention(keep, mask_spec(subject))
    layout = mask_layout(subject)
    if layout == "b1s":
        return value[:, None, :]
    if layout == "b11s":
        return value[:, None, None, :]
    if layout == "b1ss":  # the key pattern repeated for every query
        return value[:, None, None, :].expand(-1, 1, value.shape[-1], -1)
    return value


#: The look-ahead mask's layout that goes with each padding-mask layout (the tutorial style lays both out for
#: the scores alike), unless declared.
CAUSAL_LAYOUT_OF = {"bs": "ss", "b1s": "bss", "b11s": "b1ss", "b1ss": "b1ss"}


def causal_mask_spec(subject: ModelUnderTest) -> MaskSpec:
    """The look-ahead mask the caller builds: its argument, convention and layout (none when nothing settled one)."""
    return subject.facts.causal_mask or MaskSpec(None, "none")


def causal_mask_value(subject: ModelUnderTest, batch: int, length: int, device: torch.device,
                      torch_convention: bool = False) -> torch.Tensor:
    """The decoder's look-ahead mask as its caller builds it, in the convention settled for it (one rule, read from
    the op that consumes it: tfcheck.model.trial.caller_masks): keep (bool, True on and below the diagonal), pad (bool,
    True above it) or additive (torch's float mask, -inf above the diagonal, as
    nn.Transformer.generate_square_subsequent_mask); keep while nothing settled it. Laid out (length, length),
    (batch, length, length) or (batch, 1, length, length): declared, or following the padding mask's layout.
    ``torch_convention`` asks for torch's float mask whatever was settled."""
    spec = causal_mask_spec(subject)
    convention = "additive" if torch_convention else spec.convention or "keep"
    allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    value: torch.Tensor
    if convention == "additive":
        value = nn.Transformer.generate_square_subsequent_mask(length, device=device)
    elif convention == "pad":
        value = ~allowed
    else:
        value = allowed
    layout = spec.layout or CAUSAL_LAYOUT_OF.get(mask_layout(subject), "ss")
    if layout == "bss":
        return value.expand(batch, length, length)
    if layout == "b1ss":
        return value.expand(batch, 1, length, length)
    return value


def in_convention(keep: torch.Tensor, mask: MaskSpec) -> torch.Tensor:
    """A bool keep tensor (True = may attend) as the mask argument takes it: Hugging Face's attention_mask as
    int64 1/0 (what tokenizers return), other keep masks as bool (what (x != pad) gives), an additive mask as 0 and
    float32's minimum. Not -inf: a fully padded sample's rows would then be all -inf and softmax NaN from tfcheck's
    choice of constant, not from the model (Hugging Face builds its additive masks with torch.finfo(dtype).min for
    the same reason)."""
    if mask.convention == "pad":
        return ~keep
    if mask.convention == "additive":
        return torch.zeros(keep.shape, device=keep.device).masked_fill(~keep, torch.finfo(torch.float32).min)
    return keep.long() if mask.argument == "attention_mask" else keep


# ----- torch.nn.Transformer's calling convention ---------------------------------------------------------

def with_torch_causal_mask(subject: ModelUnderTest, kwargs: dict, length: int) -> dict:
    """``kwargs`` with tgt_mask = nn.Transformer.generate_square_subsequent_mask(length) when the forward takes
    torch.nn.Transformer's optional (tgt_mask, tgt_is_causal) and the trial has not settled the look-ahead mask:
    once it has (tfcheck.model.trial.caller_masks: the call plan gives it, or the model builds its own), ``kwargs`` as
    they are."""
    settled = subject.facts.causal_mask is not None and subject.facts.causal_mask.convention != ""
    if settled or not takes_torch_tgt_mask(subject.model):
        return kwargs
    return {**kwargs, "tgt_mask": nn.Transformer.generate_square_subsequent_mask(length, device=subject.device)}


def with_memory_padding_mask(subject: ModelUnderTest, kwargs: dict, keep: torch.Tensor) -> dict:
    """``kwargs`` with the source padding ``keep`` (True = real) also given as memory_key_padding_mask, in
    torch's convention (True = padding), when the forward takes one besides its padding mask argument:
    torch.nn.Transformer takes the source padding twice, src_key_padding_mask for the encoder and
    memory_key_padding_mask for cross-attention, as documented."""
    if mask_spec(subject).argument is None or "memory_key_padding_mask" in kwargs:
        return kwargs
    if "memory_key_padding_mask" not in forward_params(subject.model):
        return kwargs
    return {**kwargs, "memory_key_padding_mask": ~keep}


# ----- declared input factories -----------------------------------------------------------------------

def call_inputs_factory(factory: Any, batch: int, length: int, spec: str) -> tuple[tuple, dict]:
    try:
        with user_code():
            result = factory(batch, length)
    except Exception as exc:
        frame = innermost_user_frame(exc)
        at = f" ({short_path(frame.filename)}:{frame.lineno})" if frame is not None else ""
        raise UsageError(
            f"the 'inputs' factory for {spec} raised {type(exc).__name__}: {exc}{at} when called as "
            f"factory(batch={batch}, length={length}); it must take (batch, length) and return (args, kwargs)"
        ) from None
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        raise UsageError(
            f"the 'inputs' factory for {spec} returned {type(result).__name__}; it must return (args, kwargs), "
            "e.g. return (images,), {}"
        )
    return tuple(result[0]), result[1]


def on_device(device: torch.device, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A factory's tensors on the model's device (the battery may run on a declared device the factory
    does not know about)."""
    def move(v: Any) -> Any:
        return v.to(device) if isinstance(v, torch.Tensor) and v.device != device else v

    return tuple(move(v) for v in args), {k: move(v) for k, v in kwargs.items()}

