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

from tfcheck.errors import UsageError
from tfcheck.model.declarations import MaskSpec
from tfcheck.model.structure import forward_params, takes_torch_tgt_mask
from tfcheck.model.user_code import user_code
from tfcheck.probe.frames import innermost_user_frame, short_path

if TYPE_CHECKING:
    from tfcheck.model.subject import Subject

#: The target length of seq2seq probes, distinct from the source length.
TARGET_LENGTH_DELTA = -2
#: The mask layouts a forward may take: (batch, length), or laid out for the attention scores (tutorial style).
DEFAULT_MASK_LAYOUT = "bs"


def make_inputs(subject: Subject, batch: int, length: int, seed: int = 0) -> tuple[tuple, dict]:
    """Inputs for one forward at (batch, length), from a private generator (global RNG untouched)."""
    factory = subject.facts.inputs
    if factory is not None:
        return on_device(subject.device, *call_inputs_factory(factory, batch, length, subject.spec))
    gen = torch.Generator().manual_seed(seed)
    primary = random_primary(subject, batch, length, gen)
    target = None
    if subject.takes_target:
        target = random_primary(subject, batch, max(1, length + TARGET_LENGTH_DELTA), gen)
    return inputs_for(subject, primary, target)


def random_primary(subject: Subject, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """Random token ids (never the pad id), or features for models that take them."""
    if subject.kind == "attention" or subject.facts.takes_features:
        return torch.randn(batch, length, known_size(subject, "d_model"), generator=gen).to(subject.device)
    return random_tokens(subject, batch, length, gen)


def random_tokens(subject: Subject, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    vocab = known_size(subject, "vocab_size")
    pad = subject.facts.pad_id
    # Draw real tokens only: ids from a vocabulary with the pad id taken out.
    high = vocab - 1 if pad is not None and 0 <= pad < vocab else vocab
    ids = torch.randint(0, max(high, 1), (batch, length), generator=gen)
    if pad is not None and 0 <= pad < vocab:
        ids = ids + (ids >= pad).long()
    return ids.to(subject.device)


def inputs_for(subject: Subject, primary: torch.Tensor, target: torch.Tensor | None = None,
               keep: torch.Tensor | None = None) -> tuple[tuple, dict]:
    """Forward arguments from given tensors (see :meth:`Subject.inputs_for`)."""
    if subject.kind == "attention":
        return (primary, primary, primary), {}
    mask = mask_spec(subject)
    given_keep = keep is not None
    if keep is None:
        keep = torch.ones(primary.shape[:2], dtype=torch.bool, device=primary.device)
    args, kwargs = [], {}
    plan = subject.facts.call_plan or []
    for name, role in plan:
        value = plan_value(subject, role, primary, target, keep)
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


def plan_value(subject: Subject, role: str, primary: torch.Tensor, target: torch.Tensor | None,
               keep: torch.Tensor) -> torch.Tensor:
    """The tensor a call-plan role gets."""
    if role in ("tokens", "lm_targets", "features"):
        return primary
    if role in ("causal_mask", "torch_causal_mask"):
        decoder_input = target if target is not None else primary
        return causal_mask_value(subject, decoder_input.shape[0], decoder_input.shape[1], decoder_input.device,
                                 torch_convention=role == "torch_causal_mask")
    if role.startswith("target"):
        if target is None:
            raise UsageError(f"{subject.spec} takes a target input; give inputs_for() a target tensor")
        return target
    return mask_value(subject, keep)  # the required mask argument


def known_size(subject: Subject, fact: str) -> int:
    """A size the inputs need (d_model for features, vocab_size for token ids), or how to declare it."""
    value = getattr(subject.facts, fact)
    if not isinstance(value, int):
        raise UsageError(f"{subject.spec}: tfcheck needs {fact} to build inputs and nothing says it; declare "
                         f"{fact}=INT")
    return value


def to_model_layout(subject: Subject, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Forward arguments as the model takes them: for a (length, batch, d) model every 3-D float argument
    (a sequence of features; masks are 2-D) transposed. The identity for every other model."""
    if subject.facts.batch_first is not False:
        return args, kwargs

    def laid_out(v: Any) -> Any:
        return v.transpose(0, 1) if isinstance(v, torch.Tensor) and v.dim() == 3 and v.is_floating_point() else v
    return tuple(laid_out(v) for v in args), {k: laid_out(v) for k, v in kwargs.items()}


def batch_length(args: tuple, kwargs: dict) -> tuple[int, int]:
    """Batch and length of a forward's arguments: those of the first tensor with at least two dimensions
    (what a forward's cost is counted in)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            return int(value.shape[0]), int(value.shape[1])
    return 1, 1


# ----- masks ------------------------------------------------------------------------------------------

def mask_spec(subject: Subject) -> MaskSpec:
    """The padding mask's argument and convention (no mask argument when nothing settled one)."""
    return subject.facts.mask or MaskSpec(None, "none")


def mask_layout(subject: Subject) -> str:
    return mask_spec(subject).layout or DEFAULT_MASK_LAYOUT


def mask_value(subject: Subject, keep: torch.Tensor) -> torch.Tensor:
    """A (batch, length) keep mask (True = real token) in the model's mask convention and layout."""
    value = in_convention(keep, mask_spec(subject))
    layout = mask_layout(subject)
    if layout == "b1s":
        return value[:, None, :]
    if layout == "b11s":
        return value[:, None, None, :]
    return value


def causal_mask_value(subject: Subject, batch: int, length: int, device: torch.device,
                      torch_convention: bool = False) -> torch.Tensor:
    """The decoder's causal mask as a caller builds it: torch's float (length, length) mask with -inf
    above the diagonal, or the tutorial's keep mask (True on and below the diagonal) in the padding mask's
    convention and layout ((length, length), (batch, length, length) or (batch, 1, length, length))."""
    if torch_convention:
        return nn.Transformer.generate_square_subsequent_mask(length, device=device)
    allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    value = in_convention(allowed, mask_spec(subject))
    layout = mask_layout(subject)
    if layout == "b1s":
        return value.expand(batch, length, length)
    if layout == "b11s":
        return value.expand(batch, 1, length, length)
    return value


def in_convention(keep: torch.Tensor, mask: MaskSpec) -> torch.Tensor:
    """A bool keep tensor (True = may attend) as the mask argument takes it: Hugging Face's attention_mask as
    int64 1/0 (what tokenizers return), other keep masks as bool (what (x != pad) gives)."""
    if mask.convention == "pad":
        return ~keep
    if mask.convention == "additive":
        return torch.zeros(keep.shape, device=keep.device).masked_fill(~keep, float("-inf"))
    return keep.long() if mask.argument == "attention_mask" else keep


# ----- torch.nn.Transformer's calling convention ---------------------------------------------------------

def with_torch_causal_mask(subject: Subject, kwargs: dict, length: int) -> dict:
    """``kwargs`` with tgt_mask = nn.Transformer.generate_square_subsequent_mask(length) when the forward takes
    torch.nn.Transformer's optional (tgt_mask, tgt_is_causal): it leaves the causal mask to the caller, as its
    documentation shows (float, -inf above the diagonal)."""
    if not takes_torch_tgt_mask(subject.model):
        return kwargs
    return {**kwargs, "tgt_mask": nn.Transformer.generate_square_subsequent_mask(length, device=subject.device)}


def with_memory_padding_mask(subject: Subject, kwargs: dict, keep: torch.Tensor) -> dict:
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

