"""What tfcheck gives up of its own small Hugging Face config when the config or the model's constructor refuses
it (issue 15), before it gives up the small sizes: its choices beyond the sizes, and widths the small d_model
broke the relation of.

- tfcheck's dropout rates (0.1, so that dropout.eval has noise to find): DiffLlama refuses attention_dropout > 0;
- tfcheck's layer layout (every kind of layer of a hybrid stack, mrope sections): a kind of layer may need fields
  the config leaves unset (Qwen4-Exp's indexed attention, its indexer sizes None by default);
- a width the config does not derive, equal to d_model or narrower by default, kept so beside the small d_model
  (SqueezeBERT asserts embedding_size == hidden_size; MobileBERT's LM head is hidden_size - embedding_size wide);
- a sub-config tfcheck made small: the modeling code may fix a relation the config does not state (BridgeTower's
  vision layers have hidden_size // 64 heads).

Each retry says what it gave up, for the report. The user's values are never changed. Plain arithmetic on config
objects: importing it imports no torch.
"""
from __future__ import annotations

import copy
import inspect
import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tfcheck.model.build import names
from tfcheck.model.build.small_sizes import quantity

#: Config fields named as widths: the ones a width relation may hold between (embedding_size, intra_bottleneck_size).
_WIDTH = re.compile(r"([a-z]+_)*(size|dim)")


#: How many steps a retry combines before it takes all of them (six steps: 22 retries, not 63).
_AT_ONCE = 2


@dataclass(frozen=True)
class Retry:
    """A config's arguments with some of tfcheck's choices given up, and what was given up (for the report)."""

    what: str
    arguments: dict[str, Any]


def hugging_face_retries(build: Callable[..., Any], arguments: Mapping[str, Any], layout: Iterable[str],
                         subs: Iterable[str], given: Mapping[str, Any]) -> list[Retry]:
    """The arguments to retry ``build`` with, fewest changes first: the steps below that change something, one
    and two at a time, then all of them (``layout``: the fields tfcheck set to keep the layer layout; ``subs``:
    the sub-configs it made small)."""
    steps: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = []
    widths = width_relations(build, arguments, given)
    if widths:
        steps.append((f"widths kept in their default relation to d_model ({_listed(widths)})",
                      lambda a: {**a, **widths}))
    dropouts = [n for n in arguments if n not in given and quantity(n, arguments) == "DROPOUT"]
    if dropouts:
        steps.append((f"tfcheck's dropout rates ({_listed({n: arguments[n] for n in dropouts})}) left at the "
                      "config's defaults", _without(dropouts)))
    kept = [n for n in layout if n in arguments and n not in given]
    if kept:
        steps.append((f"tfcheck's layer layout ({_listed({n: arguments[n] for n in kept})}) left to the config, "
                      "so some kinds of layer may go unchecked",
                      _without(kept)))
    for n in subs:
        if n in arguments and n not in given:
            steps.append((f"{n} left at its class's defaults", _without([n])))
    out = []
    counts = sorted({*range(1, min(len(steps), _AT_ONCE) + 1), len(steps)} - {0})
    for count in counts:
        for chosen in itertools.combinations(steps, count):
            changed = dict(arguments)
            for _, step in chosen:
                changed = step(changed)
            out.append(Retry("; ".join(what for what, _ in chosen), changed))
    return out


def width_relations(build: Callable[..., Any], arguments: Mapping[str, Any],
                    given: Mapping[str, Any]) -> dict[str, Any]:
    """Widths the config takes (not hyper-parameters tfcheck sizes, not derived by it) that equal d_model by default,
    or are narrower by a whole factor, and no longer do beside the small d_model: set equal, or narrower by the
    same factor."""
    try:
        signature = set(inspect.signature(build).parameters)
        default, small = build(), build(**copy.deepcopy(dict(arguments)))
    except Exception:  # noqa: BLE001 - a config that refuses is reported by its caller
        return {}
    width = next((n for n in names.D_MODEL if _int(_get(default, n)) and _int(_get(small, n))), None)
    if width is None:
        return {}
    was, now = _get(default, width), _get(small, width)
    out: dict[str, Any] = {}
    for n in sorted(set(signature) - set(given) - set(names.D_MODEL)):
        v_was, v = _get(default, n), _get(small, n)
        # words=False: a Hugging Face field the word rule would read (embedding_size) is still a width kept here
        known = quantity(n, signature, words=False) is not None
        if not (_WIDTH.fullmatch(n) and not known and _int(v_was) and _int(v) and v_was > 0):
            continue
        if v_was == was and v != now:
            out[n] = now
        elif v_was < was and was % v_was == 0 and v > now and now % (was // v_was) == 0:
            out[n] = now // (was // v_was)
    return out


def _without(dropped: Iterable[str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A step that leaves ``dropped`` to the config (its defaults, or what it derives)."""
    gone = set(dropped)
    return lambda a: {k: v for k, v in a.items() if k not in gone}


def _get(config: Any, name: str) -> Any:
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - a heterogeneous config refuses a global read (Gemma 4's head_dim)
        return None


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _listed(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items())


__all__ = ["Retry", "hugging_face_retries", "width_relations"]
