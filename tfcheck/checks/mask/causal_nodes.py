"""The graph mask.causal's recorded forward is read into: a ``Node`` per tensor an op made, the attention
``Site``s among them and the masks ``Applied`` to their scores or weights, and what the mask reader asks of the
trace that builds the graph (``CausalTrace``, fulfilled by ``causal_trace.CausalTrace``). Apart from both so that
the trace (which makes nodes) and the reader (which marks them) import it and never each other."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch


@dataclass(eq=False)
class Applied:
    """A mask applied to the scores (before the softmax) or to the weights (after it)."""

    node: Node  # the applying op
    mask: Node | None  # the mask's node (None: made before the forward or given to it)
    source: str | None  # then what it is ("argument 'tgt_mask'", "buffer 'bias'")
    #: what it blocks on the first (query, key) plane; None where it blocks nothing it could be read as
    blocked: torch.Tensor | None
    layout: tuple[int, int]  # the mask's (query, key) sizes as it meets the scores (1 where it broadcasts)
    value: float | None = None  # a fill value
    zero_one: bool = False  # a float 0/1 mask added (shifts the scores by 0 or 1)
    detail: str = ""


@dataclass(eq=False)
class Site:
    """One attention over (length, length) of the recorded forward."""

    kind: str  # "softmax", "sdpa" or "mha"
    node: Node  # the softmax, or the attention call
    layer_line: tuple[str | None, int | None]  # the line of the layer's own code that led to it
    scores: Node | None = None  # the product that made the scores (softmax sites)
    before: list[Applied] = field(default_factory=list)  # masks applied to the scores
    after: list[Applied] = field(default_factory=list)  # masks applied to the weights
    unused: list[Applied] = field(default_factory=list)  # masks applied to its scores whose result it never read

    @property
    def module(self) -> str:
        return self.node.module


@dataclass(eq=False)
class Node:
    """The op that made a tensor of the recorded forward, and the nodes of its tensor inputs."""

    index: int
    op: str
    file: str | None  # the user's line (the innermost frame of the user's code)
    line: int | None
    module: str
    parents: tuple[Node | None, ...]  # None: a tensor made before the forward (a buffer) or given to it
    sources: tuple[str | None, ...]  # for a None parent: "buffer 'bias'", "argument 'tgt_mask'", or None
    shape: tuple[int, ...]
    floating: bool
    own: tuple[str | None, int | None] = (None, None)  # the line in a method of one of the model's modules
    masky: bool = False  # could be (part of) a mask: not floating, or laid out (length, length) / (length, 1)
    scores: bool = False  # attention scores: a product of activations with (length, length) last axes
    weights: Site | None = None  # attention weights of that site (a softmax output, or carried on)
    applied: Applied | None = None  # this op applies a mask to scores or weights

    @property
    def where(self) -> tuple[str | None, int | None]:
        return self.file, self.line

    def lineage(self, through: str = "masky", limit: int = 200) -> list[Node]:
        """This node and the ones it was made from that are still a mask (``through="masky"``) or still the
        scores (``"scores"``), nearest first, each once: never the hidden states, so never another layer's."""
        seen: list[Node] = []
        todo: list[Node] = [self]
        while todo and len(seen) < limit:
            node = todo.pop(0)
            if any(node is s for s in seen):
                continue
            seen.append(node)
            todo.extend(p for p in node.parents if p is not None and getattr(p, through))
        return seen


class CausalTrace(Protocol):
    """What the reader asks of the trace that feeds it (``causal_trace.CausalTrace``): which node made a tensor,
    what a tensor made before the forward is, and the leaking layer's own line running now."""

    def node_of(self, t: torch.Tensor) -> Node | None: ...

    def source_of(self, t: torch.Tensor) -> str | None: ...

    def layer_line(self) -> tuple[str | None, int | None]: ...
