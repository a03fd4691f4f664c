"""The two probes the mask checks share: the outputs of the layer modules captured during a pass, and a perturbation
of the embedded tokens. Both are hooks installed for one block and removed after, also when the model raises."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn

from tfcheck.recording.hooks import Hook, hooked


def layer_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The layers of the model's stacks: children of every outermost nn.ModuleList (the encoder and the
    decoder stack of a seq2seq model; not lists nested inside a layer, such as T5's sublayers)."""
    lists: list[str] = []
    layers: list[tuple[str, nn.Module]] = []
    for path, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and not any(path.startswith(p + ".") for p in lists):
            lists.append(path)
            layers.extend((f"{path}.{name}" if path else name, child) for name, child in module.named_children())
    return layers


def first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    hidden = getattr(value, "last_hidden_state", None)
    return hidden if isinstance(hidden, torch.Tensor) else None


@contextlib.contextmanager
def captured_layers(model: nn.Module, rows: int, seq_first: bool = False) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Collect (path, output) of every layer module called during the block, in call order, for outputs
    laid out (rows, length, ...); ``seq_first``: the layers work in (length, rows, ...) (torch's
    batch_first=False), and their outputs are transposed. The hooks are removed after, also when the model raises."""
    captured: list[tuple[str, torch.Tensor]] = []

    def hook_for(path: str):
        def hook(module, args, output):
            t = first_tensor(output)
            if seq_first and t is not None and not t.is_nested and t.dim() >= 2:
                t = t.transpose(0, 1)
            if t is not None and not t.is_nested and t.dim() >= 2 and t.shape[0] == rows and t.is_floating_point():
                captured.append((path, t.detach().clone()))
        return hook

    with hooked(Hook(module, hook_for(path)) for path, module in layer_modules(model)):
        yield captured


@contextlib.contextmanager
def perturbed_embedding(model: nn.Module, tokens: torch.Tensor, where: torch.Tensor, seed: int) -> Iterator[list]:
    """Add a random vector, of the embedding's own scale, to the embedded tokens at ``where`` (bool, the
    shape of ``tokens``), so that dependences too small to show through a token change still show.

    Every nn.Embedding is hooked, and the one that receives ``tokens`` is perturbed: the token embedding
    is not always the first (a seq2seq model may embed the source first) and may be shared between the
    source and the target (T5), so it is recognised by its input, not by its place. The input may be the tokens
    extended on the right (Longformer pads its ids to a multiple of its attention window before embedding them):
    then only the tokens' own positions are perturbed. The yielded list names the embeddings perturbed."""
    gen = torch.Generator().manual_seed(seed)
    perturbed: list[str] = []

    def hook_for(path: str):
        def hook(module, args, output):
            if not (args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor)
                    and embeds_tokens(args[0], tokens) and output.shape[:2] == args[0].shape[:2]):
                return output
            scale = output.detach().double().pow(2).mean().sqrt().clamp_min(1e-6)
            noise = torch.randn(output.shape, generator=gen, dtype=torch.float64) * scale
            at = where.to("cpu")
            if args[0].shape != tokens.shape:
                at = torch.cat([at, at.new_zeros(at.shape[0], args[0].shape[1] - at.shape[1])], dim=1)
            delta = (noise * at[..., None]).to(output.device, output.dtype)
            perturbed.append(path)
            return output + delta
        return hook

    with hooked(Hook(module, hook_for(path)) for path, module in model.named_modules()
                if isinstance(module, nn.Embedding)):
        yield perturbed


def embeds_tokens(ids: torch.Tensor, tokens: torch.Tensor) -> bool:
    """Whether an embedding's input is ``tokens``, or ``tokens`` (batch, length) followed by more positions
    (ids padded on the right inside forward)."""
    if ids.shape == tokens.shape:
        return torch.equal(ids, tokens.to(ids.device))
    if tokens.dim() != 2 or ids.dim() != 2 or ids.shape[0] != tokens.shape[0] or ids.shape[1] < tokens.shape[1]:
        return False
    return ids.dtype == tokens.dtype and torch.equal(ids[:, :tokens.shape[1]], tokens.to(ids.device))
