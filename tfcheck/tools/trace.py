"""trace_shapes: every module call of one forward, in order, with its input and output shapes and dtypes,
its parameter count, and the functional operations that matter inside attention (matmul, softmax,
scaled_dot_product_attention, view/reshape/transpose/permute), so the head split (b, s, d) -> (b, h, s, d_k)
is visible even where no module wraps it.

It returns a data object and prints nothing: a one-line ``repr()``, a rich tree in a terminal or notebook
(``depth=`` folds the calls below a depth), plain text from ``str()``, ``to_dict()`` / ``to_json()`` for
tools. When the forward raises, the trace up to the failure is returned with ``trace.error`` set (the
explanation and its table row) and the failing call marked; ``trace.raise_if_failed()`` turns that back into
an exception.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from tfcheck.display import rich_view, text_view
from tfcheck.errors import UsageError
from tfcheck.model.build.user_code import user_code
from tfcheck.model.trial.trial import layouts_to_try
from tfcheck.probe.attention_view import visible_attention
from tfcheck.recording.recorder import (
    ModuleCall,
    OpEvent,
    Recorder,
    Recording,
    describe,
    structure_dict,
    structure_text,
)

#: Function-level ops shown in a trace (by their short name): what shapes attention and its heads.
SHOWN_OPS = frozenset({
    "matmul", "bmm", "baddbmm", "einsum", "softmax", "log_softmax", "scaled_dot_product_attention",
    "view", "reshape", "transpose", "permute", "masked_fill", "masked_fill_", "split", "chunk", "flatten",
    "unflatten", "multi_head_attention_forward", "__matmul__", "mT", "rearrange",
})
#: trace_shapes' own keyword options; every other keyword goes to forward (``forward_kwargs=`` for one named
#: like these).
OPTIONS = ("device", "depth", "forward_kwargs")
#: Tied parameter groups named in the header before "and N more".
SHOWN_TIES = 2
#: Fused calls whose aten internals are shown under them.
FUSED = frozenset({"scaled_dot_product_attention", "multi_head_attention_forward", "_native_multi_head_attention"})
SHOWN_ATEN = frozenset({"mm", "bmm", "baddbmm", "addmm", "_softmax", "_safe_softmax", "softmax", "view",
                        "transpose", "permute", "_scaled_dot_product_flash_attention_for_cpu",
                        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                        "masked_fill", "_unsafe_view", "mul"})


@dataclass
class TraceFailure:
    """Where and why the traced forward stopped."""

    message: str
    row: str | None
    module: str | None
    file: str | None
    line: int | None
    exception: BaseException | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        return {"message": self.message, "row": self.row, "module": self.module, "file": self.file, "line": self.line}


@dataclass
class Trace:
    """The record of one forward. ``calls`` and ``ops`` are in execution order.

    ``total_params`` counts each parameter tensor once; ``tied`` lists the names that share one tensor (the
    first name is where it is registered first). ``depth`` is how deep the tree is shown (None: every call);
    the calls and ``to_dict()`` always hold every call."""

    model_name: str
    device: str
    inputs: Any
    total_params: int
    recording: Recording
    error: TraceFailure | None = None
    notes: list[str] = field(default_factory=list)
    tied: list[tuple[str, ...]] = field(default_factory=list)
    depth: int | None = None
    _model: nn.Module | None = field(default=None, repr=False)
    _example: tuple | None = field(default=None, repr=False)

    @property
    def calls(self) -> list[ModuleCall]:
        return self.recording.calls

    @property
    def ops(self) -> list[OpEvent]:
        return self.recording.ops

    @property
    def ok(self) -> bool:
        return self.error is None

    def parameters_text(self) -> str:
        """``136,192 parameters (tied: lm_head.weight = embed.weight, counted once)``."""
        text = f"{self.total_params:,} parameters"
        if self.tied:
            ties = [" = ".join((*names[1:], names[0])) for names in self.tied[:SHOWN_TIES]]
            more = f" and {len(self.tied) - SHOWN_TIES} more" if len(self.tied) > SHOWN_TIES else ""
            text += f" (tied: {'; '.join(ties)}{more}, counted once)"
        return text

    def raise_if_failed(self) -> Trace:
        if self.error is not None:
            raise UsageError(f"the traced forward failed: {self.error.message}") from self.error.exception
        return self

    def shown_ops(self, call: ModuleCall) -> list[OpEvent]:
        """The ops a reader wants under a call: attention-shaping function calls made directly in it,
        and the aten internals of fused calls."""
        out = []
        for op in self.recording.ops_in(call):
            if op.call != call.index or op.phase != "forward":
                continue
            if op.level == "function" and op.short_name in SHOWN_OPS:
                out.append(op)
            elif op.level == "aten" and op.parent_op is not None and \
                    self.ops[op.parent_op].short_name in FUSED and op.short_name in SHOWN_ATEN:
                out.append(op)
        return out

    def summary(self, **kwargs):
        """torchinfo's summary (parameters, mult-adds) of the same model on the same inputs."""
        import torchinfo

        if self._model is None or self._example is None:
            raise UsageError("this trace holds no model to summarise (it was loaded from JSON)")
        args, kw = self._example
        return torchinfo.summary(self._model, input_data=list(args), verbose=0, **kw, **kwargs)

    def to_dict(self) -> dict:
        return {"model": self.model_name, "device": self.device, "inputs": structure_dict(self.inputs),
                "total_params": self.total_params, "tied_params": [list(names) for names in self.tied],
                "calls": [c.to_dict() for c in self.calls],
                "ops": [o.to_dict() for o in self.ops if o.phase == "forward"],
                "error": self.error.to_dict() if self.error else None, "notes": list(self.notes)}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __rich__(self):
        return rich_view(self)

    def __str__(self) -> str:
        return text_view(self)

    def __repr__(self) -> str:
        """One line (the tree of a large model is thousands): ``<Trace TransformerLM: 37 calls, 23,653 parameters
        (ok)>``."""
        if self.error is None:
            state = "ok"
        else:
            where = f" in {self.error.module!r}" if self.error.module is not None else ""
            state = f"failed{where}" + (f": {self.error.row}" if self.error.row else "")
        return f"<Trace {self.model_name}: {len(self.calls):,} calls, {self.total_params:,} parameters ({state})>"

    def _repr_html_(self) -> str:  # a notebook shows the tree
        return f"<pre>{html.escape(str(self))}</pre>"

    def _repr_pretty_(self, printer, cycle):  # IPython without rich's extension
        printer.text(str(self))


def trace_shapes(model: Any, *example_args: Any, device: str | None = None, depth: int | None = None,
                 forward_kwargs: dict[str, Any] | None = None, **example_kwargs: Any) -> Trace:
    """Trace one forward of ``model`` and return the :class:`Trace`.

    ``model`` is an ``nn.Module`` (or a spec string / class, loaded as the checks load it). The positional
    arguments and every keyword other than the options below go to ``model.forward``. With no example
    inputs, tfcheck builds them as its checks do (batch 3, length 7). The model is left as it was.

    Options (keyword-only, never passed to forward):

    - ``device="meta"`` traces on the meta device, parameters replaced by meta tensors (nothing is
      allocated, any size works); ops that need data are reported as the failure.
    - ``depth=N`` shows the tree down to calls N levels below the model (1: its direct children); the calls
      below are folded into a count. The trace still records every call (``calls``, ``to_dict()``).
    - ``forward_kwargs={...}`` keyword arguments for forward, for one named like an option
      (``forward_kwargs={"depth": 3}``); merged with the other keywords.
    """
    example_kwargs = _forward_keywords(example_kwargs, forward_kwargs)
    depth = _checked_depth(depth)
    subject = None
    if not isinstance(model, nn.Module) or not (example_args or example_kwargs):
        from tfcheck.engine.runner import load_subject

        subject = load_subject(model, meta_ok=True) if device != "meta" or isinstance(model, nn.Module) \
            else _meta_subject(model)
        model = subject.model
    if not (example_args or example_kwargs):
        assert subject is not None  # loaded above: no example inputs were given
        if device != "meta" and layouts_to_try(subject):
            # A forward that requires its mask laid out for the attention scores (the tutorial style): the
            # trial forward settles the layout as in the battery, before the inputs are built.
            from tfcheck.engine.runner import settle_facts

            settle_facts(subject)
        # built (batch, length, ...) as the checks build them; laid out as the forward takes them
        example_args, example_kwargs = subject.to_model_layout(*subject.make_inputs(3, subject.probe_length()))
    _refuse_unknown_keywords(model, example_kwargs)
    if device == "meta":
        trace = _trace_meta(model, example_args, example_kwargs)
    elif device is not None:
        raise UsageError(f"trace_shapes(device={device!r}): only device='meta' (or None, the model's own) is supported")
    else:
        from tfcheck.engine.guard import preserved

        # No copy of the parameters (a trace must stay cheap on big models): a forward that writes its own
        # weights is reported instead of undone; buffers, modes, hooks and RNG are restored as always.
        with preserved(model, copy_parameters=False) as written:
            trace = _trace(model, example_args, example_kwargs, "model's own")
        trace.notes.extend(f"the forward wrote parameter {name!r} in place; tfcheck did not restore it"
                           for name in written)
    trace.depth = depth
    trace.notes.extend(_options_forward_also_takes(model, {"device": device, "depth": depth}, example_kwargs))
    return trace


def _forward_keywords(kwargs: dict[str, Any], forward_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    if forward_kwargs is None:
        return kwargs
    if not isinstance(forward_kwargs, dict) or not all(isinstance(k, str) for k in forward_kwargs):
        raise UsageError(f"trace_shapes(forward_kwargs=...) takes a dict of keyword arguments for forward, "
                         f"not {type(forward_kwargs).__name__}")
    both = sorted(set(kwargs) & set(forward_kwargs))
    if both:
        raise UsageError(f"trace_shapes got {', '.join(both)} both as a keyword and in forward_kwargs=; give each once")
    return {**kwargs, **forward_kwargs}


def _checked_depth(depth: Any) -> int | None:
    if depth is None:
        return None
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise UsageError(f"trace_shapes(depth={depth!r}): depth is a whole number >= 0 (0: the model's call only, "
                         "1: and its direct children) or None (every call)")
    return depth


def _options_forward_also_takes(model: nn.Module, given: dict[str, Any], kwargs: dict) -> list[str]:
    """An option given that forward also takes (a forward(x, depth=...)) went to tfcheck, not forward: said so."""
    from tfcheck.model.facts.structure import forward_params

    params = forward_params(model)
    return [f"{name}={value!r} is trace_shapes' option, not passed to {type(model).__name__}.forward, which also "
            f"takes {name}; give forward's as forward_kwargs={{{name!r}: ...}}"
            for name, value in given.items() if value is not None and name in params and name not in kwargs]


def _refuse_unknown_keywords(model: nn.Module, kwargs: dict) -> None:
    """Keyword arguments go to forward: one it does not take is a trace option mistyped (torchinfo's col_names=),
    refused here rather than raised by forward as if the model were broken."""
    from tfcheck.model.facts.structure import forward_params, takes_any_keyword

    params = forward_params(model)
    unknown = [k for k in kwargs if k not in params]
    if unknown and params and not takes_any_keyword(model):
        raise UsageError(
            f"trace_shapes passes keyword arguments to {type(model).__name__}.forward, which takes "
            f"{', '.join(params)}, not {', '.join(unknown)}; trace_shapes' own options are "
            f"{', '.join(o + '=' for o in OPTIONS)}")


def _meta_subject(spec: Any):
    from tfcheck.engine.runner import load_subject

    with torch.device("meta"):
        return load_subject(spec, meta_ok=True)


def _trace_meta(model: nn.Module, args: tuple, kwargs: dict) -> Trace:
    from torch.func import functional_call

    to_meta = lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v  # noqa: E731
    args = tuple(to_meta(a) for a in args)
    kwargs = {k: to_meta(v) for k, v in kwargs.items()}
    state = {n: torch.empty_like(t, device="meta") for n, t in
             list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))}

    def call(*a, **kw):
        return functional_call(model, state, a, kw, tie_weights=True, strict=False)

    return _trace(model, args, kwargs, "meta", call=call)


def _trace(model: nn.Module, args: tuple, kwargs: dict, device: str, call=None) -> Trace:
    call = call or model
    recorder = Recorder(model, aten=FUSED)  # a trace shows aten ops only inside fused calls
    error = None
    with visible_attention(), recorder, torch.no_grad():
        try:
            with user_code():
                call(*args, **kwargs)
        except Exception as exc:
            error = exc
    failure = _failure(model, recorder, error, device) if error is not None else None
    names = _parameter_names(model)
    return Trace(type(model).__name__, device, describe(list(args) + ([kwargs] if kwargs else [])),
                 sum(numel for numel, _ in names.values()), recorder.recording, failure,
                 tied=[tuple(group) for _, group in names.values() if len(group) > 1], _model=model,
                 _example=(args, kwargs))


def _parameter_names(model: nn.Module) -> dict[int, tuple[int, list[str]]]:
    """Each parameter tensor (by identity, in ``parameters()`` order): its size and every name it goes by (a tied
    output head, a block registered twice), in ``named_parameters`` order. The trace counts each tensor once,
    torchinfo per name; one walk gives both the count and the ties."""
    found: dict[int, tuple[int, list[str]]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        found.setdefault(id(p), (p.numel(), []))[1].append(name)
    return found


def _failure(model: nn.Module, recorder: Recorder, exc: BaseException, device: str) -> TraceFailure:
    from tfcheck.explainers.explanation import explain
    from tfcheck.recording.module_stack import ModuleStack

    modules = dict(model.named_modules())
    open_calls = [c for c in recorder.recording.calls if c.raised]
    stack = ModuleStack([(c.path, modules.get(c.path, model), [structure_text(i) for i in c.inputs]
                          if isinstance(c.inputs, list) else []) for c in open_calls])
    explanation = explain(exc, stack, "the traced forward")
    message = explanation.message
    if device == "meta" and _needs_data(exc):
        op = next((o for o in reversed(recorder.recording.ops) if o.raised), None)
        where = f"{op.name} in '{op.module}' at {op.file}:{op.line}" if op else "an operation"
        message = (f"{where} needs tensor data, which the meta device does not have ({type(exc).__name__}: "
                   f"{exc}). Trace on the real device, or make that step shape-only.")
    loc = explanation.location
    return TraceFailure(message, explanation.row, loc.module, loc.file, loc.line, exc)


def _needs_data(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, NotImplementedError) or "meta" in text.lower() or "data-dependent" in text
