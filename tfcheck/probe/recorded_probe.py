"""One recorded forward of the standard probe, shared by every check that reads recorded ops.

A recorded forward costs a pass of the model; shape.residual, norm.placement, attention.scale,
attention.softmax_axis and embedding.scale each used to record their own. Here the first of them that
asks runs one forward (standard probe inputs, tensor identities on, attention internals visible) with
every registered op observer attached; the others read the same recording (``cost.reused``).

A check that needs tensor values during the forward registers an observer at import::

    @recorded_probe.observer("embedding.scale")
    def _observe(model): return MyObserver(model)   # called as on_op(event, args, kwargs, out)

and reads it back with ``recorded_probe.shared(ctx).observed("embedding.scale")``. An observer that
raises is dropped from the pass; its error is raised again in the check that owns it, so one check's bug
never becomes another check's failure.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.nn as nn

from tfcheck.model.inputs import PROBE_BATCH
from tfcheck.probe.attention_sites import SiteCollector
from tfcheck.recording.recorder import Recorder, Recording

ObserverFactory = Callable[[nn.Module], Callable[..., None]]

_OBSERVERS: dict[str, ObserverFactory] = {"attention sites": SiteCollector}


def registrar(registry: dict[str, ObserverFactory]) -> Callable[[str], Callable[[ObserverFactory], ObserverFactory]]:
    """A decorator ``@observer(name)`` registering ``factory(model) -> on_op`` in ``registry``."""
    def observer(name: str) -> Callable[[ObserverFactory], ObserverFactory]:
        def register(factory: ObserverFactory) -> ObserverFactory:
            registry[name] = factory
            return factory
        return register
    return observer


#: Register ``factory(model) -> on_op`` to run during the shared recorded forward.
observer = registrar(_OBSERVERS)


@dataclass
class RecordedProbe:
    probe: Any  # context.Probe
    recording: Recording
    _observers: dict[str, Any] = field(default_factory=dict)
    _errors: dict[str, Exception] = field(default_factory=dict)

    def observed(self, name: str) -> Any:
        """The observer registered as ``name``, after the forward; its own error if it raised."""
        if name in self._errors:
            raise self._errors[name]
        return self._observers[name]

    def attention_sites(self) -> list:
        return self.observed("attention sites").sites(self.recording)


class FanOut:
    """One ``on_op`` calling every observer; an observer that raises is set aside with its error."""

    @classmethod
    def of(cls, registry: dict[str, ObserverFactory], model: nn.Module,
           extra: dict[str, Callable[..., None]] | None = None) -> FanOut:
        """Every observer of ``registry`` made for ``model``, and ``extra`` ones."""
        return cls({**{name: factory(model) for name, factory in registry.items()}, **(extra or {})})

    def __init__(self, observers: dict[str, Any]):
        self.observers = observers
        self.errors: dict[str, Exception] = {}

    def __call__(self, event, args, kwargs, out) -> None:
        for name, on_op in list(self.observers.items()):
            if name in self.errors:
                continue
            try:
                on_op(event, args, kwargs, out)
            except Exception as exc:  # noqa: BLE001 - raised again in the check that owns the observer
                self.errors[name] = exc


def shared(ctx) -> RecordedProbe:
    """The model's shared recorded forward, run on first use and memoised with the other probes."""
    from tfcheck.probe.attention_view import visible_attention

    subject = ctx.subject
    length = subject.probe_length()
    key = ("recorded", PROBE_BATCH, length)
    if key in subject.probe_cache:
        ctx.cost.reused += 1
        return subject.probe_cache[key]
    recorder, fan_out = start(subject.model)
    args, kwargs = subject.make_inputs(PROBE_BATCH, length)
    with visible_attention(), recorder:
        probe = ctx.run(args, kwargs, f"a recorded forward at batch {PROBE_BATCH}, length {length} (shared by the "
                                      "checks that read the recorded ops)")
    return keep(subject, probe, recorder, fan_out)


def start(model: nn.Module, extra: dict[str, Callable[..., None]] | None = None) -> tuple[Recorder, FanOut]:
    """The recorder of the shared recorded forward, with every registered observer (and ``extra`` ones, such as
    the trial's structure observer) attached; run the forward under it inside ``visible_attention()``."""
    fan_out = FanOut.of(_OBSERVERS, model, extra)
    return Recorder(model, track_ids=True, on_op=fan_out), fan_out


def keep(subject, probe: Any, recorder: Recorder, fan_out: FanOut) -> RecordedProbe:
    """Memoise a forward recorded under ``start()``'s recorder as the model's shared recorded probe."""
    recorded = RecordedProbe(probe, recorder.recording, fan_out.observers, fan_out.errors)
    subject.probe_cache[("recorded", PROBE_BATCH, probe.length)] = recorded
    return recorded
