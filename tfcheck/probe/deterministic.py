"""Eval-mode forwards without the randomness a model forgot to switch off, for the checks that compare forwards.

A model that runs dropout in eval mode (``F.dropout(x, p)`` without ``training=``, SDPA's ``dropout_p`` not
gated on ``self.training``, a hand-written Bernoulli mask) gives two different outputs for one input. The
flow checks read a change of output as a dependence, so that noise would read as a missing causal mask, a
padding leak or samples that see each other. dropout.eval reports the noise itself; the flow checks run
under ``Neutraliser``, which does what eval mode would have done:

- the dropout functions (``F.dropout``, ``F.dropout1d/2d/3d``, ``F.alpha_dropout``,
  ``F.feature_alpha_dropout``, ``torch.dropout`` and friends, ``F.rrelu``, ``F.multi_head_attention_forward``)
  run with ``training=False``;
- ``F.scaled_dot_product_attention`` runs with ``dropout_p=0``;
- ``torch.bernoulli`` / ``Tensor.bernoulli(_)`` give their expectation (the probabilities), which makes an
  inverted-dropout mask ``x * mask / (1 - p)`` the identity, as eval mode makes dropout.

Random draws it cannot make deterministic (``torch.randn_like`` used as noise, a kernel that draws inside
C++) are noted, not changed, and the torch, CUDA, Python and NumPy generators are compared before and after:
one that moved under the neutraliser means randomness it did not reach.
"""
from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode, resolve_name

from tfcheck.frames import model_frame, short_path
from tfcheck.probe.flow import change_per_position, tolerance
from tfcheck.recording.tensor_storage import same_values

#: Python dropout functions: (the name of their training argument, its position, its default).
_DROPOUT_FUNCTIONS: dict[Callable, tuple[str, int, bool]] = {
    F.dropout: ("training", 2, True), F.dropout1d: ("training", 2, True), F.dropout2d: ("training", 2, True),
    F.dropout3d: ("training", 2, True), F.alpha_dropout: ("training", 2, False),
    F.feature_alpha_dropout: ("training", 2, False),
}
#: The same kernels called through torch's namespace, ``train`` a required positional argument.
_TORCH_DROPOUTS = tuple(getattr(torch, name) for name in ("dropout", "feature_dropout", "alpha_dropout",
                                                          "feature_alpha_dropout", "native_dropout")
                        if hasattr(torch, name))
_BERNOULLI = (torch.bernoulli, torch.Tensor.bernoulli, torch.Tensor.bernoulli_)
#: Random draws left as they are: nothing says what a deterministic stand-in would mean to the model.
_RANDOM_DRAWS = tuple(f for f in (torch.rand, torch.rand_like, torch.randn, torch.randn_like, torch.randint,
                                  torch.randint_like, torch.randperm, torch.multinomial, torch.normal, torch.poisson,
                                  torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.exponential_,
                                  torch.Tensor.geometric_, torch.Tensor.log_normal_, torch.Tensor.cauchy_,
                                  torch.Tensor.random_, torch.Tensor.multinomial))


@dataclass
class Sighting:
    """A random call seen during the forward: how often, and the user's line of the first."""

    calls: int = 0
    at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "at": self.at}


class Neutraliser(TorchFunctionMode):
    """A ``TorchFunctionMode`` that runs dropout as in eval mode and Bernoulli draws as their expectation, noting
    what it changed (``neutralised``) and the random draws it left (``left``). Push it with ``with``; it is
    popped on exit whatever the forward raised."""

    def __init__(self) -> None:
        super().__init__()
        self.neutralised: dict[str, Sighting] = {}
        self.left: dict[str, Sighting] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _BERNOULLI:
            try:
                expected = _expected_bernoulli(func, args, kwargs)
            except Exception:  # noqa: BLE001 - arguments it does not read: the model's own call says what is wrong
                return func(*args, **kwargs)
            _note(self.neutralised, func)
            return expected
        deterministic = _deterministic_arguments(func, args, kwargs)
        if deterministic is not None:
            _note(self.neutralised, func)
            args, kwargs = deterministic
        elif func in _RANDOM_DRAWS:
            _note(self.left, func)
        return func(*args, **kwargs)


def _deterministic_arguments(func: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """The arguments that make a call of a dropout function draw nothing (as eval mode would call it), or None
    when the call draws nothing as it is."""
    try:
        dropout = _DROPOUT_FUNCTIONS.get(func)
    except TypeError:  # an unhashable callable: no dropout function
        return None
    if dropout is not None:
        name, index, default = dropout
        if _active(_argument(args, kwargs, name, index, default), _argument(args, kwargs, "p", 1, 0.5)):
            return _replaced(args, kwargs, name, index, False)
    elif func in _TORCH_DROPOUTS:
        train = _argument(args, kwargs, "train", 2, True)
        if _active(True if train is None else train, _argument(args, kwargs, "p", 1, 0.0)):
            return _replaced(args, kwargs, "train", 2, False)
    elif func is F.scaled_dot_product_attention:
        if _positive(_argument(args, kwargs, "dropout_p", 4, 0.0)):
            return _replaced(args, kwargs, "dropout_p", 4, 0.0)
    elif func is F.rrelu or func is F.multi_head_attention_forward:
        return _bound_training_off(func, args, kwargs)
    return None


def _argument(args: tuple, kwargs: dict, name: str, index: int, default: Any) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


def _replaced(args: tuple, kwargs: dict, name: str, index: int, value: Any) -> tuple[tuple, dict]:
    if name not in kwargs and len(args) > index:
        return (*args[:index], value, *args[index + 1:]), kwargs
    return args, {**kwargs, name: value}


def _positive(p: Any) -> bool:
    try:
        return float(p) > 0
    except (TypeError, ValueError, RuntimeError):  # not a number (a tensor of several): assume it draws
        return True


def _active(training: Any, p: Any) -> bool:
    return bool(training) and _positive(p)


def _bound_training_off(func: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """``func``'s arguments with ``training=False``, when it would draw: rrelu training, or attention training
    with ``dropout_p > 0`` (F.multi_head_attention_forward drops out inside, where this mode does not reach)."""
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    if not bound.arguments.get("training"):
        return None
    if "dropout_p" in bound.arguments and not _positive(bound.arguments["dropout_p"]):
        return None
    bound.arguments["training"] = False
    return bound.args, bound.kwargs


def _expected_bernoulli(func: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
    """E[bernoulli]: the probabilities themselves (the tensor's own values, or ``p``)."""
    source = args[0]
    p = _argument(args, kwargs, "p", 1, None)
    if func is torch.Tensor.bernoulli_:
        value = torch.as_tensor(0.5 if p is None else p, dtype=source.dtype, device=source.device)
        return source.copy_(value.expand_as(source))
    expected = source.clone() if p is None else torch.full_like(source, float(p))
    out = kwargs.get("out")
    return out.copy_(expected) if isinstance(out, torch.Tensor) else expected


_NAMES: dict[Callable, str] = {}


def _note(sightings: dict[str, Sighting], func: Callable) -> None:
    name = _NAMES.get(func)
    if name is None:
        name = _NAMES[func] = (resolve_name(func) or repr(func)).replace("torch.nn.functional.", "F.")
    seen = sightings.setdefault(name, Sighting())
    seen.calls += 1
    if seen.at is None:
        seen.at = _user_line()


def _user_line() -> str | None:
    found = model_frame(1)
    return f"{short_path(found[0])}:{found[1]}" if found is not None else None


# ----- the generators ----------------------------------------------------------------------------------------

def generator_states() -> dict[str, Any]:
    """Every random generator a forward may draw from, as comparable values."""
    states: dict[str, Any] = {"torch": torch.random.default_generator.get_state(), "python random": random.getstate(),
                              "numpy": np.random.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def moved(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The generators whose state changed between two ``generator_states()``."""
    return [name for name in before if not _same(before[name], after.get(name))]


def reseed(seed: int) -> None:
    """Every generator ``generator_states`` reads, seeded with ``seed``."""
    # Not torch.manual_seed: with CUDA not yet initialised it queues a seed that outlives the caller's guard.
    torch.random.default_generator.manual_seed(seed)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    random.seed(seed)
    np.random.seed(seed)


def restore(states: dict[str, Any]) -> None:
    torch.random.default_generator.set_state(states["torch"])
    random.setstate(states["python random"])
    np.random.set_state(states["numpy"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and same_values(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _change(first: torch.Tensor, second: torch.Tensor) -> float:
    """The largest change per position; a NaN or infinity at the same place in both is no change."""
    if first.shape != second.shape:
        return float("inf")
    if not first.numel():
        return 0.0
    first, second = first.detach(), second.detach()
    same = (first == second) | (torch.isnan(first) & torch.isnan(second))
    zero = torch.zeros((), dtype=first.dtype, device=first.device)
    return float(change_per_position(torch.where(same, zero, first), torch.where(same, zero, second)).max())


# ----- the measurement ---------------------------------------------------------------------------------------

#: The evidence key of the determinism measurement, in the findings of the checks it makes inconclusive.
EVIDENCE_KEY = "nondeterministic"


@dataclass
class Determinism:
    """Two eval-mode forwards of the standard probe: the memoised one, and one under the ``Neutraliser`` from
    another random state. ``change`` is the largest change per position between them; it is a measurement of
    the model's noise only when nothing was neutralised (otherwise the second forward lacks the noise)."""

    what: str
    change: float
    tolerance: float
    neutralised: dict[str, Sighting]
    left: dict[str, Sighting]
    #: generators that moved during the neutralised forward: randomness the neutraliser did not reach
    moved: list[str]

    @classmethod
    def of(cls, what: str, first: torch.Tensor, second: torch.Tensor, neutraliser: Neutraliser,
           generators_moved: list[str]) -> Determinism:
        finite = torch.nan_to_num(first.detach(), nan=0.0, posinf=0.0, neginf=0.0)
        return cls(what, _change(first, second), tolerance(finite), dict(neutraliser.neutralised),
                   dict(neutraliser.left), generators_moved)

    @classmethod
    def drew_nothing(cls, what: str) -> Determinism:
        """Forwards that moved no random generator: deterministic without a second forward to compare."""
        return cls(what, 0.0, 0.0, {}, {}, [])

    @property
    def neutralises(self) -> bool:
        """A random op ran in eval mode and the neutraliser made it deterministic."""
        return bool(self.neutralised) and not self.moved

    @property
    def uncontrolled(self) -> bool:
        """Eval-mode forwards stay random in a way the neutraliser cannot undo: comparisons of forwards would
        measure noise."""
        if self.neutralised:
            return bool(self.moved)
        return self.change > self.tolerance

    @staticmethod
    def random_ops(seen: dict[str, Sighting]) -> str:
        """Random calls, for messages: "F.dropout at model.py:12 (8 calls in one forward)"."""
        return ", ".join(name + (f" at {s.at}" if s.at else "") + f" ({s.calls} call{'s' if s.calls != 1 else ''} in "
                         "one forward)" for name, s in seen.items())

    def evidence(self) -> dict[str, Any]:
        return {"measured": self.what, "change": self.change, "tolerance": self.tolerance,
                "neutralised": {k: v.to_dict() for k, v in self.neutralised.items()},
                "not_neutralised": {k: v.to_dict() for k, v in self.left.items()},
                "generators_moved": list(self.moved)}
