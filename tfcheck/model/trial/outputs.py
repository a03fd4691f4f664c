"""Reading a forward's return value: which tensor is the output (declared, or settled from the structure of
the first return value, never from its values), the return as the checks read it (the output reshaped from
flattened rows, a head outside forward applied to it), and which last dimensions it may have."""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

from tfcheck.errors import UsageError
from tfcheck.model.facts.facts import AUTO
from tfcheck.recording.recorder import TensorMeta
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest

def infer_output(subject: ModelUnderTest, raw: Any) -> None:
    """Settle output='auto' from a forward's return value (the structure, not the values)."""
    if subject.facts.output != AUTO:
        return
    how, why = output_of(raw)
    subject.facts.output = how
    subject.assumptions.append(Assumption("output", how, why))


def output_of(raw: Any) -> tuple[str | int, str]:
    """How to select the output tensor of a return value like ``raw``, and why."""
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


def returned_output(subject: ModelUnderTest, returned: Any) -> TensorMeta | None:
    """The output among the shapes of a recorded return value (``tfcheck.recording.recorder.describe``: tuples
    become lists, objects dicts), selected as ``select_output`` would select it from the return itself."""
    how = subject.facts.output
    if how in (None, AUTO):
        how = next((name for name in ("logits", "last_hidden_state")
                    if isinstance(returned, dict) and isinstance(returned.get(name), TensorMeta)), None)
    if how in (None, AUTO):
        values = returned if isinstance(returned, list) else list(returned.values()) \
            if isinstance(returned, dict) else [returned]
        return next((v for v in values if isinstance(v, TensorMeta)), None)
    if how == "tensor":
        return returned if isinstance(returned, TensorMeta) else None
    if isinstance(how, int) and isinstance(returned, list) and -len(returned) <= how < len(returned):
        value = returned[how]
    else:
        value = returned.get(how) if isinstance(returned, dict) else None
    return value if isinstance(value, TensorMeta) else None


def as_checks_read(subject: ModelUnderTest, model: torch.nn.Module, raw: Any, batch: int, length: int) -> Any:
    """The return of a forward of ``model`` (the model or a training copy of it) at (batch, output length) as
    every check reads it: flattened (batch·length, ...) rows reshaped (``tfcheck.model.trial.flat_outputs``), and a
    head forward does not call applied (the head of ``model``, so a copy's gradients reach its own). Unchanged
    for a model that needs neither; called on the user's code (the head is theirs)."""
    facts = subject.facts
    if facts.head is None and not facts.flat_output:
        return raw
    how = facts.output if facts.output not in (None, AUTO) else output_of(raw)[0]
    value = select_output(raw, how)
    if not isinstance(value, torch.Tensor):
        return raw
    if facts.flat_output:
        value = unflattened(subject, value, batch, length)
    if facts.head is not None:
        value = model.get_submodule(facts.head)(value)
    return replaced(raw, how, value)


def unflattened(subject: ModelUnderTest, value: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """Flattened rows as (batch, length, ...): (length, batch, ...) for a seq-first model, which
    ``extract_output`` transposes. Rows that are not batch × length are left as they are: they cannot be read
    per position (``tfcheck.model.trial.flat_outputs.unreadable`` says why)."""
    if value.dim() != 2 or batch * length != value.shape[0]:
        return value
    if subject.facts.batch_first is False:
        return value.reshape(length, batch, value.shape[1])
    return value.reshape(batch, length, value.shape[1])


def replaced(raw: Any, how: str | int, value: torch.Tensor) -> Any:
    """``raw`` with its output (selected by ``how``) replaced by ``value``; the model's own object untouched."""
    if how == "tensor":
        return value
    if isinstance(how, int) and isinstance(raw, (tuple, list)):
        items = list(raw)
        items[how] = value
        return type(raw)(items) if not hasattr(raw, "_fields") else type(raw)(*items)
    if isinstance(raw, dict) and how in raw:
        new = copy.copy(raw)
        new[how] = value
        if isinstance(how, str) and hasattr(new, how):  # a ModelOutput keeps its attributes beside its keys
            object.__setattr__(new, how, value)
        return new
    new = copy.copy(raw)
    setattr(new, str(how), value)
    return new


def select_output(raw: Any, how: str | int) -> Any:
    if how == "tensor":
        return raw
    if isinstance(how, int):
        if isinstance(raw, torch.Tensor):
            raise UsageError(f"output={how} selects an element of a returned tuple, but the model returns a tensor "
                             "itself: declare output=tensor (or leave 'output' undeclared)")
        if not isinstance(raw, (tuple, list)) or not -len(raw) <= how < len(raw):
            size = f"a {type(raw).__name__} of {len(raw)} elements" if isinstance(raw, (tuple, list)) else \
                f"a {type(raw).__name__}"
            raise UsageError(f"output={how} but the model returns {size}: declare the index of the output tensor "
                             "(counting from 0) or its key / attribute")
        return raw[how]
    if isinstance(raw, dict) and how in raw:
        return raw[how]
    if hasattr(raw, how):
        return getattr(raw, how)
    raise UsageError(f"the model's output has no key or attribute {how!r}; declare 'output' to select another")


def extract_output(subject: ModelUnderTest, raw: Any) -> torch.Tensor:
    """The output tensor of a forward's return value, as declared or inferred, (batch, length, ...)."""
    # The trial forward settles the selection before any check runs; a forward outside the engine (a probe
    # built by hand, a replay) settles it from its own return value, the same rule on the same structure.
    infer_output(subject, raw)
    how = subject.facts.output
    if how is None:
        raise UsageError(f"no output selection for {subject.spec}; declare 'output' (a tuple index or a key)")
    value = select_output(raw, how)
    if not isinstance(value, torch.Tensor):
        raise UsageError(
            f"the output selected by output={how!r} is a {type(value).__name__}, not a tensor. Declare "
            "'output' as the tuple index or the key/attribute of the output tensor (e.g. output=logits)."
        )
    if subject.facts.batch_first is False and value.dim() >= 2:
        return value.transpose(0, 1)
    return value


def expected_last_dims(subject: ModelUnderTest) -> tuple[tuple[int, ...], str]:
    """The last dimensions the output may have (empty: any), and why."""
    facts = subject.facts
    named = facts.output
    d_model, vocab = facts.d_model, facts.output_vocab_size
    if facts.padded_vocab_size is not None and vocab is not None and facts.padded_vocab_size > vocab:
        vocab = facts.padded_vocab_size  # the config pads it for speed: the head is this wide by design
    kind = subject.kind
    if named in ("logits", "lm_logits"):
        return known(vocab), "vocab_size (the output is named logits)"
    if named in ("last_hidden_state", "hidden_states", "encoder_last_hidden_state"):
        return known(d_model), "d_model (the output is named last_hidden_state)"
    if facts.returns == "logits":
        return known(vocab), f"vocab_size ({subject.source_of('returns')})"
    if facts.returns == "hidden states":
        return known(d_model), f"d_model ({subject.source_of('returns')})"
    if facts.takes_features:
        return known(d_model), "d_model (the model takes features, not token ids)"
    if kind in ("decoder", "seq2seq"):
        return known(vocab), f"vocab_size (kind={kind} outputs logits)"
    if kind in ("encoder", "attention"):
        return known(d_model), f"d_model (kind={kind} outputs hidden states)"
    # Unknown kind: hidden states and logits are both legitimate; judging one would be a false alarm.
    return known(d_model, vocab), "d_model or vocab_size (kind unknown; declare kind to pin it)"


def known(*values: int | None) -> tuple[int, ...]:
    return tuple(dict.fromkeys(v for v in values if v is not None))
